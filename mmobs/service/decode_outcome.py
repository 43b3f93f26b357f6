"""What a decode worker's answer means for the request: the CPU budget it spent, and the error to answer.

All of one request's work in decode workers (its large JSON body, then each
image) shares one CPU budget, spent by what each worker reports. Work over a
budget is the client's ``400 too_costly``, naming the budget and the option
that sets it; a worker the pool could not provide is the server's ``503``;
any other outcome is a bug, logged.
"""

from __future__ import annotations

from typing import Any

from mmobs.errors import BadImageError
from mmobs.keys.refusals import report_bad_image
from mmobs.observability.log_fields import safe_text
from mmobs.observability.logs import mmobs_logger
from mmobs.service.config import ServiceConfig
from mmobs.service.decode_pool import ServerBusy

_log = mmobs_logger()


class CpuBudget:
    """The CPU seconds left to one request's decoding and keying."""

    def __init__(self, seconds: float) -> None:
        self.limit = self.left = seconds

    def spend(self, seconds: float) -> None:
        self.left -= max(0.0, seconds)


def budget_text(config: ServiceConfig, outcome: dict[str, Any]) -> str:
    """The budget an outcome went over, and the option that sets it."""
    if outcome.get("resource") == "memory":
        return f"the {config.max_decode_memory_bytes >> 20} MiB of memory one image may use (--max-decode-memory-mib)"
    return f"the {config.max_request_cpu_seconds:g} s of CPU time a request may use (--max-request-cpu-seconds)"


def too_costly(config: ServiceConfig, outcome: dict[str, Any], shared: bool, param: str) -> BadImageError:
    """The image ``param`` refused as ``too_costly``, reported; ``shared``: earlier work spent some of the budget."""
    text = budget_text(config, outcome)
    spent = " (with the work done before it in this request)" if shared and outcome.get("resource") == "cpu" else ""
    return report_bad_image(
        BadImageError(
            "too_costly",
            f"decoding this image{spent} needs more than {text}; send a smaller image or fewer images per "
            "request (this is not worth retrying as it is)",
            param=param,
        )
    )


def unexpected_outcome(outcome: dict[str, Any]) -> Exception:
    """An outcome the caller has no answer for: the pool's shortage (retry later), or a bug, logged either way."""
    if outcome["status"] == "server_busy":
        _log.warning("decode_unavailable", detail=safe_text(outcome.get("detail", "")))
        detail = outcome.get("detail", "busy")
        return ServerBusy(f"the server could not decode the image ({detail}); retry later", 2)
    _log.error("decode_worker_error", outcome=safe_text(outcome))
    return RuntimeError(f"decode worker: {outcome.get('detail', outcome['status'])}")
