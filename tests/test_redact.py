"""judgeforge.redact: URLs, upstream error text and log records never carry a credential (issue 18,
findings 2-3). Unit and property tests of the pure module; the end-to-end check against a real server
is tests/serve/test_secrets.py."""

from __future__ import annotations

import logging
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from judgeforge.redact import (MASK, SUMMARY_CHARS, RedactingFilter, redact_url, scrub, summary,
                               url_credentials_problem)

# A secret: 8-40 characters of the key alphabet, with a digit (as real keys and passwords have).
secrets = st.text(string.ascii_letters + string.digits + "-_", min_size=8, max_size=40).filter(
    lambda s: any(c.isdigit() for c in s) and any(c.isalpha() for c in s))
prose = st.text(string.ascii_letters + " .,:;!?()\n", max_size=300)


@pytest.mark.parametrize("url,expected", [
    ("http://user:pa55@host:8001/v1", "http://***@host:8001/v1"),
    ("https://token@api.example.com/v1/chat", "https://***@api.example.com/v1/chat"),
    ("https://h/v1?key=abc123&model=gpt-4", "https://h/v1?key=***&model=gpt-4"),
    ("https://h/v1?api_key=abc&x_token=q;sig=z", "https://h/v1?api_key=***&x_token=***;sig=***"),
    ("https://h/cb#access_token=abc", "https://h/cb#access_token=***"),
    ("http://127.0.0.1:8001/v1", "http://127.0.0.1:8001/v1"),
    ("http://u:p@h/p@q", "http://***@h/p@q"),  # an @ in the path is no userinfo
    ("not a url", "not a url"),
])
def test_redact_url(url, expected):
    assert redact_url(url) == expected


@pytest.mark.parametrize("text,kept,gone", [
    ("Incorrect API key provided: Bearer teacher-secret-1", "Incorrect API key provided: Bearer",
     "teacher-secret-1"),
    ("Incorrect API key provided: sk-proj-abc123def", "Incorrect API key provided", "abc123def"),
    ("{'authorization': 'Bearer tok3n', 'x-api-key': 'k3y'}", "'authorization': 'Bearer", "tok3n"),
    ('{"api_key": "v4lue", "model": "gpt-4"}', '"model": "gpt-4"', "v4lue"),
    ("Authorization: Basic dXNlcjpwdw==", "Authorization: Basic", "dXNlcjpwdw=="),
    ("password=hunter2 and more", "and more", "hunter2"),
    ("POST http://u:hunter2@h/v1/chat failed", "POST http://***@h/v1/chat failed", "hunter2"),
    ("session 7c9e6679f7424e2c8b3fb4b2ab5b1f4d7c9e6679 expired", "session", "7c9e6679f742"),
])
def test_scrub_masks_credentials_and_keeps_the_rest(text, kept, gone):
    out = scrub(text)
    assert kept in out and gone not in out and MASK in out


def test_scrub_keeps_prose():
    for text in ("Basic auth required", "teacher overloaded", "The model `gpt-4` does not exist.",
                 "maximum context length is 2048 tokens", "Error code: 500"):
        assert scrub(text) == text


@given(secrets, secrets)
def test_no_password_survives_in_a_url(user, password):
    url = f"https://{user}:{password}@api.example.com/v1?key={password}"
    for out in (redact_url(url), scrub(f"calling {url} failed"), summary(f"GET {url}: 401")):
        assert password not in out and user not in out


@settings(max_examples=200)
@given(prose, secrets, prose, st.sampled_from(["Bearer {}", "api_key={}", "{}", "'password': '{}'",
                                               "token: {}", "http://x:{}@h/v1"]))
def test_a_known_secret_never_survives(before, secret, after, shape):
    text = before + shape.format(secret) + after
    assert secret not in scrub(text, [secret])
    assert secret not in summary(text, [secret])


@given(st.text(max_size=2000), st.lists(st.text(max_size=20), max_size=3))
def test_scrub_and_summary_are_total_and_bounded(text, known):
    scrub(text, known)
    line = summary(text, known)
    assert len(line) <= SUMMARY_CHARS and "\n" not in line


@given(secrets)
def test_summary_scrubs_before_it_cuts(secret):
    # The key straddles the cut: cutting first would leave a prefix no rule recognises.
    text = "x" * (SUMMARY_CHARS - 10) + f" Bearer {secret}"
    assert secret[:6] not in summary(text)[SUMMARY_CHARS - 12:]


def test_summary_collapses_markup_and_whitespace():
    page = "<html><body>\n<h1>502 Bad Gateway</h1>\n\n<hr><center>nginx</center></body></html>"
    assert summary(page) == "502 Bad Gateway nginx"


@pytest.mark.parametrize("url,problem", [
    ("http://user:pw@127.0.0.1:8001/v1", "credentials"), ("https://key@api.example.com/v1", "credentials"),
    ("https://h/v1?key=abc", "query"), ("https://api.openai.com/v1", None),
    ("http://127.0.0.1:8001/v1", None),
])
def test_url_credentials_problem(url, problem):
    got = url_credentials_problem(url)
    assert (got is None) if problem is None else (problem in got)
    assert got is None or "pw" not in got and "abc" not in got  # the reason never quotes the URL


def test_redacting_filter_scrubs_formatted_records():
    record = logging.LogRecord("httpx", logging.INFO, __file__, 1, "HTTP Request: %s %s", ("POST",
                               "http://u:hunter2@h/v1?key=abc"), None)
    assert RedactingFilter().filter(record)
    assert record.getMessage() == "HTTP Request: POST http://***@h/v1?key=***"
