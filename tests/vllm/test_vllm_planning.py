"""The plugin's feature records (``mmobs.vllm.planning``, ``mmobs.vllm.features``), without a vLLM.

Each feature is planned in full or declined alone with one line; the hasher's decline is the whole
plugin's; a feature of the API server is neither planned nor mentioned in vLLM's other processes
(before the feature table, an engine process on a release before 0.32 still said the front end's stage
timings were off, which it never times); and the start-up line says where the running release stands
against the supported range (``mmobs.releases``).
"""

from __future__ import annotations

import logging
import re
import types
from collections.abc import Callable

import pytest

from mmobs.releases import FIRST_PROVEN, NEWEST, OLDEST
from mmobs.vllm import startup_line
from mmobs.vllm.features import FEATURES
from mmobs.vllm.planning import Feature, Hook, Planning, plan_features
from mmobs.vllm.shape import ShapeMismatch


@pytest.fixture
def said(caplog: pytest.LogCaptureFixture) -> Callable[[], list[str]]:
    """The lines the plugin has said so far (vLLM's logger tree, ``vllm.mmobs``)."""
    caplog.set_level(logging.INFO, logger="vllm.mmobs")
    return lambda: [record.getMessage() for record in caplog.records if record.name == "vllm.mmobs"]


def _hooking(name: str) -> Feature:
    """A feature that plans one hook on a fresh namespace, under ``name``'s first release."""
    target = types.SimpleNamespace(attribute="vLLM's")
    return Feature(name, f"the {name} feature", lambda planning: [Hook(target, "attribute", "mmobs's")])


def _misshapen(planning: Planning) -> list[Hook]:
    raise ShapeMismatch("vllm.somewhere.thing is missing")


def test_every_feature_of_the_table_has_a_first_release_and_a_unique_name() -> None:
    names = [feature.name for feature in FEATURES]
    assert sorted(names) == sorted(FIRST_PROVEN) and len(set(names)) == len(names)
    assert [feature.name for feature in FEATURES if feature.essential] == ["keys"]
    assert {feature.first_release for feature in FEATURES} <= set(FIRST_PROVEN.values())


def test_a_feature_on_a_release_before_its_first_declines_alone_with_one_line(said: Callable[[], list[str]]) -> None:
    features = [_hooking("loader"), _hooking("front_end")]
    planned = plan_features(features, Planning(), role="API server", vllm_version="0.31.0")
    assert len(planned["loader"]) == 1 and planned["front_end"] == ()
    assert said() == [
        "mmobs: the front_end feature are off: proven from vLLM 0.32.0 on, and this is 0.31.0 (docs/vllm.md, Versions)."
    ]


def test_a_misshapen_feature_declines_alone_with_its_own_line(said: Callable[[], list[str]]) -> None:
    misshapen = Feature(
        "uuid_checks", "uuid checks", _misshapen, misshapen="vLLM %(version)s's inputs are off (%(error)s)."
    )
    planned = plan_features([misshapen, _hooking("loader")], Planning(), role="API server", vllm_version=NEWEST)
    assert planned["uuid_checks"] == () and len(planned["loader"]) == 1
    assert said() == [f"mmobs: vLLM {NEWEST}'s inputs are off (ShapeMismatch: vllm.somewhere.thing is missing)."]


def test_the_hashers_decline_is_the_whole_plugins() -> None:
    essential = Feature("keys", "its hasher", _misshapen, essential=True)
    with pytest.raises(ShapeMismatch, match=r"vllm\.somewhere\.thing"):
        plan_features([essential], Planning(), role="API server", vllm_version=NEWEST)
    with pytest.raises(
        ShapeMismatch, match=re.escape(f"its hasher is proven from vLLM {OLDEST} on, and this is 0.24.0")
    ):
        plan_features([_hooking("loader"), essential], Planning(), role="API server", vllm_version="0.24.0")


def test_an_api_server_feature_is_neither_planned_nor_mentioned_in_an_engine_process(
    said: Callable[[], list[str]],
) -> None:
    front_end = Feature("front_end", "the front end's stage timings", _misshapen, processes="API server")
    for version in ("0.27.1", NEWEST):  # before its first release, and on a release whose shape it would miss
        assert plan_features([front_end], Planning(), role="engine core", vllm_version=version) == {"front_end": ()}
    assert said() == []


