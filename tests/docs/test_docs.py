"""The documentation against the code: the README stays a landing page, the reference pages stay true.

Tables and lists that restate the code (metric names and labels, bad-image
reasons, middleware options) are read from the Markdown and compared with the
code's own declarations; every relative link, and every ``#anchor`` of one,
must lead somewhere.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from mmobs import MMObsMiddleware
from mmobs.asgi.bearer import UNAUTHORIZED
from mmobs.errors import BAD_IMAGE_REASONS
from mmobs.observability.metrics import HASHER_METRICS, HTTP_METRICS, METRIC_NAMES
from mmobs.vllm.cache_drift.cache_metrics import CACHE_DRIFT_METRICS
from mmobs.vllm.cache_drift.cache_metrics import METRIC_NAMES as VLLM_CACHE_METRIC_NAMES
from mmobs.vllm.decode_free_hits.decode_metrics import DECODE_SKIP_METRICS
from mmobs.vllm.decode_free_hits.decode_metrics import METRIC_NAMES as VLLM_DECODE_METRIC_NAMES
from mmobs.vllm.engine_items.item_metrics import ENGINE_ITEM_METRICS
from mmobs.vllm.engine_items.item_metrics import METRIC_NAMES as ENGINE_ITEM_METRIC_NAMES
from mmobs.vllm.front_end.front_end_metrics import FRONT_END_METRICS
from mmobs.vllm.front_end.front_end_metrics import METRIC_NAMES as VLLM_FRONT_END_METRIC_NAMES
from mmobs.vllm.render.render_metrics import METRIC_NAMES as RENDER_METRIC_NAMES
from mmobs.vllm.render.render_metrics import RENDER_METRICS
from mmobs.vllm.uuid_checks.uuid_metrics import METRIC_NAMES as VLLM_UUID_METRIC_NAMES
from mmobs.vllm.uuid_checks.uuid_metrics import UUID_CHECK_METRICS
from mmobs.vllm.video_budget import METRIC_NAMES as VIDEO_BUDGET_METRIC_NAMES
from mmobs.vllm.video_budget import VIDEO_BUDGET_METRICS
from tests.support.markdown import section

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
#: The benchmark and reliability runs the two summary pages link to (``benchmarks/results/``).
RESULTS = ROOT / "benchmarks" / "results"
PAGES = sorted([README, ROOT / "dashboards" / "README.md", *DOCS.rglob("*.md"), *RESULTS.glob("*.md")])

#: The README is the landing page; the reference lives in docs/.
MAX_README_LINES = 200
#: A page past this is two pages for two readers.
MAX_DOC_LINES = 400

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_TICKED = re.compile(r"`([^`]+)`")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    return {_slug(match) for match in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)}


def test_the_readme_is_a_landing_page() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; move reference text to docs/"


def test_the_readme_gives_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert "python3 -m pip install -e '.[serve]' && mmobs serve --port 8000" in text
    run_the_tests = "python3 -m pip install 'tox>=4.30' && tox p -p 3"
    assert run_the_tests in text
    # CI runs the same command, on a clean clone.
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(rf"^{re.escape(run_the_tests)}(?: \|\| status=\$\?)?$", ci, re.MULTILINE)


def test_the_readme_names_every_tox_environment_and_each_selects_its_tests() -> None:
    """tox.ini's environments, the README's table of them, and the markers tests/conftest.py gives the tests."""
    import configparser

    from tests.conftest import ENVIRONMENTS

    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini", encoding="utf-8")
    listed = tox["tox"]["env_list"].split()
    expanded = [name for entry in listed for name in _expand(entry)]
    named = set(re.findall(r"`([a-z0-9-]+)`", section(README.read_text(encoding="utf-8"), "## Run the tests")))
    assert set(expanded) <= named, f"README lacks {sorted(set(expanded) - named)}"
    selections = {name: tox[name].get("commands", "") for name in tox.sections() if name.startswith("testenv")}
    for marker in ENVIRONMENTS:
        assert any(re.search(rf"-m \"?{marker}\b", commands) for commands in selections.values()), marker


def test_each_environment_collects_where_its_files_are() -> None:
    """The paths an environment's pytest collects hold every file tests/conftest.py gives that environment."""
    import configparser

    from tests.conftest import ENVIRONMENT_OF_FILE

    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini", encoding="utf-8")
    narrowed = []
    for name in tox.sections():
        found = re.search(r"-m (\w+) ((?:tests/\S+ )+)", tox[name].get("commands", ""))
        if found is None:
            continue
        narrowed.append(name)
        marker, paths = found[1], found[2].split()
        assigned = [pattern for pattern, environment in ENVIRONMENT_OF_FILE.items() if environment == marker]
        assert assigned and all(pattern.startswith(tuple(paths)) for pattern in assigned), (name, assigned, paths)
        marked_elsewhere = [
            path.relative_to(ROOT).as_posix()
            for path in (ROOT / "tests").rglob("*.py")
            if f"mark.{marker}" in path.read_text(encoding="utf-8")
            and not path.relative_to(ROOT).as_posix().startswith(tuple(paths))
        ]
        assert marked_elsewhere == [], f"{name} does not collect {marked_elsewhere}"
    assert len(narrowed) == 4, narrowed  # lint, dashboards, vllm-releases, pillow-range
    # The core and the floors skip collecting tests/vllm/: every file there is another environment's.
    assert ENVIRONMENT_OF_FILE.get("tests/vllm/*") == "vllm"


