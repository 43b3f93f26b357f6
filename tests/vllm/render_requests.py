"""Requests to vLLM's render endpoints, and the comparisons the keys-only tests make between two servers.

A keys-only answer (``MMOBS_VLLM_RENDER=keys``) carries no tensors, so it is compared with vLLM alone's
answer to the same body with ``"mm_payload": "none"``, which leaves them out too: every other field
(``token_ids``, ``features.mm_hashes``, ``features.mm_placeholders``, the sampling parameters...) must be
equal, all but the request id (a fresh one per request).
"""

from __future__ import annotations

import io
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from PIL import Image

from scripts import corpus
from tests.support import data_url, golden, images
from tests.support.vllm_server import VllmServer

CHAT = "/v1/chat/completions/render"
COMPLETIONS = "/v1/completions/render"
#: The router's block size (llm-d's precise scorer hashes blocks of 16 tokens by default).
BLOCK = 16


def image_part(data: bytes | None, *, uuid: str | None = None, media_type: str = "image/jpeg") -> dict[str, Any]:
    part: dict[str, Any] = {
        "type": "image_url",
        "image_url": None if data is None else {"url": data_url(data, media_type)},
    }
    if uuid is not None:
        part["uuid"] = uuid
    return part


def user(*parts: dict[str, Any], text: str = "Describe.") -> dict[str, Any]:
    return {"role": "user", "content": [*parts, {"type": "text", "text": text}]}


