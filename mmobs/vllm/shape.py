"""Looking vLLM's attributes up before replacing any: a vLLM of another shape is declined, never half patched.

Shared by the plugin (:mod:`mmobs.vllm.plugin`) and its cache drift hooks
(:mod:`mmobs.vllm.cache_hooks`), which each check every target of their plan
first and raise :class:`ShapeMismatch` naming the first one that is off; and
the one reader of a setting vLLM reads at run time, its pixel limit.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["ShapeMismatch", "attribute", "function", "module", "vllm_max_pixels"]


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
