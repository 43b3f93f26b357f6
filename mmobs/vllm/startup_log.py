"""The plugin's own lines (what it hooked, what it declined) in vLLM's log, even those said before vLLM set it up.

vLLM's API server loads its general plugins while it builds its argument
parser, before it configures logging (``vllm.logger.configure_logging``): a
line logged then finds no handler, so an INFO line is lost and a warning comes
out bare on stderr, without vLLM's prefix. :func:`say` logs at once where
vLLM's logger tree has a handler, and otherwise holds the line until vLLM's
``configure_logging`` has run once (it wraps that function for that one call,
then puts vLLM's back). vLLM's prefix then still names the process
``MainProcess`` (it calls itself ``APIServer`` a little later), so the
plugin's own line says which process it is in. :func:`whole_number_env`
reads a size switch, and says so when it cannot.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from typing import Any

#: Under vLLM's namespace, so vLLM's handler (or the user's logging config) writes the plugin's lines.
LOGGER = logging.getLogger("vllm.mmobs")

#: Lines said before vLLM configured its logging, said once it has (see :func:`say`); the plugin says a
#: handful at start-up, and no more than :data:`MAX_PENDING` are held.
_pending_lines: list[tuple[int, str, tuple[Any, ...]]] = []
MAX_PENDING = 64


def say(level: int, message: str, *args: Any) -> None:
    """Log ``message % args`` on :data:`LOGGER` now, or right after vLLM has configured its logging."""
    if LOGGER.hasHandlers():
        LOGGER.log(level, message, *args, stacklevel=2)  # the record names the caller's line
        return
    logger_module = sys.modules.get("vllm.logger")
    configure = getattr(logger_module, "configure_logging", None)
    if logger_module is None or not callable(configure):
        LOGGER.log(level, message, *args)
        return
    if len(_pending_lines) < MAX_PENDING:
        _pending_lines.append((level, message, args))
    if getattr(configure, "__mmobs_says__", False):
        return

    @functools.wraps(configure)
    def configure_logging(*call_args: Any, **call_kwargs: Any) -> Any:
        try:
            return configure(*call_args, **call_kwargs)
        finally:
            setattr(logger_module, "configure_logging", configure)  # noqa: B010 - a module of vLLM, not typed here
            while _pending_lines:
                pending_level, pending, pending_args = _pending_lines.pop(0)
                LOGGER.log(pending_level, pending, *pending_args)

    configure_logging.__mmobs_says__ = True  # type: ignore[attr-defined]
    setattr(logger_module, "configure_logging", configure_logging)  # noqa: B010


def whole_number_env(name: str, default: int) -> int:
    """A switch that sizes something (``MMOBS_VLLM_*_ENTRIES``, ``*_BYTES``): a whole number, else ``default``
    and one warning line naming the switch."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if raw.isdigit():
        return int(raw)
    say(logging.WARNING, "mmobs: %s=%r is not a whole number of 0 or more; using %d", name, raw, default)
    return default
