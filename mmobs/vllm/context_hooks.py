"""vLLM's executors and its dummy inputs, as mmobs needs them: the request's context carried, warm-ups unwatched.

``loop.run_in_executor`` and ``executor.submit`` do not copy the caller's
contextvars, so the request id the middleware binds would be lost in vLLM's
multimodal executor threads; vLLM's own dummy inputs (its start-up warm-up and
the engine's profiling) would count as traffic.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from typing import Any

from mmobs.events import observing


def context_make_async(original: Callable[..., Any]) -> Callable[..., Any]:
    """vLLM's ``make_async``, with the caller's contextvars carried into the executor thread.

    ``loop.run_in_executor`` does not copy the context (``asyncio.to_thread``
    does), so the request id bound by the middleware is lost in vLLM's
    multimodal executor without this.
    """

    @functools.wraps(original)
    def make_async(func: Callable[..., Any], executor: Any = None) -> Callable[..., Any]:
        def run_in(context: contextvars.Context, *args: Any, **kwargs: Any) -> Any:
            return context.run(func, *args, **kwargs)

        in_executor = original(run_in, executor=executor)

        def _async_wrapper(*args: Any, **kwargs: Any) -> Any:
            return in_executor(contextvars.copy_context(), *args, **kwargs)

        return _async_wrapper

    return make_async


def context_submit(original: Callable[..., Any]) -> Callable[..., Any]:
    """``executor.submit`` that runs the function in a copy of the submitter's context."""

    @functools.wraps(original)
    def submit(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return original(contextvars.copy_context().run, fn, *args, **kwargs)

    return submit


def not_traffic(original: Callable[..., Any]) -> Callable[..., Any]:
    """vLLM's ``get_dummy_mm_inputs`` with nobody watching: its dummy images are vLLM's own work.

    The API server processes a dummy multimodal input at start-up (the renderer's
    warm-up) and the engine profiles with them: counted, they would look like
    traffic before the first request.
    """

    @functools.wraps(original)
    def get_dummy_mm_inputs(*args: Any, **kwargs: Any) -> Any:
        with observing(None):
            return original(*args, **kwargs)

    return get_dummy_mm_inputs
