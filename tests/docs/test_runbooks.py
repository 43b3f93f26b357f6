"""Runbooks that run: every command in ``docs/runbooks/*.md`` against a real service and a real Prometheus.

A ``mmobs serve --log-format json`` gets good images, malformed-EXIF ones, bad
ones and the same bytes keyed two ways (a cache-key drift); Prometheus scrapes
it with the shipped rules. Then each runbook's fenced blocks are taken as they
are written, whatever the queries and recording rules are called today:

* ``promql`` blocks: every query must be valid; the first is the alert's own
  expression (it must be the one in ``alerts.yml``); every other query is an
  investigation step and must return data;
* ``sh`` blocks: every command runs in ``bash`` in a folder holding the
  captured log as ``server.log`` and the input as the file names the
  runbooks use, with ``<job>``, ``<id>``, ``<digest>`` and ``HOST:8000``
  filled in; each must exit 0 and print what the runbook says it prints
  (``jq``: JSON objects with the projected fields, the selected values;
  ``curl``: the documented body or code; ``mmobs``: its report).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.dashboards.test_prometheus import RULES, PrometheusProcess
from tests.support import REQUIRE_PROMETHEUS, ServiceProcess, data_url, golden, require_binary
from tests.support.markdown import fenced_blocks

pytestmark = pytest.mark.prometheus

ROOT = Path(__file__).resolve().parents[2]
#: The runbooks of the vLLM plugin's alerts run against a real vLLM server instead (tests/vllm/test_vllm_cache_drift.py).
VLLM_RUNBOOK_PREFIX = "MmobsVllm"
RUNBOOKS = sorted(p for p in (ROOT / "docs" / "runbooks").glob("*.md") if not p.stem.startswith(VLLM_RUNBOOK_PREFIX))
JOB = "mmobs"
#: The servers a runbook command may be meant for (its comment starts with one of them and a colon).
#: Whom a runbook command is for, by its comment's first word(s): ``vLLM Rust`` is vLLM with its Rust front end.
SERVERS = ("mmobs serve", "vLLM", "vLLM Rust")
#: The service's string hash seed, so that this test can tell which content its drift tracker samples.
HASH_SEED = "56527"
_BINARY_OPERATOR_END = re.compile(
    r"(\b(and|or|unless|bool)|\b(on|ignoring|group_left|group_right)\s*(\([^)]*\))?|[-+*/%^<>=!]=?|\()\s*$"
)
_BINARY_OPERATOR_START = re.compile(r"^\s*(\b(and|or|unless)\b|[-+*/%^<>=!]|\))")


# -- reading the runbooks ----------------------------------------------------------------------------


def promql_queries(text: str) -> list[str]:
    """The queries of one ``promql`` block: a line continues the query unless both sides are complete."""
    queries: list[str] = []
    for line in (raw.split("#", 1)[0].rstrip() for raw in text.splitlines()):
        if not line.strip():
            continue
        if queries:
            current = queries[-1]
            open_parens = current.count("(") - current.count(")")
            if open_parens > 0 or _BINARY_OPERATOR_END.search(current) or _BINARY_OPERATOR_START.match(line):
                queries[-1] = f"{current}\n{line}"
                continue
        queries.append(line)
    return queries


@dataclass(frozen=True)
class Command:
    runbook: str
    text: str  # the shell command, as written (one logical line; a quoted jq program may span lines)
    comment: str  # what the runbook says after ``#`` on the same line


def shell_commands(runbook: Path) -> list[Command]:
    commands: list[Command] = []
    for block in fenced_blocks(runbook.read_text()):
        if block.language not in ("sh", "bash", "shell"):
            continue
        pending = ""
        for line in block.lines:
            pending = f"{pending}\n{line}" if pending else line
            try:
                shlex.split(pending, comments=True)
            except ValueError:  # an open quote: the command goes on
                continue
            code, comment = _split_comment(pending)
            if code.strip():
                commands.append(Command(runbook.stem, code.strip(), comment))
            pending = ""
        assert not pending, f"{runbook.name}: unterminated command {pending!r}"
    return commands


def _split_comment(command: str) -> tuple[str, str]:
    """``command  # comment`` -> (command, comment); a ``#`` inside quotes is not a comment."""
    quote = None
    for index, char in enumerate(command):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or command[index - 1].isspace()):
            return command[:index].rstrip(), command[index + 1 :].strip()
    return command, ""


