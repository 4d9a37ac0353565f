"""Fixtures shared by the cascade tests: `teacher` is the module's `teacher_server` (a FakeTeacher
over that module's judgments) reset to answer normally, with no server key in the environment."""

from __future__ import annotations

import pytest


@pytest.fixture
def teacher(teacher_server, monkeypatch):
    monkeypatch.delenv("JUDGEFORGE_API_KEY", raising=False)
    teacher_server.mode, teacher_server.calls = "ok", 0
    return teacher_server
