"""Concurrent load against ``POST /v1/hash`` with exact accounting of what was sent.

Used by the reliability tests (CI-sized) and by hand for the full-sized run
documented in ``docs/reliability.md``::

    mmobs serve --workers 2 --port 8000 &
    python scripts/loadgen.py http://127.0.0.1:8000 --requests 5000 --concurrency 32 --fallback-every 4

Every request carries one image; every ``fallback_every``-th one is the vLLM
regression JPEG (malformed EXIF), the rest a clean JPEG. With
``refused_every``, every such request instead carries the regression JPEG
*followed by* bytes that are no image: the service keys the first (its EXIF
fallback runs), then refuses the request with a 400 for the second.

The accounting follows the counting rule in docs/library.md ("What is counted and logged"): a fallback
is counted when it happens, whether or not its request is answered 200. So
``fallback_sent`` (every regression JPEG sent, each processed before any
refusal in its request) is what ``mmobs_exif_fallback_total`` must move by;
``fallback_answered`` counts only those a 200 response reported, and
``refused_sent`` the requests that must be refused (``mmobs_bad_images_total``
moves by as many).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

GOLDEN = Path(__file__).resolve().parents[1].parent / "shared" / "golden" / "inputs"


def _data_url(data: bytes) -> str:
    return "data:image/jpeg;base64," + base64.b64encode(data).decode()


_NOT_AN_IMAGE = "data:image/png;base64," + base64.b64encode(b"these bytes are no image").decode()


@dataclass
class LoadResult:
    sent: int = 0
    #: Regression JPEGs sent: each one's fallback happens, so the counter must move by exactly this.
    fallback_sent: int = 0
    #: Fallbacks reported by 200 responses (requests refused for a later image report none).
    fallback_answered: int = 0
    #: Requests built to be refused (a fallback image, then a non-image), and those answered 400 ``bad_image``.
    refused_sent: int = 0
    refused_answered: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    transport_errors: int = 0
    #: What the transport errors were (type, message and seconds into the request), the first few of them.
    transport_error_details: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def server_errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500)

    def summary(self) -> dict[str, object]:
        return {
            "sent": self.sent,
            "fallback_sent": self.fallback_sent,
            "fallback_answered": self.fallback_answered,
            "refused_sent": self.refused_sent,
            "refused_answered": self.refused_answered,
            "statuses": dict(sorted(self.statuses.items())),
            "transport_errors": self.transport_errors,
            "transport_error_details": self.transport_error_details,
            "seconds": round(self.seconds, 2),
            "requests_per_second": round(self.sent / self.seconds, 1) if self.seconds else None,
        }


async def run_load(
    url: str,
    *,
    requests: int,
    concurrency: int,
    fallback_every: int,
    refused_every: int | None = None,
    bad_image: bytes | None = None,
    good_image: bytes | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> LoadResult:
    """Send ``requests`` requests from ``concurrency`` workers; never raises on HTTP errors."""
    bad = _data_url(bad_image or (GOLDEN / "bad-exif-header.jpg").read_bytes())
    good = _data_url(good_image or (GOLDEN / "photo.jpg").read_bytes())
    result = LoadResult()
    next_index = 0
    started = time.perf_counter()

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal next_index
        while next_index < requests:
            index = next_index
            next_index += 1
            refused = refused_every is not None and index % refused_every == refused_every - 1
            carries_fallback = refused or index % fallback_every == 0
            images = [bad, _NOT_AN_IMAGE] if refused else [bad if carries_fallback else good]
            result.sent += 1
            result.fallback_sent += carries_fallback
            result.refused_sent += refused
            sent_at = time.perf_counter()
            try:
                response = await client.post(
                    url + "/v1/hash", json={"images": images}, headers={"x-request-id": f"load-{index}"}
                )
            except httpx.TransportError as error:
                result.transport_errors += 1
                if len(result.transport_error_details) < 10:
                    waited = time.perf_counter() - sent_at
                    result.transport_error_details.append(
                        f"load-{index}: {type(error).__name__}: {str(error)[:200]!r} after {waited:.2f} s"
                    )
                continue
            result.statuses[response.status_code] += 1
            if response.status_code == 200 and response.json()["items"][0]["exif_fallback"]:
                result.fallback_answered += 1
            elif response.status_code == 400 and response.json()["error"].get("code") == "bad_image":
                result.refused_answered += 1
            if on_progress is not None:
                on_progress(result.sent)

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    result.seconds = time.perf_counter() - started
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url")
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--fallback-every", type=int, default=4)
    parser.add_argument("--refused-every", type=int, default=None)
    args = parser.parse_args()
    result = asyncio.run(
        run_load(
            args.url,
            requests=args.requests,
            concurrency=args.concurrency,
            fallback_every=args.fallback_every,
            refused_every=args.refused_every,
        )
    )
    print(json.dumps(result.summary(), indent=2))


if __name__ == "__main__":
    main()
