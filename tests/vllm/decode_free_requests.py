"""The chats the decode-free hits' server tests send: albums of new images re-sent every turn, and their answers."""

from __future__ import annotations

import base64
from collections import Counter
from typing import Any

import openai
from PIL import Image

from tests.support import golden
from tests.support.images import encode, noisy_image
from tests.support.vllm_requests import client_for
from tests.support.vllm_server import VllmServer

#: Seeds of new bytes: every image and clip a test makes is one neither server has seen.
seeds = iter(range(50_000, 1_000_000))


def _rotated_jpeg(seed: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = 6  # rotated: the loader's transpose swaps the size
    return encode(noisy_image("RGB", (96, 64), seed=seed), "JPEG", exif=exif)


def chat_images() -> list[tuple[str, bytes]]:
    """One conversation's images, new bytes every call (so neither server has seen them), and the malformed-EXIF one."""
    seed = next(seeds)
    return [
        ("image/jpeg", encode(noisy_image("RGB", (128, 96), seed=seed), "JPEG", quality=90)),
        ("image/png", encode(noisy_image("RGBA", (80, 64), seed=seed + 1), "PNG")),
        ("image/png", encode(noisy_image("L", (72, 72), seed=seed + 2), "PNG")),
        ("image/jpeg", _rotated_jpeg(seed + 3)),
        ("image/gif", encode(noisy_image("P", (64, 48), seed=seed + 4), "GIF")),
        ("image/webp", encode(noisy_image("RGB", (64, 64), seed=seed + 5), "WEBP", lossless=True)),
        ("image/jpeg", _recommented_bad_exif_jpeg(seed + 6)),
    ]


def _recommented_bad_exif_jpeg(seed: int) -> bytes:
    """The malformed-EXIF JPEG with one comment byte of its own (new bytes, the same broken EXIF block)."""
    data = golden.input_bytes("bad-exif-header.jpg")
    comment = b"\xff\xfe\x00\x06" + seed.to_bytes(4, "big")
    return data[:2] + comment + data[2:]


def content(images: list[tuple[str, bytes]], text: str) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [
        {"type": "image_url", "image_url": {"url": f"data:{media_type};base64,{base64.b64encode(data).decode()}"}}
        for media_type, data in images
    ]
    parts.append({"type": "text", "text": text})
    return parts


def answer(server: VllmServer, messages: list[dict[str, Any]], **extra: Any) -> tuple[int, Any]:
    """(status, (prompt tokens, prompt token ids, completion text)) or (status, the error message)."""
    try:
        completion = client_for(server).chat.completions.create(
            model=server.model,
            max_tokens=4,
            temperature=0,
            messages=messages,
            extra_body={"return_token_ids": True, **extra},
        )
    except openai.APIStatusError as error:
        return error.status_code, error.response.json()["error"]["message"]
    extra = completion.model_extra or {}
    return 200, (completion.usage.prompt_tokens, extra.get("prompt_token_ids"), completion.choices[0].message.content)


def api_server_decodes(server: VllmServer, since: int) -> Counter[tuple[str, tuple[int, int]]]:
    """The images Pillow decoded in the server's API server after the first ``since`` decodes, by format and size."""
    api_servers = set(server.api_server_pids())
    return Counter(
        (decode["format"], (decode["size"][0], decode["size"][1]))
        for decode in server.decodes()[since:]
        if decode["pid"] in api_servers
    )


def vllm_cache(server: VllmServer) -> dict[Any, float]:
    return {key: value for key, value in server.samples("vllm:mm_cache").items() if "_created" not in key[0]}


def run_chat(server: VllmServer, images: list[tuple[str, bytes]]) -> list[tuple[int, Any]]:
    """Each turn adds the next image and re-sends the earlier ones (with the assistant's earlier answers)."""
    answers = []
    messages: list[dict[str, Any]] = []
    for turn in range(1, len(images) + 1):
        # Every turn re-sends every image so far, in the first user message, as a client that keeps the album does.
        album = {"role": "user", "content": content(images[:turn], f"Turn {turn}: what changed?")}
        status, result = answer(server, [*messages, album])
        answers.append((status, result))
        assert status == 200, (turn, result)
    return answers