def chat(server: VllmServer, *messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": server.model, "messages": list(messages), **fields}


def post(server: VllmServer, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=120)


def without_request_ids(answer: Any) -> Any:
    if isinstance(answer, list):
        return [without_request_ids(item) for item in answer]
    if isinstance(answer, dict):
        return {key: value for key, value in answer.items() if key != "request_id"}
    return answer


def both(
    alone: VllmServer, keys: VllmServer, body: dict[str, Any], path: str = CHAT
) -> tuple[httpx.Response, httpx.Response]:
    """vLLM alone's answer without tensors, and the keys-only server's answer to the body as a router sends it."""
    return post(alone, path, {**body, "mm_payload": "none"}), post(keys, path, body)


def assert_same_answer(expected: httpx.Response, found: httpx.Response, what: str = "") -> None:
    """Equal status; for a 200 every field but the request id, and no tensors; for an error, the same error."""
    assert found.status_code == expected.status_code, (what, expected.text[:300], found.text[:300])
    if found.status_code != 200:
        expected_error, found_error = expected.json()["error"], found.json()["error"]
        assert {**found_error, "message": ""} == {**expected_error, "message": ""}, (what, expected_error, found_error)
        # mmobs's guard names its reason first, and vLLM's own words follow where vLLM refuses it too.
        assert expected_error["message"] in found_error["message"], (what, expected_error, found_error)
        return
    assert without_request_ids(found.json()) == without_request_ids(expected.json()), what
    if found.status_code == 200:
        for answer in found.json() if isinstance(found.json(), list) else [found.json()]:
            assert answer["features"] is None or answer["features"]["kwargs_data"] is None, what


def block_extra_keys(answer: dict[str, Any], block: int = BLOCK) -> list[tuple[str, ...]]:
    """The router's extra keys of each block of ``block`` tokens: the hashes of the items whose placeholder overlaps it."""
    features = answer["features"] or {"mm_hashes": {}, "mm_placeholders": {}}
    spans = [
        (placeholder["offset"], placeholder["offset"] + placeholder["length"], item_hash)
        for modality, hashes in sorted(features["mm_hashes"].items())
        for item_hash, placeholder in zip(hashes, features["mm_placeholders"][modality], strict=True)
    ]
    starts = range(0, len(answer["token_ids"]), block)
    return [tuple(h for begin, end, h in spans if begin < start + block and end > start) for start in starts]


def with_orientation(orientation: int, size: tuple[int, int] = (448, 224)) -> bytes:
    """A JPEG of ``size`` whose EXIF orientation turns it (6 and 8: a quarter turn, the size swapped)."""
    image = images.noisy_image("RGB", size, seed=orientation)
    exif = Image.Exif()
    exif[0x0112] = orientation
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", exif=exif.tobytes())
    return buffer.getvalue()


def every_image(*, one_of_each_class: bool = False) -> Iterator[tuple[str, bytes]]:
    """Every golden input and every corpus image, accepted or refused by anyone (the corpus's damaged ones too);
    with ``one_of_each_class``, one corpus image of each class (``scripts.corpus.one_image_of_each_class``)."""
    for path in sorted((golden.GOLDEN_DIR / "inputs").iterdir()):
        yield path.name, path.read_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chosen = corpus.one_image_of_each_class() if one_of_each_class else corpus.build_corpus()
        cases = [(case.name, case.payload) for case in chosen if case.kind == "image"]
    yield from cases
    for orientation in (3, 6, 8):
        yield f"orientation-{orientation}.jpg", with_orientation(orientation)


def photos(count: int, size: tuple[int, int] = (1280, 720), seed: int = 0) -> list[bytes]:
    return [images.jpeg_bytes(size, seed=seed + number) for number in range(count)]


def reasons(server: VllmServer) -> dict[tuple[str, str, str], float]:
    """``mmobs_vllm_render_requests_total`` by (endpoint, mode, reason)."""
    samples = server.samples("mmobs_vllm_render_requests_total")
    return {
        (dict(labels)["endpoint"], dict(labels)["mode"], dict(labels)["reason"]): value
        for (_, labels), value in samples.items()
    }


def moved(before: dict[Any, float], after: dict[Any, float]) -> dict[Any, float]:
    return {key: value - before.get(key, 0.0) for key, value in after.items() if value != before.get(key, 0.0)}


def assert_every_image_answered_alike(alone: VllmServer, keys: VllmServer, *, one_of_each_class: bool = False) -> None:
    """Every golden and corpus image (or one of each class), one per chat render: the keys-only answer is vLLM
    alone's, but where vLLM alone answers 5xx (a pixel bomb), which the plugin answers 400 naming the reason; each
    request counted once."""
    before = reasons(keys)
    sent = list(every_image(one_of_each_class=one_of_each_class))
    compared, server_errors, differences = 0, [], []
    for name, data in sent:
        expected, found = both(alone, keys, chat(alone, user(image_part(data))))
        if expected.status_code >= 500:
            server_errors.append(name)
            error = found.json().get("error", {})
            if found.status_code != 400 or not error.get("message", "").startswith(("too_many_pixels:", "too_costly:")):
                differences.append((name, expected.text[:200], found.text[:300]))
            continue
        try:
            assert_same_answer(expected, found, name)
        except AssertionError as difference:
            differences.append((name, str(difference)[:600]))
        compared += 1
    assert differences == [], "\n".join(map(str, differences))
    assert compared + len(server_errors) == len(sent) and server_errors, (compared, server_errors)
    counted = moved(before, reasons(keys))
    assert sum(counted.values()) == compared + len(server_errors), counted
    assert set(counted) <= {("chat", "keys", "keys_only"), ("chat", "keys", "refused")}, counted


def tiny_mp4(venv: Path) -> bytes:
    """Eight frames of a 64x48 MP4, written by OpenCV in the server's environment (the tests' has no OpenCV)."""
    script = (
        "import sys, tempfile, os, numpy as np, cv2\n"
        "path = os.path.join(tempfile.mkdtemp(), 'v.mp4')\n"
        "out = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*'mp4v'), 4, (64, 48))\n"
        "for i in range(8): out.write(np.full((48, 64, 3), i * 30, np.uint8))\n"
        "out.release(); sys.stdout.buffer.write(open(path, 'rb').read())\n"
    )
    done = subprocess.run([str(venv / "bin" / "python"), "-c", script], capture_output=True, check=True, timeout=120)
    return done.stdout
