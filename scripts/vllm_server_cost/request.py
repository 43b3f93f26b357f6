"""One request of ``scripts/vllm_server_cost_run.py``: its outcome, and the chat completion carrying one image."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

import httpx
import openai

from tests.support.vllm_server import VllmServer

MiB = 2**20
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\xff\xd8", "image/jpeg"), (b"\x89PNG", "image/png"), (b"GIF8", "image/gif"),
    (b"II*\0", "image/tiff"), (b"MM\0*", "image/tiff"), (b"II+\0", "image/tiff"), (b"BM", "image/bmp"),
)  # fmt: skip


@dataclass
class Outcome:
    """One request to one server."""

    name: str
    server: str
    size: int
    url_bytes: int
    status: int | None = None  # None: no HTTP answer (not sent, timed out, connection dropped)
    message: str = ""
    wall: float = 0.0
    cpu: float | None = None  # None: the API server was gone before it could be read
    engine_cpu: float | None = None  # EngineCore and its workers (the API server's children), for reference
    extra_mib: float | None = None
    health_worst_ms: float | None = None
    health_probes: int = 0
    health_failures: int = 0
    healthy_after: bool = True
    notes: list[str] = field(default_factory=list)


def media_type(data: bytes) -> str:
    """The data URL's media type, from the container's signature (vLLM decodes by content anyway)."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return next((kind for magic, kind in _MAGIC if data.startswith(magic)), "application/octet-stream")


def data_url(data: bytes) -> str:
    return f"data:{media_type(data)};base64,{base64.b64encode(data).decode()}"


def send(server: VllmServer, url: str, timeout: float) -> tuple[int | None, str]:
    """(status, message) of one chat completion carrying ``url`` as its one image; status None if no answer."""
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=timeout)
    content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "Describe this image."}]
    try:
        completion = client.chat.completions.create(
            model=server.model, max_tokens=4, messages=[{"role": "user", "content": content}]
        )
    except openai.APIStatusError as error:
        return error.status_code, _error_message(error.response)
    except openai.APITimeoutError:
        return None, f"no answer within {timeout:.0f} s (client timeout)"
    except openai.APIConnectionError as error:
        return None, f"connection dropped: {error.__cause__ or error}"
    finally:
        client.close()
    return 200, f"{completion.usage.completion_tokens} tokens" if completion.usage else ""


def _error_message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text
