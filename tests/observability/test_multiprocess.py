"""Several processes and threads: the multiprocess directory sums exactly, series are registered once."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support import golden

_WORKER = textwrap.dedent(
    """
    import sys, mmobs
    data = open(sys.argv[1], "rb").read()
    for _ in range(int(sys.argv[2])):
        mmobs.MultiModalHasher.hash_kwargs("blake3", image=mmobs.ImageMediaIO().load_bytes(data))
    """
)


def test_two_processes_sum_exactly_in_multiprocess_dir(tmp_path: Path):
    metrics_dir = tmp_path / "multiproc"
    metrics_dir.mkdir()
    env = {**__import__("os").environ, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    image = golden.GOLDEN_DIR / "inputs" / "bad-exif-header.jpg"
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(image), str(count)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for count in (13, 29)
    ]
    assert [w.wait(timeout=120) for w in workers] == [0, 0]
    code = textwrap.dedent(
        """
        from mmobs.asgi.exposition import scrape_registry
        registry = scrape_registry()
        print(registry.get_sample_value("mmobs_exif_fallback_total",
              {"kind": "media_with_bytes", "exception": "SyntaxError"}))
        print(registry.get_sample_value("mmobs_media_keys_total",
              {"kind": "media_with_bytes", "key_source": "original_bytes"}))
        """
    )
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["42.0", "42.0"]


def test_made_once_makes_its_object_once_however_many_threads_ask_first() -> None:
    """The process's series are registered exactly once: a second registration would raise."""
    import threading
    import time

    from mmobs.observability.metrics import made_once

    made: list[object] = []

    def slow_factory() -> object:
        time.sleep(0.05)  # long enough for every thread to arrive before the first is done
        made.append(object())
        return made[-1]

    once = made_once(slow_factory)
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(once())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(made) == 1 and got == made * 8 and once() is made[0]
    assert once.__name__ == "slow_factory"
