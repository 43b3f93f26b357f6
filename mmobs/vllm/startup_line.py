"""The one line the plugin says in each vLLM process: what it offers there, and what it has no place for.

vLLM's Python API server: what it wrapped and which switches are on, as it has always said. An
engine process: what it wrapped. With the Rust front end (:mod:`mmobs.vllm.front_ends`), each
process says what it offers (the engine core counts each request's items; ``vllm serve``'s own
process and the workers, nothing) and names the features ``vllm-rs`` leaves it no place for, since
the API server's path they wrap runs in Rust. Where mmobs's series are served comes last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mmobs.releases import standing
from mmobs.vllm.features import FEATURES
from mmobs.vllm.front_ends import FrontEnd, Role
from mmobs.vllm.planning import Hook
from mmobs.vllm.shape import vllm_version
from mmobs.vllm.switches import FAST_KEYS_ENV, GUARD_ENV, enabled

#: What no Python process can carry with the Rust front end, beside the features: the preset's HTTP side.
_PRESET = "the preset (--middleware mmobs.vllm.Middleware)"


def startup_line(
    planned: Mapping[str, Sequence[Hook]], role: Role, front_end: FrontEnd, served: str | None = None
) -> str:
    """This process's line: ``planned`` is each feature's hooks, ``served`` where the metrics port serves."""
    hooked = sorted({hook.where for hooks in planned.values() for hook in hooks})
    wrapped = f"{len(hooked)} attributes wrapped ({', '.join(hooked)})"
    where = f" {served}" if served else ""
    if front_end == "rust":
        no_place = [feature.name for feature in FEATURES if not feature.applies_in("engine core", "rust")]
        offers = (
            _engine_core_offers(planned.get("engine_items", ())) if role == "engine core" else "offering nothing here"
        )
        wrapped = wrapped if hooked else "nothing wrapped"
        return (
            f"mmobs ({role}, Rust front end): {offers} (vLLM {vllm_version()}, {standing(vllm_version())}); {wrapped}; "
            f"vllm-rs serves the API, loads and keys images, so there is no place for {', '.join(no_place)} or "
            f"{_PRESET};{where or ' no MMOBS_METRICS_PORT is served, so no scrape reads the engine core'}"
        )
    switches = [
        f"guard {'on' if enabled(GUARD_ENV) else 'off'}",
        f"fast keys {'on' if enabled(FAST_KEYS_ENV) else 'off'}",
    ]
    switches += [
        f"{feature.shown_as} {feature.state(planned[feature.name])}"
        for feature in FEATURES
        if feature.shown_as is not None and feature.applies_in(role, front_end)
    ]
    place = "API server" if role == "API server" else "engine process"
    line = (
        f"mmobs ({place}): counting vLLM {vllm_version()}'s multimodal fallbacks ({standing(vllm_version())}); "
        f"{wrapped}; {', '.join(switches)}"
    )
    return f"{line};{where}" if served else line


def _engine_core_offers(hooks: Sequence[Hook]) -> str:
    """What the engine core does under the Rust front end, read from the check its plan built (not the switches)."""
    checks = [hook.replacement.uuid_check for hook in hooks if getattr(hook.replacement, "uuid_check", None)]
    offers = "counting the multimodal items the engine core receives"
    if not checks:
        return offers
    acted = "keyed by content" if checks[0].rekey else "counted"
    return f"{offers}, client uuids checked against their content (conflicts {acted})"
