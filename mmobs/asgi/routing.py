"""Route templates for metric labels and log context, never raw paths.

Raw paths carry ids and are unbounded; a route template (``/v1/items/{id}``)
comes from the application's own route table, a closed set. The middleware
needs the template *before* the app runs (to bind it into the log context for
the whole request), so it matches the Starlette/FastAPI route table itself.
Apps without one get :data:`UNMATCHED_ROUTE` for every request.
"""

from __future__ import annotations

import threading
from collections.abc import MutableMapping
from typing import Any

from starlette.routing import Match, Mount

UNMATCHED_ROUTE = "<unmatched>"


def _template(routes: Any, scope: MutableMapping[str, Any], prefix: str = "") -> str | None:
    partial: str | None = None
    for route in routes:
        try:
            match, child_scope = route.matches(scope)
        except Exception:  # noqa: BLE001 - a foreign route type: skip it
            continue
        if match is Match.NONE:
            continue
        path: str | None = getattr(route, "path", None)
        if path is None:
            continue
        if isinstance(route, Mount) and match is Match.FULL:
            inner = _template(route.routes, {**scope, **child_scope}, prefix + path)
            return inner or prefix + path + "/{path:path}"
        if match is Match.FULL:
            return prefix + path
        partial = partial or prefix + path
    return partial


def endpoint_templates(routes: Any, prefix: str = "") -> list[str]:
    """The template of every HTTP endpoint in a route table, mounts included."""
    templates: list[str] = []
    for route in routes:
        path = getattr(route, "path", None)
        if not isinstance(path, str):
            continue
        if isinstance(route, Mount):
            templates += endpoint_templates(route.routes, prefix + path)
        elif getattr(route, "methods", None):
            templates.append(prefix + path)
    return templates


class RouteResolver:
    """Resolve (and cache) the route template of an HTTP scope.

    The cache is keyed by method and path and holds at most ``capacity``
    entries (the oldest goes first), so a flood of random paths costs matching
    time, never memory. A hit is one lock-free dict lookup: it runs on every
    request.
    """

    def __init__(self, capacity: int = 1024, app: Any = None) -> None:
        self.capacity = capacity
        #: The app whose routes to use when the scope names none (the middleware
        #: wrapping a Starlette app from outside runs before Starlette sets it).
        self.app = app
        self._cache: dict[tuple[str, str, int], str] = {}
        self._lock = threading.Lock()

    def __call__(self, scope: MutableMapping[str, Any]) -> str:
        app = scope.get("app") or self.app
        key = (scope.get("method", ""), scope.get("path", ""), id(app))
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        routes = getattr(app, "routes", None)
        if routes is None:
            return UNMATCHED_ROUTE
        template = _template(routes, scope) or UNMATCHED_ROUTE
        with self._lock:
            while len(self._cache) >= self.capacity:
                del self._cache[next(iter(self._cache))]
            self._cache[key] = template
        return template
