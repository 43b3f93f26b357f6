"""A clip vLLM would refuse for the prompt's length, refused before it is decoded, in vLLM's own words.

vLLM's chat endpoint decodes every clip and runs the HF processor on it
before it counts the prompt's tokens and refuses a prompt longer than the
model's context (``Input length (N) exceeds model's maximum context length
(M).``). A clip long enough for that costs seconds of CPU and gigabytes first:
OpenCV reads every frame up to the last one kept. Both things that decide the
refusal, the frames kept and their size, are known before that read.

Two steps, both inside vLLM's own code paths:

1. In vLLM's OpenCV decoder, once its header read and sampling rule have
   picked the frames (where :mod:`mmobs.vllm.video_budget` checks its
   budgets), a first-seen MP4 whose picked frames alone come to more
   placeholder tokens than the context holds (the served model's video rule,
   :mod:`mmobs.vllm.render.video_rules`, under the server's processor kwargs)
   is answered from its header (:mod:`mmobs.vllm.render.header_clips`): its
   decode is deferred.
2. In the processor, a prompt with a deferred clip is sized as a keys-only
   render sizes it (:mod:`mmobs.vllm.render.keys_only`) and expanded by vLLM's
   own ``_apply_prompt_updates``. Where that prompt is longer than the
   context, vLLM's own ``get_max_tokens`` refuses it (its ``ValueError``, which
   vLLM answers with its 400), counted in
   ``mmobs_vllm_video_refusals_total{budget="vllm_length"}``. Otherwise (the
   request's processor kwargs shrink the clip, a rule does not hold under
   them) the deferred clips are decoded and vLLM processes the prompt as
   always.

Only the chat and completions routes are checked, the two whose refusal is
``get_max_tokens``'s (``/v1/responses`` words its own), and only where the
preset's middleware names the route: elsewhere every clip is decoded first,
as vLLM alone decodes it. A request with ``truncate_prompt_tokens`` is
refused by vLLM in the truncation's words once the placeholders are expanded
(a clip's span cannot be cut), so its deferred clips are decoded and vLLM
words the refusal: the decode is vLLM alone's cost, counted as a late decode.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from mmobs.events import observing
from mmobs.observability.context import current_request
from mmobs.vllm import video_budget
from mmobs.vllm.decode_free_hits.clip_skip import UndecodedFrames, frames_of
from mmobs.vllm.render import render_mode

if TYPE_CHECKING:
    from mmobs.vllm.render.keys_only import KeysOnlyProcessing
    from mmobs.vllm.render.video_rules import ClipSize


class LengthGate:
    """Defers the decode of clips too long for the context, and refuses their prompts in vLLM's words."""

    def __init__(self, processing: KeysOnlyProcessing, get_max_tokens: Callable[..., int]) -> None:
        self.processing = processing
        #: vLLM's ``get_max_tokens``: the check (and the words) of its chat endpoint.
        self.get_max_tokens = get_max_tokens
        #: The served model's processor, once vLLM's renderer has made it (None: nothing is deferred).
        self.processor: Any = None

    def renderer_built(self, renderer: Any) -> None:
        """vLLM's renderer has made the served model's processor: its video rule is checked now, at start-up."""
        processor = getattr(renderer, "mm_processor", None)
        if processor is None:
            return
        self.processor = processor
        try:
            self._rule()
        except Exception:  # noqa: BLE001 - a processor that cannot even be asked: nothing is sized from a header
            self.processor = None

    def _rule(self) -> Any:
        with observing(None):
            return self.processing.video_verdict(self.processor, {}).rule

    def sized_by_rule(self, clip: ClipSize) -> bool:
        """Whether a keys-only render can size clips at all: the served model's video rule holds."""
        return self.processor is not None and self._rule() is not None

    def over_context(self, clip: ClipSize) -> bool:
        """Whether a chat's clip alone is longer than the context, under the server's processor kwargs."""
        processor = self.processor
        if processor is None or not _chat_route():
            return False
        rule = self._rule()
        try:
            with observing(None):
                return rule is not None and rule.tokens(processor, clip, {}) > _context(processor)
        except Exception:  # noqa: BLE001 - a rule that cannot size it: vLLM's decode decides, as always
            return False

    def check(self, processor: Any, inputs: Any) -> None:
        """Refuse, as vLLM would after the decode, a prompt with a deferred clip that is longer than the context."""
        if not _chat_route() or _truncating.get() or not _deferred(inputs.mm_data_items):
            return
        with observing(None):
            reason, items = self.processing.declined(processor, inputs)
            if reason is not None or items is None:
                return
            try:
                length = self.processing.prompt_length(processor, inputs, items)
            except Exception:  # noqa: BLE001 - vLLM's processing answers what the rules cannot size
                return
        limit = _context(processor)
        if length is not None and length > limit:
            video_budget.refused("vllm_length", prompt_tokens=length, max_model_len=limit)
            self.get_max_tokens(limit, None, length, {})  # raises vLLM's ValueError, in its words


#: The routes whose length check is vLLM's ``get_max_tokens`` (``/v1/responses`` and the offline path word theirs
#: otherwise): as the preset's middleware names them (without it, no route is known and nothing is deferred).
CHECKED_ROUTES = frozenset({"/v1/chat/completions", "/v1/completions"})


#: Whether the prompt vLLM's renderer is processing asked for ``truncate_prompt_tokens``.
_truncating: ContextVar[bool] = ContextVar("mmobs_vllm_truncating", default=False)


def truncation_noted(original: Callable[..., Any]) -> Callable[..., Any]:
    """vLLM's ``_process_singleton`` or its async twin, with the prompt's ``truncate_prompt_tokens`` noted for the check."""

    def asks(kwargs: dict[str, Any]) -> bool:
        return getattr(kwargs.get("tok_params"), "truncate_prompt_tokens", None) is not None

    if inspect.iscoroutinefunction(original):

        @functools.wraps(original)
        async def process_async(self: Any, prompt: Any, **kwargs: Any) -> Any:
            token = _truncating.set(asks(kwargs))
            try:
                return await original(self, prompt, **kwargs)
            finally:
                _truncating.reset(token)

        return process_async

    @functools.wraps(original)
    def process(self: Any, prompt: Any, **kwargs: Any) -> Any:
        token = _truncating.set(asks(kwargs))
        try:
            return original(self, prompt, **kwargs)
        finally:
            _truncating.reset(token)

    return process


def _chat_route() -> bool:
    stats = current_request.get()
    return stats is not None and stats.route in CHECKED_ROUTES and not render_mode.rendering()


def _context(processor: Any) -> int:
    return int(processor.info.ctx.model_config.max_model_len)


def _deferred(mm_data_items: Any) -> bool:
    videos = mm_data_items.get("video") if hasattr(mm_data_items, "get") else None
    frames = [frames_of(item) for item in getattr(videos, "data", None) or ()]
    return any(isinstance(found, UndecodedFrames) and found.unheld for found in frames)


def renderer_init(original: Callable[..., None], gate: LengthGate) -> Callable[..., None]:
    """vLLM's ``BaseRenderer.__init__``, then its multimodal processor handed to the gate."""

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        gate.renderer_built(self)

    return __init__
