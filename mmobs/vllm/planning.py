"""The plugin's features as records, and the one way each is planned: fully, or declined alone with one line.

Each :class:`Feature` says where it applies (every vLLM process, or the API server only), from which
vLLM release a test proves it (:data:`mmobs.releases.FIRST_PROVEN`), how it plans its :class:`Hook`
records, and what the operator reads when it is off. :func:`plan_features` walks the features in
order and, for each, either keeps every hook it planned or keeps none and says why once: a release
older than the feature's first one, or a vLLM shaped otherwise (a missing attribute, a probe that
differs, an import that fails). Nothing is replaced here; the plugin applies what was planned only
once every feature has been planned, so a vLLM is never half patched.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from mmobs.releases import FIRST_PROVEN, unproven
from mmobs.vllm.front_ends import FrontEnd, Role
from mmobs.vllm.shape import Plan, ShapeMismatch
from mmobs.vllm.startup_log import say

if TYPE_CHECKING:
    from mmobs.vllm.decode_free_hits.clip_skip import ClipSkipper
    from mmobs.vllm.decode_free_hits.decode_skip import DecodeSkipper
    from mmobs.vllm.render.keys_only import KeysOnlyProcessing


#: The vLLM processes a feature applies to: all of them, the API server only (media, hashing, metrics), or the
#: engine core only (what a request's items arrive as). With the Rust front end only the engine core's apply:
#: ``vllm-rs`` runs the API server's path in Rust (:mod:`mmobs.vllm.front_ends`).
Processes = Literal["every process", "API server", "engine core"]


@dataclass(frozen=True, slots=True)
class Hook:
    """One attribute the plugin replaces: ``owner.name`` becomes ``replacement``.

    ``on_instance`` marks an owner that is an object rather than a class or module (vLLM's media thread
    pool): what is restored there is the absence of the instance's own attribute.
    """

    owner: Any
    name: str
    replacement: Any
    on_instance: bool = False

    @classmethod
    def from_plan(cls, plan: Plan) -> list[Hook]:
        """The hooks of a plan made apart, as ``(owner, name, replacement, on_instance)`` tuples."""
        return [cls(owner, name, replacement, on_instance) for owner, name, replacement, on_instance in plan]

    @property
    def where(self) -> str:
        """``Owner.name``, as the start-up line names what was wrapped."""
        owner = getattr(self.owner, "__name__", None) or type(self.owner).__name__
        return f"{str(owner).rpartition('.')[2]}.{self.name}"

    def apply(self) -> Applied:
        """Replace the attribute, and remember what was there."""
        applied = Applied(self.owner, self.name, inspect.getattr_static(self.owner, self.name), self.on_instance)
        setattr(self.owner, self.name, self.replacement)
        return applied


@dataclass(frozen=True, slots=True)
class Applied:
    """A replacement in place, and vLLM's own attribute it displaced (what :meth:`restore` puts back)."""

    owner: Any
    name: str
    original: Any
    on_instance: bool = False

    def restore(self) -> None:
        if self.on_instance:
            vars(self.owner).pop(self.name, None)
        else:
            setattr(self.owner, self.name, self.original)


@dataclass
class Planning:
    """What a feature's plan hands to the features planned after it.

    The decode-free hits find the processor caches and build the skipper; the loader's ``load_bytes``
    hook is built around it, so the decode-free hits are planned first.
    """

    skipper: DecodeSkipper | None = None
    #: The video clips' skipper, built on the images' one (None: clips are decoded on every send).
    clip_skipper: ClipSkipper | None = None
    #: The keys-only processing the render plan made (it sizes prompts for the video length gate too), and
    #: whether the render plan already wraps the processor's step with it.
    keys_only: KeysOnlyProcessing | None = None
    keys_only_wraps_processor: bool = False


def _on_or_off(hooks: Sequence[Hook]) -> str:
    return "on" if hooks else "off"


@dataclass(frozen=True, slots=True)
class Feature:
    """One feature of the plugin: where it applies, how it is planned, and what is said when it is off."""

    #: Its name in :data:`mmobs.releases.FIRST_PROVEN` and in ``docs/vllm.md``'s release table.
    name: str
    #: What it is, for the line that says it is off ("decode-free cache hits": "... are off: ...").
    what: str
    #: Its hooks, every target looked up and probed first; raises when vLLM is shaped otherwise.
    plan: Callable[[Planning], list[Hook]]
    processes: Processes = "every process"
    #: A declined essential feature declines the whole plugin (the hasher's hooks: without them nothing counts).
    essential: bool = False
    #: The line said when ``plan`` raises: ``%(what)s``, ``%(version)s`` (vLLM's) and ``%(error)s`` filled in.
    misshapen: str = (
        "%(what)s are off: vLLM %(version)s is not shaped as they need (%(error)s); the rest of the plugin is loaded."
    )
    #: A switch whose ``0`` turns the feature off, silently (the operator chose it).
    off_switch: str | None = None
    #: A feature it lives in: when that one plans nothing, this one is dropped too, silently.
    needs: str | None = None
    #: Its name in the API server's start-up line, and its state there from what it planned.
    shown_as: str | None = None
    state: Callable[[Sequence[Hook]], str] = _on_or_off

    @property
    def first_release(self) -> str:
        """The first vLLM release a test proves the feature on (:data:`mmobs.releases.FIRST_PROVEN`)."""
        return FIRST_PROVEN[self.name]

    def applies_in(self, role: Role, front_end: FrontEnd = "python") -> bool:
        """Whether the feature is planned in a process of this role, under this front end."""
        if self.processes == "engine core":
            return role == "engine core"
        if front_end == "rust":
            return False
        return self.processes == "every process" or role == "API server"

    def switched_off(self) -> bool:
        """Whether the operator turned the feature off (its :attr:`off_switch` is ``0``)."""
        return self.off_switch is not None and os.environ.get(self.off_switch, "1").strip() == "0"


def plan_features(
    features: Sequence[Feature],
    planning: Planning,
    *,
    role: Role,
    vllm_version: str,
    front_end: FrontEnd = "python",
) -> dict[str, tuple[Hook, ...]]:
    """Each feature's hooks, in order; none for one that declined (said once) or does not apply.

    An essential feature's decline raises :class:`~mmobs.vllm.shape.ShapeMismatch` (or what its plan raised),
    for the plugin to decline whole.
    """
    planned = {
        feature.name: tuple(_plan(feature, planning, vllm_version) if feature.applies_in(role, front_end) else ())
        for feature in features
    }
    for feature in features:
        if feature.needs is not None and not planned[feature.needs]:
            planned[feature.name] = ()
    return planned


def _plan(feature: Feature, planning: Planning, vllm_version: str) -> list[Hook]:
    if feature.switched_off():
        return []
    why = unproven(feature.name, vllm_version)
    if why is not None:
        if feature.essential:
            raise ShapeMismatch(f"{feature.what} is {why}")
        say(logging.WARNING, "mmobs: %s are off: %s (docs/vllm.md, Versions).", feature.what, why)
        return []
    if feature.essential:
        return feature.plan(planning)
    try:
        return feature.plan(planning)
    except Exception as error:  # noqa: BLE001 - ShapeMismatch, or anything a foreign vLLM raises on import
        details = {"what": feature.what, "version": vllm_version, "error": f"{type(error).__name__}: {error}"}
        say(logging.WARNING, "mmobs: " + feature.misshapen, details)
        return []
