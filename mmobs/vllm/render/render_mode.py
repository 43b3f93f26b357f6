"""The render request in flight: which endpoint, which mode, and why a keys-only answer was declined.

The serving hooks (:mod:`mmobs.vllm.render.render_hooks`) open a
:class:`RenderRequest` around each of vLLM's render calls; the loader, the
processor and the answer's serializer read it from a context variable, which
the plugin's context hooks carry into vLLM's executor threads. Outside a
render call there is none, and every hook keeps vLLM's path.
"""

from __future__ import annotations

import contextvars
import logging
import os
from dataclasses import dataclass
from typing import Literal

from mmobs.vllm.startup_log import say

#: ``MMOBS_VLLM_RENDER=keys``: render answers keys, token ids and placeholders only, skipping the pixel work.
RENDER_ENV = "MMOBS_VLLM_RENDER"

Mode = Literal["keys", "full"]
Endpoint = Literal["chat", "completions", "responses"]
#: Why a render request was answered as it was: a closed set (the counter's ``reason`` label).
Reason = Literal[
    "keys_only",  # answered from the bytes and sizes
    "text_only",  # nothing multimodal to skip
    "switch_off",  # MMOBS_VLLM_RENDER is not keys: vLLM's full render
    "model",  # the served model's placeholders need the processor's output
    "modality",  # an item no rule covers (audio; a video the served model's video rule does not hold for)
    "embeddings",  # an image given as embeddings or processor inputs
    "uuid_only",  # an item sent by uuid alone: vLLM's path decides
    "processor_kwargs",  # the size rule does not hold under the request's processor kwargs
    "size_rule",  # the size rule refuses an image's size (an extreme aspect ratio): vLLM's processor answers
    "refused",  # answered with an error
]
ENDPOINTS: tuple[Endpoint, ...] = ("chat", "completions", "responses")


def configured_mode() -> Mode:
    """The mode the operator chose: ``keys`` for ``MMOBS_VLLM_RENDER=keys``, else ``full`` (said once if unknown)."""
    value = os.environ.get(RENDER_ENV, "").strip().lower()
    if value in ("", "full"):
        return "full"
    if value == "keys":
        return "keys"
    say(logging.WARNING, "mmobs: %s=%r is neither 'keys' nor 'full': vLLM's full render answers", RENDER_ENV, value)
    return "full"


@dataclass(slots=True)
class RenderRequest:
    """One render call: what it asked for, and what answering it keys-only came to."""

    endpoint: Endpoint
    #: Why it (or a part of it) gets vLLM's full render, the first reason found: the switch, the model, or an
    #: item the rules do not cover. None while it may be answered keys-only.
    declined: Reason | None = None
    #: Prompts processed keys-only (a completions render may carry several).
    keys_only_prompts: int = 0

    @property
    def keys_only(self) -> bool:
        """Whether what is still to come may be answered keys-only (nothing declined it so far)."""
        return self.declined is None

    def decline(self, reason: Reason) -> None:
        """Give this request vLLM's full render from here on, for ``reason`` (the first one is counted)."""
        if self.declined is None:
            self.declined = reason


_current: contextvars.ContextVar[RenderRequest | None] = contextvars.ContextVar("mmobs_vllm_render", default=None)


def current() -> RenderRequest | None:
    """The render request this code runs for, or None outside vLLM's render endpoints."""
    return _current.get()


def rendering() -> bool:
    """Whether this code runs for a render request (the loader's guard applies there, whatever the switch)."""
    return _current.get() is not None


def keys_only() -> bool:
    """Whether this code runs for a render request still to be answered keys-only."""
    request = _current.get()
    return request is not None and request.keys_only


def enter(request: RenderRequest) -> contextvars.Token[RenderRequest | None]:
    return _current.set(request)


def leave(token: contextvars.Token[RenderRequest | None]) -> None:
    _current.reset(token)
