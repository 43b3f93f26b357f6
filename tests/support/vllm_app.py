"""A vLLM-shaped ASGI app for the plugin's HTTP tests, built from vLLM's own parts.

A real ``vllm serve`` needs a model and an accelerator; neither is available
(or allowed) here. What the plugin and the middleware touch is vLLM's
front end, and that is what this app is made of, unmodified:

* the plugin is loaded by vLLM's ``load_general_plugins()``;
* ``--middleware mmobs.vllm.Middleware`` is registered by vLLM's own
  ``init_entrypoints_middleware`` (with ``--enable-request-id-headers``);
* ``/metrics`` is vLLM's own route (``attach_router``: the default registry,
  or a ``MultiProcessCollector`` under ``PROMETHEUS_MULTIPROC_DIR``);
* the image goes through vLLM's ``MediaConnector.fetch_image_async`` (its
  global thread pool) and is keyed by vLLM's ``MultiModalHasher`` on a
  single-thread executor through vLLM's renderer ``make_async``, as
  ``BaseRenderer._process_multimodal_async`` does;
* the request id is computed by vLLM's own ``OpenAIServing._base_request_id``,
  compiled from vLLM's source (its module imports a serving stack that is not
  installed here).

Run with ``uvicorn tests.support.vllm_app:app``.
"""

from __future__ import annotations

import ast
import inspect
from argparse import Namespace
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib.util import find_spec
from typing import Any

from fastapi import FastAPI, Request
from vllm.plugins import load_general_plugins

load_general_plugins()

import vllm.renderers.base as renderers  # noqa: E402
from vllm.entrypoints.serve.instrumentator.metrics import attach_router  # noqa: E402
from vllm.entrypoints.serve.middleware.register import init_entrypoints_middleware  # noqa: E402
from vllm.multimodal.hasher import MultiModalHasher  # noqa: E402
from vllm.multimodal.media.connector import MediaConnector  # noqa: E402


def _vllm_base_request_id() -> Callable[..., str]:
    """``OpenAIServing._base_request_id`` compiled from vLLM's own source file."""
    spec = find_spec("vllm.entrypoints.serve.engine.serving")
    assert spec is not None and spec.origin is not None
    tree = ast.parse(open(spec.origin).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "_base_request_id":
            node.decorator_list = []
            from vllm.utils import random_uuid

            namespace: dict[str, Any] = {"random_uuid": random_uuid, "Request": Request}
            exec(compile(ast.Module([node], type_ignores=[]), spec.origin, "exec"), namespace)
            return namespace["_base_request_id"]
    raise RuntimeError("vLLM's serving module has no _base_request_id")


base_request_id = _vllm_base_request_id()
assert next(iter(inspect.signature(base_request_id).parameters)) == "raw_request"

app = FastAPI()
attach_router(app)
init_entrypoints_middleware(
    Namespace(
        allowed_origins=["*"],
        allow_credentials=False,
        allowed_methods=["*"],
        allowed_headers=["*"],
        api_key=None,
        enable_request_id_headers=True,
        middleware=["mmobs.vllm.Middleware"],
    ),
    app,
    (),
)
_mm_executor = ThreadPoolExecutor(max_workers=1)


@app.post("/v1/render")
async def render(request: Request) -> dict[str, str]:
    body = await request.json()
    image = await MediaConnector().fetch_image_async(body["image_url"])

    def key() -> str:
        return MultiModalHasher.hash_kwargs("blake3", model_id="probe", image=image)

    mm_hash = await renderers.make_async(key, executor=_mm_executor)()
    return {"request_id": base_request_id(request), "mm_hash": mm_hash}
