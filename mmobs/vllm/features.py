"""The plugin's features, one record each, in the order they are planned: the table the plugin reads.

Declining, the lines that say a feature is off, and the API server's start-up line all come from these
records (:mod:`mmobs.vllm.planning`); each feature's first release is :data:`mmobs.releases.FIRST_PROVEN`'s.
The decode-free hits are planned first because the loader's hook is built around their skipper, and
live in that hook: without the loader's hooks they are dropped too.
"""

from __future__ import annotations

from collections.abc import Sequence

from mmobs.vllm import feature_plans
from mmobs.vllm.decode_free_hits.decode_skip import DECODE_SKIP_ENV
from mmobs.vllm.planning import Feature, Hook


def _cache_drift_state(hooks: Sequence[Hook]) -> str:
    from mmobs.vllm.cache_drift import cache_hooks

    if not hooks:
        return "off"
    return "healed" if cache_hooks.healing_enabled() else "counted only"


def _uuid_state(hooks: Sequence[Hook]) -> str:
    checkers = [hook.replacement.checker for hook in hooks if hook.name == "get_mm_hashes"]
    return "off" if not checkers else ("refused" if checkers[0].refuse else "counted")


def _front_end_state(hooks: Sequence[Hook]) -> str:
    """Timed from arrival to the engine, or off: the hand-off to the engine declines alone (its dependencies)."""
    return "timed" if any(hook.name == "process_inputs" for hook in hooks) else "off"


def _video_state(hooks: Sequence[Hook]) -> str:
    """Bounded and timed, with decode-free hits and the context check (a clip too long for it refused before its
    decode) or without them (the images' decode-free hits are off), or off."""
    if not hooks:
        return "off"
    if not any(hook.name == "_get_cache_missing_items" for hook in hooks):
        return "bounded, timed"
    context = any(getattr(hook.owner, "__name__", "") == "BaseRenderer" for hook in hooks)
    return "bounded, timed, decode-free hits, context-checked" if context else "bounded, timed, decode-free hits"


def _render_state(hooks: Sequence[Hook]) -> str:
    """Keys-only (the processor's step wrapped), full (counted and guarded), or off."""
    if not hooks:
        return "off"
    return "keys-only" if any(hook.name == "_cached_apply_hf_processor" for hook in hooks) else "full"


FEATURES: tuple[Feature, ...] = (
    Feature(
        "decode_free_hits",
        "decode-free cache hits",
        feature_plans.decode_free_plan,
        processes="API server",
        misshapen="%(what)s are off: vLLM %(version)s is not shaped as they need (%(error)s)",
        off_switch=DECODE_SKIP_ENV,
        needs="loader",
        shown_as="decode-free hits",
    ),
    Feature("keys", "its hasher", feature_plans.key_plan, essential=True),
    Feature("loader", "the loader's refusals, guard and transpose failures", feature_plans.loader_plan),
    Feature("context", "request ids in vLLM's threads and its dummy inputs", feature_plans.context_plan),
    Feature(
        "cache_drift",
        "cache drift counting and healing",
        feature_plans.cache_drift_plan,
        processes="API server",
        misshapen="vLLM %(version)s's multimodal processor cache is not shaped as mmobs expects (%(error)s); its "
        "cache drift is neither counted nor healed, the rest of the plugin is loaded.",
        shown_as="cache drift",
        state=_cache_drift_state,
    ),
    Feature(
        "uuid_checks",
        "client media uuid checks",
        feature_plans.uuid_plan,
        processes="API server",
        misshapen="vLLM %(version)s's ProcessorInputs is not shaped as mmobs expects (%(error)s); client media "
        "uuids are not checked, the rest of the plugin is loaded.",
        shown_as="uuid conflicts",
        state=_uuid_state,
    ),
    Feature(
        "front_end",
        "the front end's stage timings",
        feature_plans.front_end_plan,
        processes="API server",
        shown_as="front-end stages",
        state=_front_end_state,
    ),
    Feature(
        "render",
        "the render endpoints' counts, guard and keys-only answers",
        feature_plans.render_plan,
        processes="API server",
        shown_as="render",
        state=_render_state,
    ),
    Feature(
        "video",
        "video clips' timings, budgets and decode-free hits",
        feature_plans.video_plan,
        processes="API server",
        shown_as="video",
        state=_video_state,
    ),
    Feature(
        "engine_items",
        "the engine's multimodal item counts",
        feature_plans.engine_items_plan,
        processes="engine core",
        shown_as="engine items",
    ),
)
