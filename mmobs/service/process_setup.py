"""What the server process needs from its surroundings before it listens.

Two things uvicorn does not arrange: enough file descriptors for the
connection cap (a distribution's default soft limit, often 1024, is below
the default cap plus what the process needs for itself), and, with several
workers, one directory where every worker writes its metrics so that a scrape
of any of them sums all of them (prometheus_client's multiprocess mode).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import structlog

#: prometheus_client's multiprocess mode reads its directory from this variable.
MULTIPROCESS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: File descriptors kept beyond the connections: decode workers' sockets, metrics files, logs, the listening socket.
_RESERVED_FILES = 256
#: The fewest connections the cap is ever lowered to.
_MIN_CONNECTIONS = 16


def raise_open_files_limit(connections: int) -> int:
    """Let the process hold ``connections`` sockets; the cap actually possible under the hard limit."""
    import resource  # POSIX only; loaded when a server starts, not when the module is read

    wanted = connections + _RESERVED_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < wanted:
        possible = max(_MIN_CONNECTIONS, soft - _RESERVED_FILES)
        structlog.get_logger("mmobs").warning(
            "connection_cap_lowered", open_files_limit=soft, connections=possible, asked=connections
        )
        return possible
    return connections


def prepare_multiprocess_dir() -> str | None:
    """Point every worker at one fresh metrics directory; return it if we made it (the caller removes it).

    A directory the operator named is kept, but emptied of the ``.db`` files of
    an earlier run: their counts would be added to this run's.
    """
    existing = os.environ.get(MULTIPROCESS_DIR_ENV)
    if existing:
        Path(existing).mkdir(parents=True, exist_ok=True)
        for stale in Path(existing).glob("*.db"):
            stale.unlink()
        return None
    made = tempfile.mkdtemp(prefix="mmobs-metrics-")
    os.environ[MULTIPROCESS_DIR_ENV] = made
    return made
