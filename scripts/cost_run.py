#!/usr/bin/env python
"""What one image costs a loader: CPU seconds and peak memory, in a fresh process.

For each input (the full-size costly classes of ``scripts/corpus/costly/``,
plus a plain 49 MP JPEG and PNG for reference) a child process is started that
imports the loader, reads the input from a file, then loads it (and, for
mmobs, keys it with ``MultiModalHasher``) and reports the outcome. The parent
reads the child's resource usage with ``os.wait4``. CPU seconds are the
child's user + system time spent on the load (the import is measured before
it and subtracted), so contention on a shared machine does not inflate them;
"extra MiB" is the child's peak RSS (``VmHWM``) minus its RSS once the imports
are done and the input is read.

Loaders:

* ``mmobs``: ``mmobs.keys.loader.ImageMediaIO()`` (default limits) then
  ``MultiModalHasher.hash_kwargs("blake3", image=...)``; the outcome is the
  key or the ``BadImageError`` reason.
* ``mmobs-before``: the same, with ``mmobs`` exported from ``--before-ref``
  (``git archive``; by default the last ``main`` without the decode budgets),
  to show the cost before them.
* ``vllm``: vLLM's own ``ImageMediaIO().load_bytes`` (what the plugin guard
  protects).
* ``vllm-guard``: the same, with the mmobs plugin loaded by vLLM's plugin
  loader and ``MMOBS_VLLM_GUARD=1`` (mmobs's structural checks before vLLM
  decodes).

Each child runs under ``RLIMIT_CPU`` (``--cpu-limit``) and ``RLIMIT_AS``
(``--memory-limit``), so a runaway shows as "killed" instead of hurting the
machine. Run it niced on a shared machine::

    nice -n 10 python scripts/cost_run.py --loader mmobs-before --loader mmobs --loader vllm
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.corpus.costly import full_size_inputs  # noqa: E402

_CHILD = r"""
import json, os, resource, sys, time

def usage():
    # VmHWM, not ru_maxrss: Linux carries the parent's high-water mark over fork and exec into ru_maxrss.
    r = resource.getrusage(resource.RUSAGE_SELF)
    with open("/proc/self/status") as f:
        peak = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    return r.ru_utime + r.ru_stime, peak / 1024

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

loader, path = sys.argv[1], sys.argv[2]
import warnings
warnings.simplefilter("ignore")
import numpy, PIL.Image
if loader in ("vllm", "vllm-guard"):
    if loader == "vllm-guard":
        os.environ["MMOBS_VLLM_GUARD"] = "1"
        from vllm.plugins import load_general_plugins
        load_general_plugins()
    from vllm.multimodal.media.image import ImageMediaIO
    io = ImageMediaIO()
    def run(data):
        media = io.load_bytes(data)
        image = getattr(media, "media", media)
        return f"loaded {image.mode} {image.size[0]}x{image.size[1]}"
else:
    from mmobs.errors import BadImageError
    from mmobs.events import observing
    from mmobs.keys.hashing import MultiModalHasher
    from mmobs.keys.loader import ImageMediaIO
    io = ImageMediaIO()
    def run(data):
        with observing(None):
            try:
                media = io.load_bytes(data)
            except BadImageError as error:
                return f"refused: {error.reason}"
            key = MultiModalHasher.hash_kwargs("blake3", image=media)
        return f"key {key[:12]}"
with open(path, "rb") as f:
    data = f.read()
cpu0, _ = usage()
rss0 = rss()
print(json.dumps({"phase": "ready", "rss0": rss0}), flush=True)
try:
    outcome = run(data)
except MemoryError:
    outcome = "MemoryError"
except Exception as error:
    outcome = f"raised {type(error).__name__}: {str(error)[:80]}"
