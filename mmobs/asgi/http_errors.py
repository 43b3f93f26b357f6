"""OpenAI-style JSON error bodies, sent straight over ASGI.

Clients of inference servers already parse ``{"error": {...}}``; every 4xx
that mmobs answers (a bad image, a malformed body, a body over the limit, an
unknown route) uses that shape so a person, or a retry policy, can act on it.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import Send

from mmobs.errors import BadImageError


def error_body(
    message: str,
    *,
    code: str,
    param: str | None = None,
    reason: str | None = None,
    type: str = "invalid_request_error",
) -> dict[str, Any]:
    """The ``{"error": {...}}`` document."""
    error: dict[str, Any] = {"message": message, "type": type, "code": code, "param": param}
    if reason is not None:
        error["reason"] = reason
    return {"error": error}


def bad_image_body(error: BadImageError) -> dict[str, Any]:
    return error_body(error.message, code="bad_image", param=error.param, reason=error.reason)


async def send_json(
    send: Send,
    status: int,
    document: dict[str, Any],
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """Send a complete JSON response."""
    body = json.dumps(document, ensure_ascii=True, separators=(",", ":")).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
