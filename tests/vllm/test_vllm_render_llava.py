"""Keys-only render on a second model family: a LLaVA, whose every image is a fixed number of placeholders.

The tiny LLaVA of ``scripts/make_tiny_llava.py`` (16 tokens an image, whatever its size) is served twice,
side by side, as a render server would be (``vllm serve --enable-scale-out``), with the server's own
``--media-io-kwargs`` (a black background for transparent images, which goes into the keys): vLLM alone
(``MMOBS_VLLM_PLUGIN=0``) and with mmobs and ``MMOBS_VLLM_RENDER=keys``. Every golden image, one corpus image
of each class, and the request shapes a router forwards must be answered alike (tests/vllm/render_requests.py).
What LLaVA adds to the Qwen2-VL's keys-only render (test_vllm_render_keys_only.py, every corpus image) is its
size rule and the server's background colour: each class of image takes it, the corpus's many EXIF variants
of one format alike.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import golden
from tests.support.vllm_kinds import ServerContext
from tests.support.vllm_server import MMOBS_FLAGS, VllmServer, make_model
from tests.vllm.render_requests import (
    assert_every_image_answered_alike,
    assert_same_answer,
    block_extra_keys,
    both,
    chat,
    image_part,
    moved,
    photos,
    reasons,
    user,
)

pytestmark = pytest.mark.vllm_server

MEDIA_IO_KWARGS = {"image": {"rgba_background_color": [0, 0, 0]}}


@pytest.fixture(scope="module")
def llava(vllm_server_context: ServerContext) -> Path:
    context = vllm_server_context
    return make_model(context.venv, context.directory("tiny-llava"), "make_tiny_llava.py")


def _serve(context: ServerContext, model: Path, name: str, env: dict[str, str]) -> Iterator[VllmServer]:
    server = VllmServer(
        context.venv,
        model,
        context.directory(name),
        args=[*MMOBS_FLAGS, "--enable-scale-out", "--media-io-kwargs", json.dumps(MEDIA_IO_KWARGS)],
        env=env,
        name=f"vllm serve LLaVA --enable-scale-out ({name})",
    )
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def llava_alone(vllm_server_context: ServerContext, llava: Path) -> Iterator[VllmServer]:
    yield from _serve(vllm_server_context, llava, "llava-alone", {"MMOBS_VLLM_PLUGIN": "0"})


@pytest.fixture(scope="module")
def llava_keys(vllm_server_context: ServerContext, llava: Path) -> Iterator[VllmServer]:
    yield from _serve(vllm_server_context, llava, "llava-keys", {"MMOBS_VLLM_RENDER": "keys"})


def test_the_start_up_line_names_the_size_rule(llava_keys: VllmServer) -> None:
    (line,) = [line for line in llava_keys.log_lines() if "mmobs: keys-only render for" in line]
    assert "(the image's size, checked on probe images; re-sent images from the decoded index, first-seen JPEGs" in line


def test_each_class_of_image_is_answered_as_vllm_alone_answers_it(
    llava_alone: VllmServer, llava_keys: VllmServer
) -> None:
    assert_every_image_answered_alike(llava_alone, llava_keys, one_of_each_class=True)


def test_request_shapes_and_the_routers_block_keys(llava_alone: VllmServer, llava_keys: VllmServer) -> None:
    first, second, third = photos(3, seed=500)
    rgba = golden.input_bytes("rgba.png")
    reply = {"role": "assistant", "content": "A picture."}
    shapes = {
        "three photos": chat(llava_alone, user(image_part(first), image_part(second), image_part(third))),
        "a history re-sending its images": chat(
            llava_alone, user(image_part(first)), reply, user(image_part(second), image_part(first)), reply,
            user(image_part(third), text="And this one?"),
        ),
        "a transparent PNG, on the server's background": chat(llava_alone, user(image_part(rgba, media_type="image/png"))),
        "a client uuid with its data": chat(llava_alone, user(image_part(second, uuid="llava-uuid-1"))),
        "the uuid alone": chat(llava_alone, user(image_part(None, uuid="llava-uuid-1"))),
    }  # fmt: skip
    before = reasons(llava_keys)
    for what, body in shapes.items():
        expected, found = both(llava_alone, llava_keys, body)
        assert_same_answer(expected, found, what)
        assert all(p["length"] == 16 for p in found.json()["features"]["mm_placeholders"]["image"]), what
    assert moved(before, reasons(llava_keys)) == {("chat", "keys", "keys_only"): len(shapes)}
    expected, found = both(llava_alone, llava_keys, shapes["a history re-sending its images"])
    keys = block_extra_keys(found.json())
    assert keys == block_extra_keys(expected.json()) and any(len(key) == 2 for key in keys), keys
