"""A judgment-store writer for the crash and concurrency tests (run as a subprocess, not collected).

    python store_writer.py STORE PREFIX COUNT

Puts COUNT items (0: until killed) as fast as it can: every third one with the teacher's judgment at once,
and every fifth one gets the teacher's judgment added afterwards (`add_teacher`, the rewrite path). After
each write returns it prints `seq key teacher` and flushes: a line on stdout is an acknowledged write.
"""

from __future__ import annotations

import itertools
import sys

from judgeforge.data.store import JudgmentStore, LocalResult, Record, Request, TeacherResult


def record(prefix: str, i: int, teacher: bool) -> Record:
    request = Request("absolute", f"{prefix} instruction {i}", (f"response {i} " * 20,), {"criteria": "helpful"},
                      f"reference {i}" if i % 2 else None, (1, 5))
    local = LocalResult("local-judge", i % 5 + 1, 0.5, {str(s): 0.2 for s in range(1, 6)}, {"3": 1}, "ok")
    t = TeacherResult("gpt-4", f"Teacher feedback {i}.", (i + 1) % 5 + 1, 0.25) if teacher else None
    return Record(request, local, escalated=teacher, teacher=t, replica=prefix, meta={"i": i})


def main(path: str, prefix: str, count: int) -> None:
    with JudgmentStore(path) as store:
        for i in itertools.count() if count == 0 else range(count):
            rec = record(prefix, i, i % 3 == 0)
            seq = store.put(rec)
            ack(seq, rec)
            if i % 5 == 0 and i % 3:
                ack(store.add_teacher(seq, record(prefix, i, True).teacher), rec, True)


def ack(seq: int, rec: Record, teacher: bool | None = None) -> None:
    teacher = rec.teacher is not None if teacher is None else teacher
    sys.stdout.write(f"{seq} {rec.request.key()} {int(teacher)}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
