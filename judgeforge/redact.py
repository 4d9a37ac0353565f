"""Secrets never leave: the one owner of redaction for endpoint URLs, upstream error text and log records.

Pure (no I/O, no framework imports) and total: every function takes any string and never raises.
Used wherever a URL or an upstream error body could reach an answer, a log line, a report or a config
error: the openai engine (the cascade teacher's client), the cascade, `judgeforge serve`'s
resolved-config log, config validation messages and eval reports.

- `redact_url(url)`: the userinfo (`user:password@`) and every secret-looking query or fragment value
  (`key=`, `api_key=`, `token=`, `sig=`, ...) replaced by `***`.
- `scrub(text, secrets=())`: every URL in the text redacted, credentials after `Bearer`/`Basic` and
  after labels such as `Authorization:`, `api_key=`, `password=` masked, OpenAI-style `sk-...` keys
  and long random-looking tokens masked, and each known secret (the configured keys) replaced
  wherever it appears.
- `summary(text, secrets=())`: an upstream error body as one bounded, scrubbed line (tags and
  whitespace collapsed) for an answer or a log.
- `url_credentials_problem(url)`: why a configured endpoint URL is refused (credentials or a query
  in it), or None.
- `RedactingFilter` / `guard_loggers`: scrub records of third-party loggers (httpx logs request URLs).
"""

from __future__ import annotations

import logging
import re
from typing import Iterable

MASK = "***"
SUMMARY_CHARS = 200
"""Longest upstream error summary relayed: enough for a status reason, too short for a page."""
MIN_SECRET_CHARS = 4
"""Known secrets shorter than this are not searched for (masking every "a" would garble the text)."""

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"'<>`]+")
# scheme://, then the authority up to the first / ? # (its userinfo is everything before its last @).
_URL_PARTS = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/?#]*@)?(?P<rest>.*)$",
                        re.S)
_SECRET_NAME = re.compile(r"key|token|secret|pass|pwd|auth|sig|credential|session", re.I)
_PARAM = re.compile(r"(?P<name>[^=&;#?]*)=(?P<value>[^&;#]*)")
_SCHEME_CRED = re.compile(r"\b(?P<scheme>bearer|basic|digest)(?P<sep>\s+)(?P<cred>[A-Za-z0-9\-._~+/=:]{3,})",
                          re.I)
# A credential label, its separator (quotes of a dict repr or JSON included), then its value; a value that
# is itself "Bearer ..." is left to _SCHEME_CRED, so the scheme stays readable.
_LABELLED = re.compile(
    r"(?P<label>\b(?:proxy-)?authorization|\bx-api-key|\bapi[-_ ]?key(?: provided)?|\baccess[-_]?token"
    r"|\brefresh[-_]?token|\bclient[-_]?secret|\bpassword|\bpasswd|\bsecret|\btoken)"
    r"(?P<sep>[\"']?\s*[:=]\s*[\"']?)(?!(?:bearer|basic|digest)\s)(?P<value>[^\s\"',;&}\]]+)", re.I)
_SK_KEY = re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}")
# 32+ characters of letters AND digits (a key, a session id, a signature): prose never has those.
_RANDOM_TOKEN = re.compile(r"(?<![A-Za-z0-9_\-])(?=[A-Za-z0-9_\-]*\d)(?=[A-Za-z0-9_\-]*[A-Za-z])"
                           r"[A-Za-z0-9_\-]{32,}(?![A-Za-z0-9_\-])")
_TAG = re.compile(r"<[^<>]{0,200}>")
_SPACE = re.compile(r"\s+")


def _mask_params(part: str) -> str:
    """`name=value` pairs of a query or fragment, values of secret-looking names masked."""
    def one(m: re.Match) -> str:
        name = m.group("name")
        return f"{name}={MASK}" if _SECRET_NAME.search(name) and m.group("value") else m.group()

    return _PARAM.sub(one, part)


def redact_url(url: str) -> str:
    """`url` with its userinfo and secret-looking query/fragment values replaced by `***`."""
    m = _URL_PARTS.match(url)
    if m is None:
        return _mask_params(url) if "=" in url else url
    userinfo = f"{MASK}@" if m.group("userinfo") else ""
    rest = m.group("rest")
    cut = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=-1)
    if cut >= 0:
        rest = rest[:cut] + _mask_params(rest[cut:])
    return m.group("scheme") + userinfo + rest


def _mask_credential(m: re.Match) -> str:
    """`Bearer <credential>` masked, unless the word after the scheme is prose ("Basic auth required"):
    a credential holds a digit or a symbol, or is long."""
    cred = m.group("cred")
    looks_like = len(cred) >= 16 or not cred.isalpha()
    return m.group("scheme") + m.group("sep") + MASK if looks_like else m.group()


def _known(secrets: Iterable[str | None]) -> list[str]:
    return sorted({s for s in secrets if s and len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True)


def scrub(text: str, secrets: Iterable[str | None] = ()) -> str:
    """`text` with every URL redacted and every credential it shows masked (see the module doc)."""
    if not isinstance(text, str):
        text = str(text)
    for secret in _known(secrets):  # first: later rules may split a known secret apart
        text = text.replace(secret, MASK)
    text = _URL.sub(lambda m: redact_url(m.group()), text)
    text = _SCHEME_CRED.sub(_mask_credential, text)
    text = _LABELLED.sub(lambda m: m.group("label") + m.group("sep") + MASK, text)
    text = _SK_KEY.sub("sk-" + MASK, text)
    return _RANDOM_TOKEN.sub(MASK, text)


def summary(text: str, secrets: Iterable[str | None] = (), limit: int = SUMMARY_CHARS) -> str:
    """An upstream error body as one line: scrubbed FIRST (a cut must not leave half a key
    unrecognised), markup and whitespace collapsed, at most `limit` characters."""
    line = _SPACE.sub(" ", _TAG.sub(" ", scrub(text, secrets))).strip()
    return line if len(line) <= limit else line[:limit - 3].rstrip() + "..."


def url_credentials_problem(url: str) -> str | None:
    """Why an endpoint URL must not be configured as given (None when it is fine): credentials in it
    would be logged and answered with every error (and httpx sends them as Basic auth in place of the
    key); a query or fragment is mangled by the SDK, which appends its paths after it."""
    m = _URL_PARTS.match(url.strip()) if isinstance(url, str) else None
    if m is None:
        return None
    if m.group("userinfo"):
        return ("carries credentials (user:password@host): they would be logged, answered with every "
                "error and sent as Basic auth in place of the key; remove them and put the key in the "
                "environment variable named by api_key_env")
    if "?" in m.group("rest") or "#" in m.group("rest"):
        return ("carries a query or fragment (?...): the OpenAI SDK appends its paths after it, and a "
                "key there would be logged; give the base URL only and put the key in the environment "
                "variable named by api_key_env")
    return None


class RedactingFilter(logging.Filter):
    """Scrubs each record's formatted message (a logger filter: it sees the records created on its logger)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a record whose args do not fit its format: leave it to logging's own report
            return True
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


THIRD_PARTY_LOGGERS = ("httpx", "httpx2", "httpcore", "openai", "openai._base_client")
"""Loggers of the HTTP stack under the openai engine that may log request URLs."""


def guard_loggers(names: Iterable[str] = THIRD_PARTY_LOGGERS) -> None:
    """Install one RedactingFilter on each named logger (idempotent)."""
    for name in names:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactingFilter) for f in logger.filters):
            logger.addFilter(RedactingFilter())