cpu1, peak = usage()
print(json.dumps({"phase": "done", "cpu": cpu1 - cpu0, "peak": peak, "rss0": rss0, "outcome": outcome}), flush=True)
"""


@dataclass
class Result:
    name: str
    loader: str
    size: int
    cpu: float
    peak_mib: float
    extra_mib: float
    outcome: str


def _limits(cpu: int, memory: int) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))


def measure(loader: str, name: str, path: Path, *, pythonpath: str, cpu: int, memory: int) -> Result:
    """Load one input in a fresh child process and read its resource usage."""
    env = {**os.environ, "PYTHONPATH": pythonpath, "PYTHONDONTWRITEBYTECODE": "1"}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, loader if loader.startswith("vllm") else "mmobs", str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=tempfile.gettempdir(),
        preexec_fn=lambda: _limits(cpu, memory),
    )  # fmt: skip
    assert child.stdout is not None
    try:
        lines = child.stdout.read().decode().splitlines()
    except BaseException:  # interrupted: do not leave the child running
        child.kill()
        child.wait()
        raise
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    reports = [json.loads(line) for line in lines if line.startswith("{")]
    ready = next((r for r in reports if r["phase"] == "ready"), None)
    done = next((r for r in reports if r["phase"] == "done"), None)
    size = path.stat().st_size
    peak = usage.ru_maxrss / 1024  # only for a child killed before it reported its own VmHWM
    rss0 = ready["rss0"] if ready else 0.0
    if done is not None:
        return Result(name, loader, size, done["cpu"], done["peak"], done["peak"] - rss0, done["outcome"])
    # Killed before it could report: the whole child's CPU, import included.
    signal_name = signal.Signals(-child.returncode).name if child.returncode < 0 else f"exit {child.returncode}"
    reason = {"SIGXCPU": f"killed at the {cpu} s CPU limit", "SIGKILL": "killed (SIGKILL)"}.get(
        signal_name, signal_name
    )
    if child.returncode == 1 and memory:
        reason = f"died (exit 1; {memory / 2**30:.0f} GiB address-space limit?)"
    return Result(name, loader, size, usage.ru_utime + usage.ru_stime, peak, peak - rss0, reason)


def export_tree(ref: str, into: Path) -> str:
    """``mmobs`` as of ``ref`` (``git archive``), so the child imports that version."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "mmobs"], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return str(into)


def _row(result: Result) -> str:
    return (
        f"| {result.name} | {result.loader} | {result.size / 2**20:.2f} | {result.cpu:.2f} | "
        f"{result.peak_mib:.0f} | {result.extra_mib:.0f} | {result.outcome} |"
    )


def pivot(results: list[Result]) -> str:
    """One row per input, one column group per loader: the table in ``benchmarks/results/2026-11-30-9b1f57c-decode-budgets.md``."""
    loaders = list(dict.fromkeys(r.loader for r in results))
    inputs = list(dict.fromkeys(r.name for r in results))
    cell = {(r.name, r.loader): r for r in results}
    head = "| input | MiB | " + " | ".join(f"{loader}: CPU s, extra MiB, outcome" for loader in loaders) + " |"
    lines = [head, "|---|---:|" + "---|" * len(loaders)]
    for name in inputs:
        row = [name, f"{next(r.size for r in results if r.name == name) / 2**20:.2f}"]
        for loader in loaders:
            r = cell.get((name, loader))
            row.append("" if r is None else f"{r.cpu:.2f} s, {max(r.extra_mib, 0):.0f} MiB, {_short(r.outcome)}")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def _short(outcome: str) -> str:
    if outcome.startswith("key "):
        return "key"
    if outcome.startswith("loaded "):
        return "loaded"
    return outcome.replace("refused: ", "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loader", action="append", choices=["mmobs", "mmobs-before", "vllm", "vllm-guard"],
                        help="loader(s) to measure (default: mmobs)")  # fmt: skip
    parser.add_argument(
        "--before-ref", default="9d413cd",
        help="git ref of mmobs-before (default: 9d413cd, main when the table in benchmarks/results/ was measured)",
    )  # fmt: skip
    parser.add_argument("--only", action="append", default=[], help="measure only inputs whose name contains this")
    parser.add_argument("--cpu-limit", type=int, default=120, help="RLIMIT_CPU of each child, seconds (default 120)")
    parser.add_argument("--memory-limit", type=float, default=6.0, help="RLIMIT_AS of each child, GiB (default 6)")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument("--pivot", type=Path, help="only print the per-input table of a --json file written before")
    args = parser.parse_args(argv)
    if args.pivot:
        print(pivot([Result(**r) for r in json.loads(args.pivot.read_text())]))
        return 0
    loaders = args.loader or ["mmobs"]
    results: list[Result] = []
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}; {os.uname().nodename}; load: {os.getloadavg()}", flush=True)
    print("| input | loader | MiB in | CPU s | peak MiB | extra MiB | outcome |", flush=True)
    print("|---|---|---:|---:|---:|---:|---|", flush=True)
    with tempfile.TemporaryDirectory(prefix="mmobs-cost-") as tmp:
        before = export_tree(args.before_ref, Path(tmp) / "before") if "mmobs-before" in loaders else ""
        for name, build in full_size_inputs():
            if args.only and not any(part in name for part in args.only):
                continue
            path = Path(tmp) / "input.bin"
            path.write_bytes(build())
            for loader in loaders:
                pythonpath = before if loader == "mmobs-before" else str(ROOT)
                result = measure(
                    loader, name, path, pythonpath=pythonpath, cpu=args.cpu_limit, memory=int(args.memory_limit * 2**30)
                )
                results.append(result)
                print(_row(result), flush=True)
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in results], indent=1) + "\n")
    if len(loaders) > 1:
        print("\n" + pivot(results), flush=True)
    print(f"# load after: {os.getloadavg()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