def alert_expressions() -> dict[str, str]:
    groups = yaml.safe_load((RULES / "alerts.yml").read_text())["groups"]
    return {rule["alert"]: rule["expr"] for group in groups for rule in group["rules"] if "alert" in rule}


def service_alert_expressions() -> dict[str, str]:
    """The alerts on ``mmobs serve``'s series (the vLLM plugin's are checked on a vLLM server)."""
    return {name: expr for name, expr in alert_expressions().items() if not name.startswith(VLLM_RUNBOOK_PREFIX)}


def _words(query: str) -> list[str]:
    return " ".join(line.split("#", 1)[0] for line in query.splitlines()).split()


# -- the stack ---------------------------------------------------------------------------------------


@dataclass
class Stack:
    service: ServiceProcess
    prometheus: PrometheusProcess
    workdir: Path
    env: dict[str, str]
    placeholders: dict[str, str]


def _drifting_variant(base: bytes) -> bytes:
    """``base`` plus trailing bytes (ignored by JPEG decoders) that the service's drift tracker samples."""
    code = (
        "import sys\nfrom mmobs.observability.drift import DriftTracker\nfrom mmobs.keys.media import MediaWithBytes\n"
        "base = sys.stdin.buffer.read()\ntracker = DriftTracker()\n"
        "print(next(n for n in range(100000) if tracker.samples(MediaWithBytes(None, base + n.to_bytes(4, 'little')))))"
    )
    found = subprocess.run(
        [sys.executable, "-c", code], input=base, capture_output=True, cwd=ROOT, timeout=60, check=True,
        env={**os.environ, "PYTHONHASHSEED": HASH_SEED},
    )  # fmt: skip
    return base + int(found.stdout).to_bytes(4, "little")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    jq = shutil.which("jq")
    if jq is None:
        message = "jq not installed (apt-get install jq)"
        pytest.fail(message) if REQUIRE_PROMETHEUS else pytest.skip(message)
    require_binary("prometheus")
    tmp = tmp_path_factory.mktemp("runbooks")
    service = ServiceProcess(tmp, "--log-format", "json", env={"PYTHONHASHSEED": HASH_SEED})
    prometheus = PrometheusProcess(tmp, f"127.0.0.1:{service.port}", None)
    try:
        prometheus.wait_until(lambda: prometheus.scalar(f'count_over_time(up{{job="{JOB}"}}[1m])') >= 3, 30, "scraping")
        bad_exif = golden.input_bytes("bad-exif-header.jpg")
        drifting = _drifting_variant(golden.input_bytes("photo.jpg"))
        with httpx.Client(base_url=service.url, timeout=30) as client:
            fallback_ids = []
            for _ in range(6):
                response = client.post("/v1/hash", json={"images": [data_url(bad_exif)]})
                assert response.json()["items"][0]["exif_fallback"]
                fallback_ids.append(response.headers["x-request-id"])
            for name in ("photo.jpg", "rgb.png", "palette.png") * 3:
                assert client.post("/v1/hash", json={"images": [data_url(golden.input_bytes(name))]}).status_code == 200
            for refused in ("data:image/png;base64,", data_url(b"text"), "https://x/y"):
                assert client.post("/v1/hash", json={"images": [refused]}).status_code == 400
            # The same bytes keyed two ways (a decode option enters the key): a drift the tracker sees.
            for options in ({}, {"image_mode": "L"}):
                assert client.post("/v1/hash", json={"images": [data_url(drifting)], **options}).status_code == 200
        prometheus.wait_until(
            lambda: (
                prometheus.scalar(f'sum(mmobs_cache_key_drift_total{{job="{JOB}"}})') == 1
                and prometheus.scalar(f'sum(mmobs_exif_fallback_total{{job="{JOB}"}})') == 6
            ),
            30,
            "seeing the traffic",
        )
        time.sleep(3)  # a few more scrapes and rule evaluations
        events = [json.loads(line) for line in service.logs().splitlines()]
        (drift,) = [e for e in events if e["event"] == "cache_key_drift"]
        workdir = tmp / "work"
        workdir.mkdir()
        (workdir / "server.log").write_text(service.logs())
        for name in ("suspect.jpg", "the-file.jpg"):
            (workdir / name).write_bytes(bad_exif)
        bindir = tmp / "bin"
        bindir.mkdir()
        (bindir / "mmobs").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m mmobs.cli "$@"\n')
        (bindir / "mmobs").chmod(0o755)
        env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
        # "diff a.json b.json" compares two replicas' fingerprints: b.json is the other, healthy one.
        subprocess.run("mmobs fingerprint --json > b.json", shell=True, cwd=workdir, env=env, check=True)
        placeholders = {
            "<job>": JOB,
            "<id>": fallback_ids[0],
            "<digest>": drift["content_digest"],
            "HOST:8000": f"127.0.0.1:{service.port}",
        }
        yield Stack(service, prometheus, workdir, env, placeholders)
    finally:
        prometheus.stop()
        service.stop()


