"""Looking vLLM's attributes up before replacing any: a vLLM of another shape is declined, never half patched.

Shared by the plugin (:mod:`mmobs.vllm.plugin`) and the parts it plans apart
(:mod:`mmobs.vllm.cache_drift.cache_hooks`, :mod:`mmobs.vllm.front_end.front_end_plan`), which each
check every target of their :data:`Plan` first and raise :class:`ShapeMismatch`
naming the first one that is off; :func:`registering`, the one wrapper of a
vLLM constructor; and the one reader of a setting vLLM reads at run time, its
pixel limit.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
from collections.abc import Callable
from typing import Any

#: What a plan replaces: (owner, attribute, replacement, whether the owner is an instance, not a class or module).
Plan = list[tuple[Any, str, Any, bool]]


class ShapeMismatch(Exception):
    """vLLM is not shaped as this plugin expects: do nothing, say so once."""


def module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise ShapeMismatch(f"cannot import {name}: {error}") from None


def attribute(owner: Any, name: str) -> Any:
    value = getattr(owner, name, None)
    if value is None:
        raise ShapeMismatch(f"{getattr(owner, '__name__', owner)}.{name} is missing")
    return value


def function(owner: Any, name: str, parameters: int | None = None) -> Callable[..., Any]:
    """A plain function (not a generator) of ``owner``, taking ``parameters`` parameters if given."""
    found = attribute(owner, name)
    if not callable(found) or inspect.isgeneratorfunction(found):
        raise ShapeMismatch(f"{name} is not a plain function")
    if parameters is not None:
        try:
            count = len(inspect.signature(found).parameters)
        except (TypeError, ValueError):
            count = -1
        if count != parameters:
            raise ShapeMismatch(f"{name} takes {count} parameters, expected {parameters}")
    return found  # type: ignore[no-any-return]


def vllm_max_pixels() -> int | None:
    """vLLM's own pixel limit as it reads it now (``VLLM_MAX_IMAGE_PIXELS``; 0 or less means none)."""
    envs = sys.modules.get("vllm.envs")
    limit = getattr(envs, "VLLM_MAX_IMAGE_PIXELS", 0) if envs is not None else 0
    return limit if isinstance(limit, int) and limit > 0 else None


def registering(init: Callable[..., None], register: Callable[[Any], None]) -> Callable[..., None]:
    """A class's ``__init__`` that hands each new object to ``register`` once it is built."""

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        register(self)

    return __init__


def vllm_version() -> str:
    """The running vLLM's version, for the messages that decline it."""
    module = sys.modules.get("vllm")
    return str(getattr(module, "__version__", "unknown"))
