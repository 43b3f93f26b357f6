"""Log fields that stay bounded and on one line, whoever renders them (structlog or stdlib logging).

Kept apart from :mod:`mmobs.observability.logs` so that the stdlib route (:mod:`mmobs.observability.stdlib_events`),
which loads in every vLLM process, needs no structlog.
"""

from __future__ import annotations

#: Longest text (an exception message, a header) that goes into a log field.
MAX_FIELD_CHARS = 200


def safe_text(value: object, limit: int = MAX_FIELD_CHARS) -> str:
    """``str(value)`` with control characters escaped and the length bounded.

    Exception messages from image decoders can carry raw bytes from the file
    (newlines included); escaping them keeps one event on one line and stops
    log injection.
    """
    text = str(value)
    if len(text) > limit * 4:
        text = text[: limit * 4]
    if not text.isprintable():
        text = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)
    if len(text) > limit:
        text = text[: limit - 1] + "\u2026"
    return text
