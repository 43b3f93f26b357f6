"""A video clip's decode bounded before it starts: what vLLM's OpenCV decoder would read and keep, from the header.

vLLM's OpenCV decoder (its default) opens the container, reads its frame count
and fps, asks the model's sampling rule which frames to keep, allocates one
array for every kept frame and then reads every frame up to the last one it
keeps. A small file can ask for a great deal of both: a long still scene (a
screen recording: minutes of frames read to keep a few dozen), or huge frames
(a few kilobytes of VP8 black at 16k x 10k decode to gigabytes). vLLM 0.33's
per-request budget (``VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES``) is charged after
the decode, when its cost is paid.

:func:`read_frames` wraps ``OpenCVVideoBackendMixin.read_frames``, where
vLLM's own header read and its own sampling rule have decided the frames, and
checks them against two budgets before a frame is read:

* ``MMOBS_VLLM_VIDEO_MAX_FRAMES_READ`` (default 18,000: ten minutes at 30 fps),
  the frames the decoder would pass through (up to the last kept one);
* ``MMOBS_VLLM_VIDEO_MAX_DECODED_BYTES`` (default 4 GiB), the kept frames'
  RGB bytes (a Qwen2-VL clip keeps at most 768 frames: 2.1 GB at 720p).

``0`` turns a budget off. A clip over one is refused with a ``ValueError``
(vLLM's 400) that names the budget and what the clip asked for, and counted
in ``mmobs_vllm_video_refusals_total{budget}``. Where vLLM 0.33 would refuse
the decoded frames for its own budget, the clip is refused first, in vLLM's
words (``budget="vllm_decode_bytes"``). Other decoders (torchcodec, GPU ones)
are not bounded here.
"""

from __future__ import annotations

import contextvars
import functools
import os
import sys
from collections.abc import Callable
from typing import Any, Literal, get_args

from prometheus_client import REGISTRY, CollectorRegistry, Counter

from mmobs.observability.log_fields import safe_text
from mmobs.observability.logs import mmobs_logger
from mmobs.observability.metrics import MetricSpec, made_once
from mmobs.vllm.cache_drift.cache_attempt import request_id_now
from mmobs.vllm.render import header_clips
from mmobs.vllm.startup_log import whole_number_env

MAX_FRAMES_READ_ENV = "MMOBS_VLLM_VIDEO_MAX_FRAMES_READ"
MAX_DECODED_BYTES_ENV = "MMOBS_VLLM_VIDEO_MAX_DECODED_BYTES"
DEFAULT_MAX_FRAMES_READ = 18_000
DEFAULT_MAX_DECODED_BYTES = 4 * 1024**3

#: The budget a refused clip was over: mmobs's two, vLLM 0.33's own decoded-bytes budget applied early, or the
#: model's context, which vLLM checks after the decode (:mod:`mmobs.vllm.video_length`).
Budget = Literal["frames_read", "decoded_bytes", "vllm_decode_bytes", "vllm_length"]
BUDGETS: tuple[str, ...] = get_args(Budget)

VIDEO_BUDGET_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "refusals", Counter, "mmobs_vllm_video_refusals_total",
        "Video clips refused (a 400) before their decode, by the budget their header showed they would exceed: "
        "frames_read (MMOBS_VLLM_VIDEO_MAX_FRAMES_READ), decoded_bytes (MMOBS_VLLM_VIDEO_MAX_DECODED_BYTES), "
        "vllm_decode_bytes (vLLM's VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES, which vLLM applies after the decode), or "
        "vllm_length (the prompt longer than the model's context, which vLLM checks after the decode).",
        ("budget",),
    ),
)  # fmt: skip
METRIC_NAMES: frozenset[str] = frozenset(spec.name for spec in VIDEO_BUDGET_METRICS)


class VideoBudgetMetrics:
    """The series of :data:`VIDEO_BUDGET_METRICS` in one registry, every budget's at zero from the start."""

    refusals: Counter

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        for spec in VIDEO_BUDGET_METRICS:
            setattr(self, spec.attribute, spec.build(REGISTRY if registry is None else registry))
        for budget in BUDGETS:
            self.refusals.labels(budget)