def _expand(entry: str) -> list[str]:
    """``core-py3{11,12,13}`` as tox expands it."""
    found = re.fullmatch(r"(.*)\{([^}]*)\}(.*)", entry)
    if found is None:
        return [entry]
    head, choices, tail = found.groups()
    return [f"{head}{choice}{tail}" for choice in choices.split(",")]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_relative_links_lead_somewhere(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    broken = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked here
        path_part, _, anchor = target.partition("#")
        destination = (page.parent / path_part).resolve() if path_part else page
        if not destination.exists() or (
            anchor and destination.is_file() and destination.suffix == ".md" and anchor not in _anchors(destination)
        ):
            broken.append(target)
    assert broken == [], f"{page.relative_to(ROOT)}: broken links {broken}"


def test_every_page_of_the_docs_is_at_most_400_lines() -> None:
    long = {
        page.relative_to(ROOT).as_posix(): lines
        for page in DOCS.rglob("*.md")
        if (lines := len(page.read_text(encoding="utf-8").splitlines())) > MAX_DOC_LINES
    }
    assert long == {}, "split each by reader"


def test_the_readme_names_every_metric() -> None:
    listed = set(re.findall(r"`(mmobs_[a-z0-9_]+)`", section(README.read_text(encoding="utf-8"), "## Metrics")))
    declared = (
        set(METRIC_NAMES)
        | set(VLLM_CACHE_METRIC_NAMES)
        | set(VLLM_DECODE_METRIC_NAMES)
        | set(VLLM_UUID_METRIC_NAMES)
        | set(VLLM_FRONT_END_METRIC_NAMES)
        | set(ENGINE_ITEM_METRIC_NAMES)
        | set(RENDER_METRIC_NAMES)
        | set(VIDEO_BUDGET_METRIC_NAMES)
        | {UNAUTHORIZED.name}
    )
    assert listed == declared, f"README lacks {sorted(declared - listed)}, names unknown {sorted(listed - declared)}"


def test_the_cache_drift_page_gives_every_series_with_its_labels() -> None:
    text = (DOCS / "vllm-cache-drift.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(mmobs_vllm_[a-z_]+)(?:\{([a-z_, ]*)\})?` \|", text, flags=re.MULTILINE)
    documented = {name: tuple(label.strip() for label in labels.split(",") if label.strip()) for name, labels in rows}
    assert documented == {spec.name: spec.labels for spec in CACHE_DRIFT_METRICS}


def test_the_vllm_page_gives_every_decode_free_hit_series() -> None:
    text = section((DOCS / "vllm.md").read_text(encoding="utf-8"), "## Decode-free cache hits")
    documented = re.findall(r"^\| `(mmobs_vllm_[a-z_]+)` \|", text, flags=re.MULTILINE)
    assert documented == [spec.name for spec in DECODE_SKIP_METRICS]


def test_the_vllm_page_gives_every_uuid_series_with_its_labels_and_help() -> None:
    text = section((DOCS / "vllm.md").read_text(encoding="utf-8"), "## Client media uuids")
    rows = re.findall(r"^\| `(mmobs_vllm_[a-z_]+)(?:\{([a-z_, ]*)\})?` \| (.+) \|$", text, flags=re.MULTILINE)
    documented = [(name, tuple(filter(None, labels.split(", "))), meaning) for name, labels, meaning in rows]
    assert documented == [(spec.name, spec.labels, spec.documentation) for spec in UUID_CHECK_METRICS]


def test_the_vllm_page_gives_every_front_end_series_with_its_labels_and_help() -> None:
    text = section((DOCS / "vllm.md").read_text(encoding="utf-8"), "## The multimodal front end")
    rows = re.findall(r"^\| `(mmobs_vllm_[a-z0-9_]+)(?:\{([a-z_, ]*)\})?` \| (.+) \|$", text, flags=re.MULTILINE)
    documented = [(name, tuple(filter(None, labels.split(", "))), meaning) for name, labels, meaning in rows]
    assert documented == [(spec.name, spec.labels, spec.documentation) for spec in FRONT_END_METRICS]


def test_the_vllm_page_gives_every_engine_item_series_with_its_labels_and_help() -> None:
    text = section(
        (DOCS / "vllm-rust-front-end.md").read_text(encoding="utf-8"), "## The engine side, for both front ends"
    )
    rows = re.findall(r"^\| `(mmobs_vllm_[a-z0-9_]+)(?:\{([a-z_, ]*)\})?` \| (.+) \|$", text, flags=re.MULTILINE)
    documented = [(name, tuple(filter(None, labels.split(", "))), meaning) for name, labels, meaning in rows]
    assert documented == [(spec.name, spec.labels, spec.documentation) for spec in ENGINE_ITEM_METRICS]


def test_the_video_page_gives_every_budget_series_with_its_labels_and_help() -> None:
    text = section((DOCS / "vllm-video.md").read_text(encoding="utf-8"), "## Every decode bounded before it starts")
    rows = re.findall(r"^\| `(mmobs_vllm_[a-z0-9_]+)(?:\{([a-z_, ]*)\})?` \| (.+) \|$", text, flags=re.MULTILINE)
    documented = [(name, tuple(filter(None, labels.split(", "))), meaning) for name, labels, meaning in rows]
    assert documented == [(spec.name, spec.labels, spec.documentation) for spec in VIDEO_BUDGET_METRICS]


def test_the_routers_page_gives_every_render_series_with_its_labels_and_help() -> None:
    text = section((DOCS / "routers.md").read_text(encoding="utf-8"), "## Metrics")
    rows = re.findall(r"^\| `(mmobs_vllm_[a-z0-9_]+)(?:\{([a-z_, ]*)\})?` \| (.+) \|$", text, flags=re.MULTILINE)
    documented = [(name, tuple(filter(None, labels.split(", "))), meaning) for name, labels, meaning in rows]
    assert documented == [(spec.name, spec.labels, spec.documentation) for spec in RENDER_METRICS]


def test_the_library_page_gives_every_metric_with_its_labels() -> None:
    rows = re.findall(r"^\| `(mmobs_[a-z_]+)` \|([^|]*)\|", (DOCS / "library.md").read_text(), flags=re.MULTILINE)
    documented = {name: tuple(_TICKED.findall(labels)) for name, labels in rows}
    declared = {spec.name: spec.labels for spec in (*HASHER_METRICS, *HTTP_METRICS)}
    assert documented == declared


def test_the_library_page_lists_every_bad_image_reason() -> None:
    text = (DOCS / "library.md").read_text(encoding="utf-8")
    start = text.index("`mmobs.BAD_IMAGE_REASONS`:")
    listed = re.findall(r"`([a-z0-9_]+)`", text[start : text.index(")", start)])
    assert listed == list(BAD_IMAGE_REASONS)


def test_the_middleware_page_lists_every_option() -> None:
    options = section((DOCS / "middleware.md").read_text(encoding="utf-8"), "Options:")
    listed = re.findall(r"^- `([a-z_]+)", options, flags=re.MULTILINE)
    parameters = [
        name for name in inspect.signature(MMObsMiddleware.__init__).parameters if name not in ("self", "app")
    ]
    assert sorted(listed) == sorted(parameters)


def test_the_release_table_of_the_vllm_page_is_what_the_plugin_reads() -> None:
    """Each release's row says what ``mmobs.releases`` makes of it, and the page states its supported range."""
    from mmobs.releases import NEWEST, OLDEST, RELEASES, key_format, standing, unproven

    text = section((DOCS / "vllm.md").read_text(encoding="utf-8"), "## Versions")
    rows = [line.strip("|").split("|") for line in text.splitlines() if re.match(r"\| 0\.\d+\.\d+ \|", line)]
    table = {cells[0].strip(): [cell.strip() for cell in cells[1:]] for cells in rows}
    features = [
        "keys", "loader", "context", "decode_free_hits", "cache_drift", "uuid_checks", "front_end", "engine_items",
        "render",
    ]  # fmt: skip
    expected = {
        version: [
            key_format(version).name,
            "vLLM's" if key_format(version).tolerant_image_id else "mmobs's",
            *("off" if unproven(feature, version) else "on" for feature in features),
        ]
        for version in RELEASES
    }
    assert table == expected
    in_order = [cells[0].strip() for cells in rows if len(cells) == len(features) + 3]
    assert in_order == list(RELEASES) and (in_order[0], in_order[-1]) == (OLDEST, NEWEST)
    assert f"mmobs supports vLLM {OLDEST} to {NEWEST}" in text
    assert f"older than {OLDEST}: the plugin declines whole" in text and f"newer than {NEWEST}," in text
    assert f"`{standing(NEWEST)}`" in text  # what the plugin's start-up line says on a supported release