def _fill(text: str, placeholders: dict[str, str]) -> str:
    for placeholder, value in placeholders.items():
        text = text.replace(placeholder, value)
    assert not re.search(r"<[a-z_]+>", text), f"a placeholder this test does not know: {text}"
    return text


# -- the tests ---------------------------------------------------------------------------------------


def test_the_runbooks_have_commands_to_run() -> None:
    assert len(RUNBOOKS) == len(service_alert_expressions())
    assert sum(len(shell_commands(runbook)) for runbook in RUNBOOKS) >= 12
    assert all(any(b.language == "promql" for b in fenced_blocks(r.read_text())) for r in RUNBOOKS)


def test_promql_splitting_keeps_multi_line_expressions_whole() -> None:
    assert promql_queries("a > 1\nand on (job)\nb > 2") == ["a > 1\nand on (job)\nb > 2"]
    assert promql_queries("count by (x) (m)\nmax by (y) (m)\n# a comment") == ["count by (x) (m)", "max by (y) (m)"]
    assert promql_queries("a > 0\nor\ncount (\n  b\n  unless\n  c offset 5m\n)") == [
        "a > 0\nor\ncount (\n  b\n  unless\n  c offset 5m\n)"
    ]


@pytest.mark.parametrize("runbook", RUNBOOKS, ids=[r.stem for r in RUNBOOKS])
def test_promql_of_each_runbook(runbook: Path, stack: Stack) -> None:
    blocks = [b for b in fenced_blocks(runbook.read_text()) if b.language == "promql"]
    alert, *investigation = [q for block in blocks for q in promql_queries(block.text)]
    assert _words(alert) == _words(alert_expressions()[runbook.stem]), (
        "the runbook shows another expression than alerts.yml"
    )
    stack.prometheus.query(alert)  # valid; whether it fires depends on the traffic
    for query in investigation:
        result = stack.prometheus.query(_fill(query, stack.placeholders))
        assert result, f"{runbook.stem}: no data for {query}"


def applies_to(command: Command, server: str) -> bool:
    """A command whose comment starts ``mmobs serve:`` or ``vLLM:`` is for that server only; the others for both."""
    for name in SERVERS:
        if command.comment.startswith(f"{name}:"):
            return name == server
    return True


def _check_jq(command: Command, output: str, placeholders: dict[str, str]) -> None:
    objects = [json.loads(line) for line in output.splitlines()]
    assert objects and all(isinstance(o, dict) for o in objects), command.text
    projection = re.search(r"[|']\s*\{([\w\s,]+)\}\s*'", command.text)
    if projection:
        fields = [f.strip() for f in projection.group(1).split(",")]
        for obj in objects:
            assert list(obj) == fields, (command.text, obj)
            assert all(obj[f] for f in ("request_id", "route", "timestamp") if f in fields), (command.text, obj)
    for field, value in re.findall(r'select\(\.(\w+) == "([^"]+)"\)', _fill(command.text, placeholders)):
        if not projection or field in objects[0]:
            assert all(o[field] == value for o in objects), (command.text, field, value)
    event = re.search(r"--event (\w+)", command.text)
    if event and not projection:
        assert all(o["event"] == event.group(1) for o in objects), command.text


