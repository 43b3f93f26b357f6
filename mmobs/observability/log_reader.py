"""mmobs's events read back from a server's log, whichever format wrote it.

An operator answering an alert holds one server's log, in one of three shapes:

* one JSON object a line: ``mmobs serve --log-format json``, or vLLM with
  mmobs's logging config (``mmobs vllm-logging-config``), or vLLM's own JSON
  formatter (``--logging-config.formatter json``, which renders a record's
  extra attributes as keys). Each line already is the event with its fields;
* vLLM's default text format, ``(APIServer pid=N) WARNING 12-01 08:50:07
  [instrument.py:154] exif_fallback kind=media_with_bytes ...``, where an mmobs
  event is its name and its fields in logfmt
  (:class:`mmobs.observability.stdlib_events.StdlibEventLogger` writes them).

:func:`read_events` turns every line of either kind into the same dictionary,
so one runbook command (``mmobs events server.log | jq ...``) works on every
log: ``event``, ``timestamp``, ``level`` (lower case), ``process``,
``process_name``, ``file``, ``line`` where the line has them, then the event's
fields. A text line of vLLM's own (not an mmobs event) becomes its message as
``event``, as :class:`~mmobs.observability.stdlib_events.JSONFormatter` renders
such records; a text line without vLLM's prefix (uvicorn's, a traceback's) is
not a record and is left out. The text timestamp stays as vLLM wrote it (month,
day and local time).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

#: vLLM's text record: ``(PROCESS pid=N) LEVEL MM-DD HH:MM:SS [file:line] message``.
_VLLM_TEXT = re.compile(
    r"^\((?P<process_name>[A-Za-z_][\w-]*) pid=(?P<process>\d+)\) (?P<level>[A-Z]+) "
    r"(?P<timestamp>\d\d-\d\d \d\d:\d\d:\d\d) \[(?P<file>[^\]:]+):(?P<line>\d+)\] (?P<message>.*)$"
)
_EVENT_NAME = re.compile(r"[a-z][a-z0-9_]*")
#: One logfmt field: a key, then a JSON string or a bare value up to the next space.
_FIELD = re.compile(r' (?P<key>[a-z_][a-z0-9_]*)=(?P<value>"(?:[^"\\]|\\.)*"|[^ "]*)')


def read_events(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """Every record of a log, as one dictionary each (see the module's docstring)."""
    for line in lines:
        event = parse_line(line.rstrip("\r\n"))
        if event is not None:
            yield event


def parse_line(line: str) -> dict[str, Any] | None:
    """One log line as a record, or ``None`` for a line that is no record."""
    if line.startswith("{"):
        try:
            document = json.loads(line)
        except ValueError:
            return None
        if not isinstance(document, dict):
            return None
        document.pop("mmobs_fields", None)  # vLLM's JSON formatter renders every record attribute
        if "event" not in document and isinstance(document.get("message"), str):
            document["event"] = document.pop("message")
        return document
    match = _VLLM_TEXT.match(line)
    if match is None:
        return None
    message = match["message"]
    name, fields = _event_and_fields(message)
    record: dict[str, Any] = {
        "timestamp": match["timestamp"],
        "level": match["level"].lower(),
        "event": name if fields is not None else message,
        "process": int(match["process"]),
        "process_name": match["process_name"],
        "file": match["file"],
        "line": int(match["line"]),
    }
    record.update(fields or {})
    return record


def _event_and_fields(message: str) -> tuple[str, dict[str, Any] | None]:
    """``name k=v k="v w"`` as its name and fields; ``None`` fields when the message is not such an event."""
    name, space, rest = message.partition(" ")
    if not space or not _EVENT_NAME.fullmatch(name):
        return name, None
    fields: dict[str, Any] = {}
    position = 0
    rest = " " + rest
    while position < len(rest):
        field = _FIELD.match(rest, position)
        if field is None:
            return name, None
        fields[field["key"]] = _value(field["value"])
        position = field.end()
    return name, fields or None


def _value(text: str) -> Any:
    """A logfmt value as the event logged it: JSON (a quoted string, a number, ``true``, a list), else text."""
    try:
        return json.loads(text)
    except ValueError:
        return text
