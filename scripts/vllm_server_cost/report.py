"""The report of ``scripts/vllm_server_cost_run.py``: the per-input table, and the run's circumstances."""

from __future__ import annotations

import filecmp
import json
import subprocess
from pathlib import Path

from .request import MiB, Outcome

ROOT = Path(__file__).resolve().parents[2]


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


def progress(outcome: Outcome) -> str:
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
