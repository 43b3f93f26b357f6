"""The two servers (guarded, unguarded): started, warmed up, restarted after a request that broke one, and run."""

from __future__ import annotations

import tempfile
from io import BytesIO
from pathlib import Path

from tests.support.vllm_server import MMOBS_FLAGS, VllmServer

from .costs import measure
from .report import progress
from .request import Outcome, data_url, send

SERVERS: dict[str, dict[str, str]] = {"guarded": {"MMOBS_VLLM_GUARD": "1"}, "unguarded": {}}


def warm_up_image() -> bytes:
    """A plain 640x480 JPEG, sent once (not measured) so that no measured request pays a first request's costs."""
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(0).integers(0, 256, (480, 640, 3), dtype=np.uint8)
    buffer = BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def start_server(kind: str, venv: Path, model: Path, directory: Path, timeout: float) -> VllmServer:
    """A server of ``kind`` (``guarded``/``unguarded``): healthy, done with its own warm-up and with one request."""
    server = VllmServer(
        venv, model, directory, args=MMOBS_FLAGS, env=SERVERS[kind], name=f"vllm serve ({kind})", timeout=timeout
    )
    try:
        server.wait_until(lambda: "warmup completed" in server.logs(), timeout, "done with its multimodal warm-up")
        status, message = send(server, data_url(warm_up_image()), timeout)
        if status != 200:
            raise RuntimeError(f"{server.name}: the warm-up request got {status} {message[:200]}")
    except BaseException:
        server.stop()
        raise
    return server


def start_retrying(kind: str, venv: Path, model: Path, root: Path, timeout: float, attempts: int = 3) -> VllmServer:
    """``start_server``, tried again (in a fresh directory) when a loaded machine makes it miss its deadline."""
    for attempt in range(attempts):
        directory = Path(tempfile.mkdtemp(prefix=f"{kind}-", dir=root))
        try:
            return start_server(kind, venv, model, directory, timeout)
        except RuntimeError as error:
            print(f"# {kind} server did not start (attempt {attempt + 1}): {str(error)[:300]}", flush=True)
    raise RuntimeError(f"the {kind} server did not start in {attempts} attempts")


def needs_restart(server: VllmServer, outcome: Outcome) -> str | None:
    """Why the server cannot take the next input as it is, or None."""
    if server.process.poll() is not None:
        return f"the server died (exit {server.process.returncode})"
    if outcome.status is None and not outcome.message.startswith("not sent"):
        return "no answer: the server may still be working on it"
    if not outcome.healthy_after:
        return "/health did not answer 200 after the request"
    return None


def last_log_lines(server: VllmServer, count: int = 6) -> list[str]:
    """The end of the server's log, without uvicorn's access lines (the probes' ``GET /health``)."""
    try:
        lines = server.logs().splitlines()
    except OSError:
        return []
    return [line for line in lines if '"GET /health HTTP' not in line][-count:]


def run_server(
    kind: str,
    inputs: list[tuple[str, Path]],
    venv: Path,
    model: Path,
    root: Path,
    *,
    timeout: float,
    start_timeout: float,
    max_url: int,
    results: list[Outcome],
) -> None:
    """Every input, one request at a time, against one server of ``kind`` (restarted whenever it must be)."""
    server = start_retrying(kind, venv, model, root, start_timeout)
    try:
        for name, path in inputs:
            outcome = measure(server, name, kind, path.read_bytes(), timeout=timeout, max_url=max_url)
            reason = needs_restart(server, outcome)
            if reason is not None:
                outcome.notes += [reason + "; restarted", *last_log_lines(server)]
                server.stop()
                server = start_retrying(kind, venv, model, root, start_timeout)
            results.append(outcome)
            print(progress(outcome), flush=True)
    finally:
        server.stop()