@made_once
def video_budget_metrics() -> VideoBudgetMetrics:
    return VideoBudgetMetrics()


class VideoTooCostly(ValueError):
    """A clip whose decode would exceed a budget (a ``ValueError``: vLLM answers it with a 400)."""

    def __init__(self, budget: Budget, message: str) -> None:
        super().__init__(message)
        self.budget = budget


#: The request's decoded-bytes budget of the video loader running in this context (vLLM 0.33's; None before).
current_decode_budget: contextvars.ContextVar[Any] = contextvars.ContextVar("mmobs_vllm_decode_budget", default=None)


def check(width: int, height: int, frame_idx: list[int], *, decode_budget: Any = None) -> None:
    """Raise :class:`VideoTooCostly` where reading ``frame_idx`` of ``width`` x ``height`` frames exceeds a budget."""
    if not frame_idx or width <= 0 or height <= 0:
        return  # vLLM's own checks refuse these, in its words
    read, kept = max(frame_idx) + 1, len(set(frame_idx))
    decoded = kept * width * height * 3
    max_read = _budget(MAX_FRAMES_READ_ENV, DEFAULT_MAX_FRAMES_READ)
    if max_read and read > max_read:
        _refuse(
            "frames_read",
            f"too_costly: decoding this video would read {read} frames to keep {kept}, over the {max_read} "
            f"{MAX_FRAMES_READ_ENV} allows; send a shorter clip, or sample it at a lower fps",
            frames_read=read, frames_kept=kept, width=width, height=height,
        )  # fmt: skip
    max_decoded = _budget(MAX_DECODED_BYTES_ENV, DEFAULT_MAX_DECODED_BYTES)
    if max_decoded and decoded > max_decoded:
        _refuse(
            "decoded_bytes",
            f"too_costly: this video's {kept} kept frames of {width}x{height} would decode to {decoded} bytes, over "
            f"the {max_decoded} {MAX_DECODED_BYTES_ENV} allows; send a smaller or shorter clip",
            frames_read=read, frames_kept=kept, width=width, height=height,
        )  # fmt: skip
    limit = getattr(sys.modules.get("vllm.envs"), "VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES", 0)
    used = getattr(decode_budget, "used", None)
    if isinstance(limit, int) and limit > 0 and isinstance(used, int) and used + decoded > limit:
        _refuse(  # vLLM's own words, as it would refuse the decoded frames
            "vllm_decode_bytes",
            f"Request decoded media exceeds VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES={limit} ({used + decoded} bytes).",
            frames_read=read, frames_kept=kept, width=width, height=height,
        )  # fmt: skip


def _budget(name: str, default: int) -> int:
    """The budget as its variable says at this check; a value that is not a whole number warns once, not per clip."""
    return _parsed(name, os.environ.get(name, "").strip(), default)


@functools.lru_cache(maxsize=16)
def _parsed(name: str, raw: str, default: int) -> int:
    return whole_number_env(name, default)


def _refuse(budget: Budget, message: str, **asked: int) -> None:
    refused(budget, **asked)
    raise VideoTooCostly(budget, message)


def refused(budget: Budget, **asked: int) -> None:
    """Count a clip refused for ``budget``, and log it as ``mm_video_refused`` with what it asked for."""
    video_budget_metrics().refusals.labels(budget).inc()
    mmobs_logger().warning(
        "mm_video_refused", request_id=safe_text(request_id_now() or "", 128), budget=budget, **asked
    )


def read_frames(original: Callable[..., Any], cv2: Any) -> Callable[..., Any]:
    """``OpenCVVideoBackendMixin.read_frames(cls, cap, frame_idx, ...)``, the budgets checked first.

    A clip its header answers for (in a keys-only render, or a chat's clip too long for the context) is not read:
    :mod:`mmobs.vllm.render.header_clips`.
    """

    @functools.wraps(original)
    def bounded(cls: type, cap: Any, frame_idx: list[int], *args: Any, **kwargs: Any) -> Any:
        width, height = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
        check(width, height, list(frame_idx), decode_budget=current_decode_budget.get())
        answered = header_clips.frames_from_header(cap, cv2, list(frame_idx), width, height)
        return original(cls, cap, frame_idx, *args, **kwargs) if answered is None else answered

    return bounded
