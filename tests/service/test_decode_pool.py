"""The decode pool: real worker processes, their budgets, their replacement, and the event relay."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import psutil
import pytest
from PIL import Image
from prometheus_client import CollectorRegistry

from mmobs.events import RecordingObserver, observing
from mmobs.keys.hashing import MultiModalHasher
from mmobs.keys.loader import ImageMediaIO
from mmobs.observability.drift import DriftTracker
from mmobs.observability.instrument import Instrumentation
from mmobs.observability.metrics import exception_label
from mmobs.service import decode_worker
from mmobs.service.decode_pool import DecodePool, PoolSettings, ServerBusy
from mmobs.service.hash_request import HashOptions
from mmobs.service.relay import Replayer
from tests.support import golden, images

BAD_HEADER_JPEG = golden.input_bytes("bad-exif-header.jpg")
PHOTO_JPEG = golden.input_bytes("photo.jpg")
RGBA_PNG = golden.input_bytes("rgba.png")
# A grayscale PNG whose eXIf raises: the loader's transpose swallows it, the conversion to RGB meets it again.
GRAY_BAD_EXIF = images.png_with_exif_chunk(b"XXXX\x00\x00\x00\x08", images.png_bytes("L", (40, 30)))
# 25 MP in 300 KB: ~0.15 s of CPU to decode, a plain image of its pixel count.
_RAMP = (np.add.outer(np.arange(5000), np.arange(5000)) % 251).astype(np.uint8)
SLOW_PNG = images.encode(Image.fromarray(np.stack([_RAMP, _RAMP.T, _RAMP // 2], -1)), "PNG")
LIMITS = {"max_pixels": 50_000_000, "max_bytes": 32 * 1024 * 1024, "formats": None}


def key_header(options: HashOptions | None = None, cpu_seconds: float = 10.0) -> tuple[str, dict[str, Any]]:
    return ("key", {"options": options or HashOptions(), "io_limits": LIMITS, "cpu_seconds": cpu_seconds})


def with_pool(settings: PoolSettings, scenario: Callable[[DecodePool], Awaitable[None]]) -> None:
    async def run() -> None:
        pool = DecodePool(settings)
        await pool.start()
        try:
            await scenario(pool)
        finally:
            await pool.close()

    asyncio.run(run())


async def wait_ready(pool: DecodePool, count: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while pool.ready < count and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert pool.ready == count


def facts(recorder: RecordingObserver) -> dict[str, Any]:
    """What observers saw, in a form comparable across the process boundary."""
    return {
        "fallbacks": [(e.kind, exception_label(type(e.error)), str(e.error), e.key_source,
                       (e.image.format, e.image.mode, tuple(e.image.size)), e.original_bytes is not None)
                      for e in recorder.fallbacks],
        "transposes": [(exception_label(type(e.error)), str(e.error)) for e in recorder.transpose_failures],
        "keyed": [(e.kind, e.key_source, getattr(e.media, "io_config", None)) for e in recorder.keyed],
        "hashed": [(call.algorithm, call.nbytes) for call in recorder.hashed_calls],
        "bad": [(e.reason, e.message) for e in recorder.bad_images],
    }  # fmt: skip


CASES = {
    "regression-jpeg": BAD_HEADER_JPEG,
    "photo": PHOTO_JPEG,
    "rgba-png": RGBA_PNG,
    "gray-bad-exif": GRAY_BAD_EXIF,
    "truncated": images.jpeg_bytes()[:400],
    "too-many-pixels": images.png_header_only(40000, 40000),
}


def test_keys_and_events_are_the_ones_in_process() -> None:
    """Each case through a worker: the same key, modes and refusal, and observers see the same events."""
    expected: dict[str, Any] = {}
    for name, data in CASES.items():
        local = RecordingObserver()
        with observing(local):
            try:
                media = ImageMediaIO(**LIMITS).load_bytes(data)  # type: ignore[arg-type]
                key: str | None = MultiModalHasher.hash_kwargs("blake3", image=media)
                modes = (media.media.mode, Image.open(io.BytesIO(data)).mode)
            except ValueError:
                key, modes = None, None
        expected[name] = (key, modes, local)

    async def scenario(pool: DecodePool) -> None:
        for name, data in CASES.items():
            key, modes, local = expected[name]
            remote = RecordingObserver()
            outcome, _ = await pool.run(key_header(), [data], Replayer(remote, data))
            if key is None:
                assert outcome["status"] == "bad_image" and outcome["reason"] == local.bad_images[0].reason, name
            else:
                assert outcome["status"] == "keyed", (name, outcome)
                assert outcome["item"]["mm_hash"] == key, name
                assert (outcome["item"]["mode"], outcome["item"]["source_mode"]) == modes, name
                assert outcome["item"]["exif_fallback"] is bool(local.fallbacks), name
            assert facts(remote) == facts(local), name
        assert sum(bool(expected[n][2].fallbacks) for n in CASES) == 2  # the relay was really exercised

    with_pool(PoolSettings(size=1), scenario)


def test_counts_and_drift_are_exact_through_the_relay() -> None:
    """Concurrent tasks on two workers: every counter moves by exactly what happened, drift included."""
    registry = CollectorRegistry()
    instrumentation = Instrumentation(registry, drift=DriftTracker(sample_rate=1.0), hasher_info=False,
                                      logger=structlog_null())  # fmt: skip
    plan = [BAD_HEADER_JPEG, PHOTO_JPEG, GRAY_BAD_EXIF, RGBA_PNG] * 6

    async def scenario(pool: DecodePool) -> None:
        outcomes = await asyncio.gather(
            *(pool.run(key_header(), [data], Replayer(instrumentation, data)) for data in plan)
        )
        assert [o["status"] for o, _ in outcomes] == ["keyed"] * len(plan)
        # The same RGBA bytes keyed without conversion: a different item key for the same content.
        await pool.run(key_header(HashOptions(io_options={"image_mode": "RGBA"})), [RGBA_PNG],
                       Replayer(instrumentation, RGBA_PNG))  # fmt: skip

    with_pool(PoolSettings(size=2), scenario)

    def value(name: str, **labels: str) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    assert value("mmobs_exif_fallback_total", kind="media_with_bytes", exception="SyntaxError") == 12
    assert value("mmobs_exif_transpose_failures_total", exception="SyntaxError") == 6
    assert value("mmobs_media_keys_total", kind="media_with_bytes", key_source="original_bytes") == 25
    assert value("mmobs_hash_duration_seconds_count", algorithm="blake3") == 25
    assert value("mmobs_cache_key_drift_samples_total", kind="media_with_bytes") == 25
    assert value("mmobs_cache_key_drift_total", kind="media_with_bytes") == 1


def structlog_null() -> Any:
    class Null:
        def _ignore(self, *args: object, **kwargs: object) -> None:
            return None

        info = warning = error = debug = _ignore

    return Null()


def test_cpu_budget_stops_the_task_and_the_worker_is_replaced() -> None:
    async def scenario(pool: DecodePool) -> None:
        await wait_ready(pool, 1)
        (victim,) = pool.pids()
        recorder = RecordingObserver()
        started = time.monotonic()
        outcome, _ = await pool.run(key_header(cpu_seconds=0.02), [SLOW_PNG], Replayer(recorder, SLOW_PNG))
        assert (outcome["status"], outcome["resource"], outcome["exit"]) == ("too_costly", "cpu", -signal.SIGPROF)
        assert time.monotonic() - started < 2
        assert recorder.bad_images == [] and recorder.keyed == []
        await wait_ready(pool, 1)
        assert pool.pids() != [victim] and not psutil.pid_exists(victim)
        outcome, _ = await pool.run(key_header(), [PHOTO_JPEG], Replayer(RecordingObserver(), PHOTO_JPEG))
        assert outcome["status"] == "keyed"
        assert (await pool.run(key_header(), [SLOW_PNG], Replayer(RecordingObserver(), SLOW_PNG)))[0][
            "cpu_seconds"
        ] > 0.05

    with_pool(PoolSettings(size=1), scenario)


def test_memory_budget_is_too_costly_never_corrupt() -> None:
    """A 49 MP image under a 64 MiB budget: the allocation fails; that is the budget, not a damaged file."""
    flat = images.encode(Image.new("RGB", (7000, 7000), (9, 9, 9)), "PNG")

    async def scenario(pool: DecodePool) -> None:
        await wait_ready(pool, 1)
        (before,) = pool.pids()
        recorder = RecordingObserver()
        outcome, _ = await pool.run(key_header(), [flat], Replayer(recorder, flat))
        assert (outcome["status"], outcome["resource"], outcome["retire"]) == ("too_costly", "memory", True)
        assert recorder.bad_images == []  # the service reports it once, as too_costly
        assert outcome["peak_rss"] - outcome["idle_rss"] < 64 * 1024 * 1024 + len(flat)
        await wait_ready(pool, 1)
        assert pool.pids() != [before]  # a worker that ran out of memory is not trusted with more work
        assert (await pool.run(key_header(), [PHOTO_JPEG], Replayer(RecordingObserver(), PHOTO_JPEG)))[0][
            "status"
        ] == "keyed"

    with_pool(PoolSettings(size=1, memory_bytes=64 * 1024 * 1024), scenario)


def test_memory_outcome_tells_the_budget_from_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decode_worker, "memory_available", lambda: 8 * 1024**3)
    assert decode_worker._memory_outcome(512 * 1024**2) == {"status": "too_costly", "resource": "memory"}
    monkeypatch.setattr(decode_worker, "memory_available", lambda: 100 * 1024**2)
    assert decode_worker._memory_outcome(512 * 1024**2)["status"] == "server_busy"


def test_a_worker_killed_from_outside_is_the_servers_shortage() -> None:
    async def scenario(pool: DecodePool) -> None:
        await wait_ready(pool, 1)
        (victim,) = pool.pids()
        task = asyncio.ensure_future(pool.run(key_header(), [SLOW_PNG], Replayer(RecordingObserver(), SLOW_PNG)))
        await asyncio.sleep(0.05)
        os.kill(victim, signal.SIGKILL)
        outcome, _ = await task
        assert (outcome["status"], outcome["lost"]) == ("server_busy", True)
        await wait_ready(pool, 1)
        assert pool.pids() != [victim]

    with_pool(PoolSettings(size=1), scenario)


def test_the_line_for_a_worker_is_bounded_in_length_and_time() -> None:
    async def scenario(pool: DecodePool) -> None:
        await wait_ready(pool, 1)
        busy = asyncio.ensure_future(pool.run(key_header(), [SLOW_PNG], Replayer(RecordingObserver(), SLOW_PNG)))
        await asyncio.sleep(0.02)
        waiting = asyncio.ensure_future(pool.run(key_header(), [PHOTO_JPEG], Replayer(RecordingObserver(), PHOTO_JPEG)))
        await asyncio.sleep(0.02)
        with pytest.raises(ServerBusy, match="requests are waiting"):  # the line is full: at once
            await pool.run(key_header(), [PHOTO_JPEG], Replayer(RecordingObserver(), PHOTO_JPEG))
        with pytest.raises(ServerBusy, match=r"became free within 0\.05 s"):  # waited its bounded time
            await waiting
        assert (await busy)[0]["status"] == "keyed"

    with_pool(PoolSettings(size=1, queue_limit=1, queue_timeout=0.05), scenario)


@pytest.mark.parametrize(
    "error",
    [
        MemoryError(),
        OSError("out of memory error when reading image file"),
        OSError("decoder error -9"),  # Pillow's TIFF decoder: IMAGING_CODEC_MEMORY
    ],
)
def test_memory_failures_are_recognised_through_the_loaders_refusal(error: BaseException) -> None:
    from mmobs.errors import BadImageError
    from mmobs.service.relay import is_memory_failure

    try:
        try:
            raise error
        except BaseException:
            raise BadImageError("corrupt", "the TIFF data is damaged") from None
    except BadImageError as refusal:
        assert is_memory_failure(refusal)
    assert not is_memory_failure(BadImageError("corrupt", "decoder error -2"))
