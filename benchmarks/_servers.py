"""Start servers on 127.0.0.1 and drive them with wrk, bounded and always stopped.

Every server binds 127.0.0.1 on a free port, runs in its own process group
(so a multi-worker uvicorn goes down with its workers), and is stopped when
the ``with`` block ends, even on an error or Ctrl-C. Every load run is
bounded by a duration and a fixed number of connections.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: str

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def log_tail(self, lines: int = 20) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as handle:
                return "".join(handle.readlines()[-lines:])
        except OSError:
            return ""


def _wait_ready(server: Server, path: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"{server.name} exited early:\n{server.log_tail()}")
        try:
            with urllib.request.urlopen(server.url + path, timeout=1) as response:
                if response.status < 500:
                    return
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(0.1)
    raise RuntimeError(f"{server.name} did not answer {path} within {timeout:.0f} s:\n{server.log_tail()}")


def _stop(server: Server) -> None:
    if server.process.poll() is not None:
        return
    pgid = server.process.pid  # start_new_session=True: the group id is our child's pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGINT)
    try:
        server.process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        server.process.wait(timeout=5)


@contextlib.contextmanager
def servers(
    specs: Sequence[tuple[str, list[str], str] | tuple[str, list[str], str, dict[str, str]]],
    *,
    ready_timeout: float = 60.0,
) -> Iterator[dict[str, Server]]:
    """Start ``(name, argv with {port}, readiness path[, extra env])`` servers; stop them all."""
    started: dict[str, Server] = {}
    logdir = tempfile.mkdtemp(prefix="mmobs-bench-")
    try:
        for spec in specs:
            name, argv = spec[0], spec[1]
            child_env = {**os.environ, **(spec[3] if len(spec) > 3 else {})}  # type: ignore[misc]
            port = free_port()
            log_path = os.path.join(logdir, f"{name}.log")
            log = open(log_path, "wb")  # noqa: SIM115 - closed when the process ends
            process = subprocess.Popen(
                [a.format(port=port) for a in argv],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=child_env,
                start_new_session=True,
            )
            log.close()
            started[name] = Server(name, port, process, log_path)
        for spec in specs:
            _wait_ready(started[spec[0]], spec[2], ready_timeout)
        yield started
    finally:
        for server in started.values():
            _stop(server)
        shutil.rmtree(logdir, ignore_errors=True)


def uvicorn_argv(target: str, *, app_dir: str, factory: bool = True, log_level: str = "warning") -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "uvicorn",
        target,
        "--app-dir",
        app_dir,
        "--host",
        HOST,
        "--port",
        "{port}",
        "--log-level",
        log_level,
        "--no-access-log",
    ]
    if factory:
        argv.append("--factory")
    return argv


def cpu_seconds(server: Server) -> dict[int, float]:
    """User + system CPU seconds used so far by the server and each of its children, by pid."""
    import psutil

    used: dict[int, float] = {}
    try:
        root = psutil.Process(server.process.pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return used
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        used[process.pid] = times.user + times.system
    return used


# -- wrk ---------------------------------------------------------------------------


@dataclass
class WrkResult:
    requests_per_second: float
    requests: int
    non_2xx: int
    errors: int
    latency_p50: float  # seconds
    latency_p99: float


_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def _seconds(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text.strip())
    return float(match.group(1)) * _UNITS[match.group(2)] if match else float("nan")


def wrk(
    url: str, *, duration: float, connections: int, threads: int = 1, script: str | None = None, timeout: float = 10.0
) -> WrkResult:
    """One bounded wrk run against ``url`` (loopback only)."""
    if not url.startswith(f"http://{HOST}:"):
        raise ValueError("the load generator only targets 127.0.0.1")
    seconds = max(1, round(duration))  # wrk takes whole seconds
    argv = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", f"--timeout={round(timeout)}s", "--latency"]
    if script:
        argv += ["-s", script]
    argv.append(url)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + timeout + 30)
    text = out.stdout
    if out.returncode != 0:
        raise RuntimeError(f"wrk failed ({out.returncode}): {out.stderr.strip()[:500]}")
    rps = re.search(r"Requests/sec:\s+([\d.]+)", text)
    total = re.search(r"(\d+) requests in", text)
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    p50 = re.search(r"^\s+50%\s+(\S+)", text, re.MULTILINE)
    p99 = re.search(r"^\s+99%\s+(\S+)", text, re.MULTILINE)
    if rps is None or total is None:
        raise RuntimeError(f"cannot parse wrk output:\n{text[:1000]}")
    return WrkResult(
        requests_per_second=float(rps.group(1)),
        requests=int(total.group(1)),
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
        errors=sum(int(g) for g in errors.groups()) if errors else 0,
        latency_p50=_seconds(p50.group(1)) if p50 else float("nan"),
        latency_p99=_seconds(p99.group(1)) if p99 else float("nan"),
    )


def post_script(body_path: str, directory: str, content_type: str = "application/json") -> str:
    """A wrk Lua script that POSTs the file at ``body_path``."""
    path = os.path.join(directory, "post.lua")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(
            'wrk.method = "POST"\n'
            f'wrk.headers["Content-Type"] = "{content_type}"\n'
            f'local f = assert(io.open("{body_path}", "rb"))\n'
            'wrk.body = f:read("*a")\n'
            "f:close()\n"
        )
    return path
