"""mmobs's keys are the running server's own: ``vllm serve --enable-scale-out``'s render endpoint.

``POST /v1/chat/completions/render`` answers with what vLLM would submit to
its engine, ``features.mm_hashes`` included: the keys the running server uses,
scoped by the served model and the request's processor and media kwargs. The
server here runs vLLM alone (``MMOBS_VLLM_PLUGIN=0``; the keys are vLLM's
own), and every golden input and every corpus image mmobs accepts is
rendered: its hash must equal ``key_for_bytes(data, model_id=<served model>)``
and the key a real ``mmobs serve`` answers on ``/v1/hash``, with and without
request-level kwargs; where vLLM keys by the client's uuid, the hash is the
uuid (or, with kwargs, the key of the uuid and the kwargs).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from mmobs import BadImageError, key_for_bytes
from mmobs.keys.hashing import MultiModalHasher
from scripts import corpus
from tests.support import ServiceProcess, data_url, golden
from tests.support.vllm_server import VllmServer

pytestmark = pytest.mark.vllm_server

RENDER = "/v1/chat/completions/render"
PROCESSOR_KWARGS = {"max_pixels": 200704}
MEDIA_IO_KWARGS = {"image": {"rgba_background_color": [0, 0, 0]}}


def inputs() -> list[tuple[str, bytes]]:
    files = [(path.name, path.read_bytes()) for path in sorted((golden.GOLDEN_DIR / "inputs").iterdir())]
    cases = [(c.name, c.payload) for c in corpus.build_corpus() if c.kind == "image" and c.expect[0] == "ok"]
    return files + cases


def render(server: VllmServer, data: bytes, uuid: str | None = None, **kwargs: Any) -> httpx.Response:
    part: dict[str, Any] = {"type": "image_url", "image_url": {"url": data_url(data)}}
    if uuid is not None:
        part["uuid"] = uuid
    content = [part, {"type": "text", "text": "Describe."}]
    body = {"model": server.model, "messages": [{"role": "user", "content": content}], **kwargs}
    return httpx.post(server.url + RENDER, json=body, timeout=120)


def rendered_key(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text[:500]
    (key,) = response.json()["features"]["mm_hashes"]["image"]
    return str(key)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    service = ServiceProcess(tmp_path_factory.mktemp("render-keys-service"))
    try:
        yield service
    finally:
        service.stop()


def test_every_image_mmobs_accepts_has_the_running_servers_key(
    vllm_scale_out: VllmServer, service: ServiceProcess
) -> None:
    assert vllm_scale_out.extra_env == {"MMOBS_VLLM_PLUGIN": "0"} and "--enable-scale-out" in vllm_scale_out.command
    compared, refused_by_vllm = [], []
    for name, data in inputs():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                expected = key_for_bytes(data, model_id=vllm_scale_out.model)
            except BadImageError:
                continue  # mmobs refuses some images vLLM opens (docs/vllm.md, "Formats"), never the other way
        response = render(vllm_scale_out, data)
        if response.status_code == 400:
            refused_by_vllm.append(name)
            continue
        assert rendered_key(response) == expected, name
        served = httpx.post(
            service.url + "/v1/hash", json={"images": [data_url(data)], "model_id": vllm_scale_out.model}, timeout=60
        )
        assert served.json()["items"][0]["mm_hash"] == expected, name
        compared.append(name)
    assert len(compared) >= 40, (len(compared), refused_by_vllm)
    assert refused_by_vllm == [], refused_by_vllm  # an image mmobs keys is one vLLM keys


def test_request_kwargs_are_scoped_into_the_key_as_the_server_scopes_them(
    vllm_scale_out: VllmServer, service: ServiceProcess
) -> None:
    data, model = golden.input_bytes("photo.jpg"), vllm_scale_out.model
    plain = key_for_bytes(data, model_id=model)
    with_processor = rendered_key(render(vllm_scale_out, data, mm_processor_kwargs=PROCESSOR_KWARGS))
    assert with_processor == key_for_bytes(data, model_id=model, mm_processor_kwargs=PROCESSOR_KWARGS) != plain
    served = httpx.post(
        service.url + "/v1/hash",
        json={"images": [data_url(data)], "model_id": model, "mm_processor_kwargs": PROCESSOR_KWARGS},
        timeout=60,
    )
    assert served.json()["items"][0]["mm_hash"] == with_processor
    with_media = rendered_key(render(vllm_scale_out, data, media_io_kwargs=MEDIA_IO_KWARGS))
    assert with_media == key_for_bytes(data, model_id=model, media_io_kwargs=MEDIA_IO_KWARGS) != plain


def test_where_vllm_keys_by_the_uuid_the_render_hash_is_the_uuid(vllm_scale_out: VllmServer) -> None:
    data, model = golden.input_bytes("rgb.png"), vllm_scale_out.model
    assert rendered_key(render(vllm_scale_out, data, uuid="client-uuid-7")) == "client-uuid-7"
    scoped = rendered_key(render(vllm_scale_out, data, uuid="client-uuid-7", mm_processor_kwargs=PROCESSOR_KWARGS))
    assert scoped == MultiModalHasher.hash_kwargs(
        "blake3", model_id=model, image="client-uuid-7", mm_processor_kwargs=PROCESSOR_KWARGS
    )