def check_output(command: Command, output: str, placeholders: dict[str, str], server: str) -> None:
    """What the runbook says the command prints, in what ``server`` (``mmobs serve`` or ``vLLM``) wrote."""
    text = command.text
    last = text.rsplit("|", 1)[-1].split()
    if text.startswith("mmobs events"):
        if last[:2] == ["wc", "-l"]:
            assert int(output) > 0, text
        elif "uniq -c" in text:
            counted = [line.split(maxsplit=1) for line in output.splitlines()]
            assert counted and all(len(c) == 2 and c[0].isdigit() for c in counted), text
            if ".mm_hash" in text:
                assert all(re.fullmatch(r"[0-9a-f]{16}", value) for _, value in counted), text
        elif "-r" in text.split("| jq", 1)[1].split()[:1]:
            lines = output.splitlines()
            assert lines and all(line.startswith("mmobs") for line in lines), (text, output)
        else:
            _check_jq(command, output, placeholders)
        if "select(.request_id ==" in text and server == "mmobs serve":
            assert [json.loads(line)["event"] for line in output.splitlines()].count("http_request") == 1
    elif "grep -c" in text:
        assert int(output) > (10 if server == "mmobs serve" else 0), text
    elif "grep -E '^" in text:
        pattern = re.search(r"grep -E '([^']+)'", text).group(1)  # type: ignore[union-attr]
        lines = output.splitlines()
        assert lines and all(re.match(pattern, line) for line in lines), text
    elif "grep '^" in text:
        prefix = re.search(r"grep '\^([\w]+)'", text).group(1)
        lines = output.splitlines()
        assert lines and all(line.startswith(prefix) for line in lines), text
    elif text.startswith("grep "):
        needle = re.search(r"grep '([^']+)'", text).group(1)
        lines = output.splitlines()
        assert lines and all(needle in line for line in lines), text
    elif "%{http_code}" in text:
        assert output.strip() == "200", text
    elif text.startswith("curl"):
        body = json.loads(output)
        documented = re.findall(r'"(\w+)":', command.comment)
        assert documented and set(documented) <= set(body), (text, body)
        assert body["status"] == "ok"
    elif text.startswith("mmobs hash"):
        assert re.match(r"[0-9a-f]{64}  \S+\n    key_source=original_bytes exif_fallback=true", output), output
    elif text.startswith("mmobs inspect"):
        assert "getexif() raises SyntaxError" in output and "key: from original_bytes, EXIF fallback ran" in output
        assert "  EXIF block      malformed: " in output and "a broken input (the runbook's cause 1)" in output
    elif text.split()[0] == "diff" or ">" in text:
        assert output == "", text  # the same install: no difference, and the JSON went to the file
    else:
        raise AssertionError(f"{command.runbook}: no documented output known for {text!r}")


def run_commands(runbook: Path, workdir: Path, env: dict[str, str], placeholders: dict[str, str], server: str) -> int:
    """Every shell command of ``runbook`` for ``server``, run in ``workdir``: exit 0 and the documented output."""
    ran = 0
    for command in shell_commands(runbook):
        if not applies_to(command, server):
            continue
        result = subprocess.run(
            ["bash", "-o", "pipefail", "-c", _fill(command.text, placeholders)],
            cwd=workdir, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert result.returncode == 0, (server, command.text, result.stderr)
        check_output(command, result.stdout, placeholders, server)
        ran += 1
    return ran


@pytest.mark.parametrize("runbook", RUNBOOKS, ids=[r.stem for r in RUNBOOKS])
def test_shell_commands_of_each_runbook(runbook: Path, stack: Stack) -> None:
    assert run_commands(runbook, stack.workdir, stack.env, stack.placeholders, "mmobs serve") > 0


def test_the_logs_the_runbooks_read_are_all_json(stack: Stack) -> None:
    """``jq`` without ``-R`` would stop at the first line that is not JSON: there is none."""
    result = subprocess.run(["jq", "-c", ".event", "server.log"], cwd=stack.workdir, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    events: list[Any] = result.stdout.splitlines()
    assert '"exif_fallback"' in events and '"cache_key_drift"' in events and '"http_request"' in events
