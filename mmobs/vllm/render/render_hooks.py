"""vLLM's ``ServingRender``, observed: each render call opened as a :class:`~.render_mode.RenderRequest`, counted.

The render endpoints (``/v1/chat/completions/render``, ``/v1/completions/render``,
``/v1/responses/render``; ``/v1/messages/render`` goes through the chat one)
each call one method of vLLM's ``ServingRender``. Its wrapper opens the
request's render state, which the loader (its guard, its decode-free
stand-ins), the processor (:mod:`.keys_only`) and the answer's serializer
read, and counts the request once it is answered:
``mmobs_vllm_render_requests_total{endpoint, mode, reason}``.

The served model's images are checked against the size rules once, when vLLM
builds its ``ServingRender``, and one line says what answers keys-only.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mmobs.events import observing
from mmobs.vllm.render import render_mode
from mmobs.vllm.render.keys_only import KeysOnlyProcessing
from mmobs.vllm.render.render_metrics import RenderMetrics, render_metrics
from mmobs.vllm.render.render_mode import Endpoint, Mode, Reason, RenderRequest
from mmobs.vllm.render.size_rules import Verdict
from mmobs.vllm.startup_log import say

if TYPE_CHECKING:
    from mmobs.vllm.decode_free_hits.decode_skip import DecodeSkipper


@dataclass
class RenderPlan:
    """What this API server does with render requests: the mode, and whether the served model allows keys-only."""

    mode: Mode
    processing: KeysOnlyProcessing
    #: The marker class of kwargs made keys-only (their answers carry no tensors).
    keys_only_class: type
    error_class: type
    metrics: RenderMetrics = field(default_factory=render_metrics)
    #: Why the served model's images get vLLM's full render even with the switch on (None: they answer keys-only).
    model_declined: str | None = None
    #: Where keys-only images get their size (for the start-up line).
    images: str = ""
    #: The decode-free hits' skipper, told which processor cache only render requests use.
    skipper: DecodeSkipper | None = None

    def request(self, endpoint: Endpoint) -> RenderRequest:
        if self.mode != "keys":
            return RenderRequest(endpoint, declined="switch_off")
        return RenderRequest(endpoint, declined=None if self.model_declined is None else "model")

    def count(self, request: RenderRequest, refused: bool) -> None:
        reason: Reason
        if refused:
            reason = "refused"
        elif request.declined is not None:
            reason = request.declined
        else:
            reason = "keys_only" if request.keys_only_prompts else "text_only"
        mode: Mode = "keys" if reason in ("keys_only", "text_only") or (refused and self.mode == "keys") else "full"
        self.metrics.answered(request.endpoint, mode, reason)

    def serving_built(self, serving: Any) -> None:
        """Check the served model's images against the size rules once, and say what answers keys-only."""
        model_config = serving.online_renderer.model_config
        render_cache = getattr(serving.online_renderer.renderer, "_mm_processor_only_cache", None)
        if self.skipper is not None and render_cache is not None:
            self.skipper.render_caches.add(render_cache)
        if self.mode != "keys":
            say(
                logging.INFO,
                "mmobs: render requests get vLLM's full render (MMOBS_VLLM_RENDER=keys skips its pixel work)",
            )
            return
        if not getattr(model_config, "is_multimodal_model", False):
            say(
                logging.INFO,
                "mmobs: keys-only render: %s takes no images; its renders are text only",
                model_config.model,
            )
            return
        try:
            processor = serving.online_renderer.renderer.get_mm_processor()
            verdict = self.processing.verdict(processor, {})
            self.model_declined = verdict.why_not
            videos = self.processing.video_verdict(processor, {})
        except Exception as error:  # noqa: BLE001 - a processor that cannot be checked is not trusted
            self.model_declined = f"its processor could not be checked ({type(error).__name__}: {str(error)[:160]})"
        if self.model_declined is not None:
            say(logging.WARNING, "mmobs: keys-only render is off for %s: %s; vLLM's full render answers",
                model_config.model, self.model_declined)  # fmt: skip
            return
        say(logging.INFO,
            "mmobs: keys-only render for %s: images answer from their bytes and size (%s, checked on probe images; "
            "%s); %s; audio and embeddings get vLLM's full render",
            model_config.model, verdict.rule.name if verdict.rule else "", self.images, _videos_line(videos, self.skipper is not None))  # fmt: skip


def _videos_line(verdict: Verdict, remembered: bool) -> str:
    """What the start-up line says of videos: the rule, and where their frames' count and size come from."""
    if verdict.rule is None:
        return f"videos get vLLM's full render ({verdict.why_not})"
    where = "re-sent clips from the decoded index, first-seen MP4s from their header" if remembered else "decoded"
    return f"videos from their bytes and frames' count and size ({verdict.rule.name}, checked on probe clips; {where})"


def render_call(original: Callable[..., Any], endpoint: Endpoint, plan: RenderPlan) -> Callable[..., Any]:
    """One of ``ServingRender``'s ``render_*_request`` coroutines, inside its request's render state, counted."""

    @functools.wraps(original)
    async def render(self: Any, *args: Any, **kwargs: Any) -> Any:
        request = plan.request(endpoint)
        token = render_mode.enter(request)
        refused = True  # until an answer that is not an error comes back (an exception is a refusal too)
        try:
            result = await original(self, *args, **kwargs)
            refused = isinstance(result, plan.error_class)
            return result
        finally:
            render_mode.leave(token)
            plan.count(request, refused)

    return render


def extract_mm_features(original: Callable[..., Any], plan: RenderPlan) -> Callable[..., Any]:
    """``ServingRender._extract_mm_features``: no tensors for a prompt processed keys-only (it has none to send)."""

    @functools.wraps(original)
    def _extract_mm_features(self: Any, engine_input: Any, **kwargs: Any) -> Any:
        if isinstance(engine_input.get("mm_kwargs"), plan.keys_only_class):
            kwargs["mm_payload"] = "none"
        return original(self, engine_input, **kwargs)

    return _extract_mm_features


def serving_init(original: Callable[..., None], plan: RenderPlan) -> Callable[..., None]:
    """``ServingRender.__init__``, then the served model checked against the size rules (nobody watching)."""

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        with observing(None):
            plan.serving_built(self)

    return __init__