def test_a_feature_switched_off_or_without_the_feature_it_lives_in_is_dropped_silently(
    said: Callable[[], list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MMOBS_TEST_SWITCH", "0")
    switched = Feature("context", "request ids", _misshapen, off_switch="MMOBS_TEST_SWITCH")
    dependent = Feature("decode_free_hits", "decode-free hits", _hooking("x").plan, needs="loader")
    loader = Feature("loader", "the loader", _misshapen, misshapen="%(what)s declined")
    planned = plan_features([switched, dependent, loader], Planning(), role="API server", vllm_version=NEWEST)
    assert planned == {"context": (), "decode_free_hits": (), "loader": ()}
    assert said() == ["mmobs: the loader declined"]  # the loader's own line; nothing for the other two


def test_a_hook_applied_is_restored() -> None:
    class Pool:
        def submit(self) -> str:
            return "vLLM's"

    module, instance = types.SimpleNamespace(attribute="vLLM's"), Pool()
    applied = [
        Hook(module, "attribute", "mmobs's").apply(),
        Hook(instance, "submit", "mmobs's", on_instance=True).apply(),
    ]
    assert (module.attribute, vars(instance)["submit"]) == ("mmobs's", "mmobs's")
    assert (applied[0].name, applied[0].original) == ("attribute", "vLLM's")
    for hook in reversed(applied):
        hook.restore()
    assert module.attribute == "vLLM's" and "submit" not in vars(instance) and instance.submit() == "vLLM's"


@pytest.mark.parametrize(
    ("version", "stands"),
    [
        ("0.33.0", f"(supported: vLLM {OLDEST} to {NEWEST})"),
        ("0.35.0", f"(newer than vLLM {NEWEST}, the newest supported: held to its key format, each feature only "),
    ],
)
def test_the_start_up_line_says_where_the_release_stands(
    version: str, stands: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clause is the one change to the line: the rest reads as before, for the API server and the engine."""
    monkeypatch.setattr(startup_line, "vllm_version", lambda: version)
    nothing: dict[str, tuple[Hook, ...]] = {feature.name: () for feature in FEATURES}
    api_server = startup_line.startup_line(nothing, "API server", "python")
    assert api_server.startswith(f"mmobs (API server): counting vLLM {version}'s multimodal fallbacks {stands}")
    assert api_server.endswith(
        "; 0 attributes wrapped (); guard off, fast keys off, decode-free hits off, cache drift off, "
        "uuid conflicts off, front-end stages off, render off, video off"
    )
    engine = startup_line.startup_line(nothing, "engine core", "python")
    assert engine.startswith(f"mmobs (engine process): counting vLLM {version}'s multimodal fallbacks {stands}")
    assert engine.endswith("; 0 attributes wrapped (); guard off, fast keys off, engine items off")


def test_with_the_rust_front_end_only_the_engine_cores_feature_applies_anywhere() -> None:
    """vllm-rs runs the API server's path in Rust: nothing the plugin wraps there runs in any Python process."""
    roles = ("API server", "supervisor", "engine core", "worker")
    applies = {(feature.name, role) for feature in FEATURES for role in roles if feature.applies_in(role, "rust")}
    assert applies == {("engine_items", "engine core")}
    python = {feature.name for feature in FEATURES if feature.applies_in("engine core", "python")}
    assert python == {"keys", "loader", "context", "engine_items"}


@pytest.mark.parametrize(
    ("role", "offers"),
    [
        ("supervisor", "offering nothing here"),
        ("engine core", "counting the multimodal items the engine core receives"),  # no hook: no uuid check to name
    ],
)
def test_the_rust_front_ends_line_says_what_the_process_offers_and_names_what_has_no_place(
    role: str, offers: str
) -> None:
    nothing: dict[str, tuple[Hook, ...]] = {feature.name: () for feature in FEATURES}
    line = startup_line.startup_line(nothing, role, "rust")  # type: ignore[arg-type]
    assert line.startswith(f"mmobs ({role}, Rust front end): {offers} (vLLM ")
    assert (
        "; nothing wrapped; vllm-rs serves the API, loads and keys images, so there is no place for decode_free_hits, "
        "keys, loader, context, cache_drift, uuid_checks, front_end, render, video or the preset" in line
    )
    assert line.endswith("; no MMOBS_METRICS_PORT is served, so no scrape reads the engine core")
    served = startup_line.startup_line(nothing, role, "rust", "its series on port 9400")  # type: ignore[arg-type]
    assert served.endswith("the preset (--middleware mmobs.vllm.Middleware); its series on port 9400")
