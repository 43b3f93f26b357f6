"""The code's style is the formatter's, the linter's and the type checker's (configured in pyproject.toml).

The pinned ruff and mypy of the ``test`` extra run here, so the README's one
test command (and CI) fails on an unformatted file, a lint finding, or a type
error in ``mmobs/`` (which ships ``py.typed``: its annotations are a promise).
"""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"])
def test_ruff(command: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", *command], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"ruff {' '.join(command)}:\n{result.stdout[-6000:]}{result.stderr[-2000:]}"


#: mypy reads the annotations of mmobs's dependencies, and below these releases they are missing or narrower
#: (pybase64 1.3 ships none, blake3 0.4 takes ``bytes`` only, numpy 1.x types arrays otherwise): mmobs's
#: annotations are checked against these and newer, which the newest run of CI has. Below them (the
#: floors run) mmobs still works; only this check cannot be made.
TYPED_SINCE = {"numpy": "2.0", "blake3": "1.0", "pybase64": "1.4"}


def _below_typed_releases() -> list[str]:
    found = {name: Version(metadata.version(name)) for name in TYPED_SINCE}
    return [f"{name} {found[name]} (< {floor})" for name, floor in TYPED_SINCE.items() if found[name] < Version(floor)]


def test_mypy_strict(tmp_path: Path) -> None:
    """``mypy --strict`` over mmobs/ with the configuration in pyproject.toml, from a cold cache."""
    older = _below_typed_releases()
    if older:
        pytest.skip(f"mmobs's annotations are checked against newer dependencies than {', '.join(older)}")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy-cache")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, f"mypy:\n{result.stdout[-6000:]}{result.stderr[-2000:]}"
    assert "Success: no issues found" in result.stdout


#: A module a reader can hold in mind, and a function that fits on a screen (mmobs's own code).
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 80


def _python_files() -> list[Path]:
    return sorted(
        path for folder in ("mmobs", "tests", "scripts", "benchmarks") for path in (ROOT / folder).rglob("*.py")
    )


def test_no_module_is_over_450_lines() -> None:
    long = {
        path.relative_to(ROOT).as_posix(): lines
        for path in _python_files()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}, f"split these along their seams: {long}"


def test_no_function_of_mmobs_is_over_80_lines() -> None:
    import ast

    long = []
    for path in sorted((ROOT / "mmobs").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []


def _tracked_texts() -> list[Path]:
    """The tracked files a reader reads: code, docs, configuration, dashboards."""
    tracked = (
        subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60)
        .stdout.decode()
        .split("\0")
    )
    texts = {".py", ".md", ".toml", ".ini", ".yaml", ".yml", ".json", ".jsonnet", ".libsonnet", ""}
    return [ROOT / name for name in tracked if name and (ROOT / name).suffix in texts and (ROOT / name).is_file()]


def test_the_project_speaks_a_users_words() -> None:
    """Not an in-house nickname: the malformed-EXIF JPEG of vLLM issue #56527 is called what it is."""
    nickname = re.compile(r"\bthe " + r"seed\b", re.IGNORECASE)  # spelt apart, so this file does not say it
    found = [path for path in _tracked_texts() if nickname.search(path.read_text(encoding="utf-8", errors="replace"))]
    assert found == []


#: An issue cited by number: "issue #N", "issues N and M", "(#N)".
ISSUE_NUMBER = re.compile(r"\bissues?\s+#?\d+|\(#\d+\)", re.IGNORECASE)
#: Whose it is, within the few words before it: vLLM (not the ``vllm`` command), llm-d, Dynamo, upstream.
OTHER_PROJECT = re.compile(r"^(?:vLLM|llm-d|[Dd]ynamo|[Uu]pstream)(?:'s)?$")
#: Or a repository named just before it, owner/name: ``python-pillow/Pillow issue #N``.
REPOSITORY = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _cites_our_own_issue(text: str, match: re.Match[str]) -> bool:
    """No other project named in the words before the reference, within its sentence and its parenthesis.

    So "vLLM's key computation (issue N)" is ours: the name is outside the parenthesis.
    """
    before = text[max(0, match.start() - 160) : match.start()]
    before = re.split(r"\(|\.\s", before)[-1]
    words = [word.strip("`*_[],;'\"") for word in re.findall(r"[^\s|#:()]+", before)]  # a comment's #: is no word
    words = [word for word in words if word][-4:]
    return not any(OTHER_PROJECT.match(word) for word in words) and not (words and REPOSITORY.match(words[-1]))


def test_issue_numbers_are_other_projects_in_a_users_words() -> None:
    """This project's own issue numbers mean nothing to a reader: say the subject. Others' are named as theirs."""
    found = []
    for path in _tracked_texts():
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in ISSUE_NUMBER.finditer(text):
            if _cites_our_own_issue(text, match):
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{path.relative_to(ROOT)}:{line}: {match.group()}")
    assert found == []
