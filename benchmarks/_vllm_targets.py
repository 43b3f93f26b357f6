"""The servers of section ``vllm-server`` (``bench_vllm_server.py``), which ``bench_vllm_decode_free.py`` starts too.

The variants (``without mmobs``, ``with mmobs``, and the ablation's and twins'
extras) with their ``vllm serve`` arguments and environment, how much to measure
(:class:`Settings`), and each running server with its API server's CPU clock and
one ``openai`` client per concurrent client (:class:`Target`), started side by
side and always stopped (:func:`running_targets`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import openai
from _common import Config

from tests.support import data_url
from tests.support.vllm_server import MMOBS_FLAGS, VllmServer, make_model

CONCURRENCY = (1, 4)
WITHOUT, WITH = "without mmobs", "with mmobs"
PLUGIN_ONLY, MIDDLEWARE_ONLY = "plugin only", "middleware only"
WITHOUT_TWIN, WITH_TWIN = "without mmobs, twin", "with mmobs, twin"
#: Each server: its extra ``vllm serve`` arguments and environment.
VARIANTS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    WITHOUT: ((), {"MMOBS_VLLM_PLUGIN": "0"}),
    WITH: (MMOBS_FLAGS, {}),
    PLUGIN_ONLY: ((), {}),
    MIDDLEWARE_ONLY: (MMOBS_FLAGS, {"MMOBS_VLLM_PLUGIN": "0"}),
    WITHOUT_TWIN: ((), {"MMOBS_VLLM_PLUGIN": "0"}),
    WITH_TWIN: (MMOBS_FLAGS, {}),
}
#: The optional extra comparisons: ``--ablation`` (each half of mmobs alone) and ``--twins`` (a second,
#: identical server of each kind: what the method reports when nothing differs, the noise floor).
EXTRAS: dict[str, tuple[str, ...]] = {"ablation": (PLUGIN_ONLY, MIDDLEWARE_ONLY), "twins": (WITHOUT_TWIN, WITH_TWIN)}
MAX_TOKENS = 4
PROMPT = "Describe this image."


@dataclass(frozen=True)
class Settings:
    """How much to measure: rounds, requests per sample (by clients), and the time limits."""

    rounds: int
    requests: dict[int, int]
    sample_seconds: float  # a sample stops here even if requests are left
    budget_seconds: float  # no new round starts after this much time measuring
    request_timeout: float = 60.0


FULL_SETTINGS = Settings(rounds=15, requests={1: 24, 4: 48}, sample_seconds=20.0, budget_seconds=480.0)
QUICK_SETTINGS = Settings(rounds=2, requests={1: 8, 4: 16}, sample_seconds=10.0, budget_seconds=90.0)


def process_cpu_clock(pid: int) -> Callable[[], float]:
    """Seconds of CPU the whole process ``pid`` has used (every thread, living or exited), at ns resolution.

    Linux's process CPU clock of another process (``CPUCLOCK_SCHED``, id ``(~pid << 3) | 2``);
    psutil's ``cpu_times`` where it is not available (10 ms ticks: too coarse for a 10 ms request).
    """
    clock_id = ((~pid) << 3) | 2
    try:
        time.clock_gettime(clock_id)
    except OSError:
        import psutil

        process = psutil.Process(pid)
        return lambda: sum(process.cpu_times()[:2])
    return lambda: time.clock_gettime(clock_id)


@dataclass
class Target:
    """A running server, its API server's CPU clock, and one ``openai`` client per concurrent client."""

    name: str
    server: VllmServer
    cpu: Callable[[], float]
    clients: list[openai.OpenAI]
    sent: dict[str, int] = field(default_factory=dict)

    def close(self) -> None:
        for client in self.clients:
            client.close()


def start_server(venv: Path, model: Path, directory: Path, name: str) -> VllmServer:
    """One of VARIANTS on a loopback port (``with mmobs``: the preset and the plugin; ``without mmobs``: neither)."""
    args, env = VARIANTS[name]
    return VllmServer(
        venv, model, directory / name.replace(" ", "-"), args=args, env=env, name=f"vllm serve ({name})", timeout=480.0
    )


def start_servers(venv: Path, model: Path, directory: Path, names: Sequence[str]) -> dict[str, VllmServer]:
    """The VARIANTS ``names``, started side by side (:func:`start_side_by_side`)."""
    return start_side_by_side({name: functools.partial(start_server, venv, model, directory, name) for name in names})


def start_side_by_side(starts: Mapping[str, Callable[[], VllmServer]]) -> dict[str, VllmServer]:
    """Each server of ``starts`` (its name, and how to start it), side by side: start-up is mostly waiting.

    None is left running if one fails. On Ctrl-C the pool still waits for the starts under way; whichever
    came up is stopped.
    """
    started: dict[str, VllmServer] = {}
    errors = []
    futures: dict[str, concurrent.futures.Future[VllmServer]] = {}
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(starts)) as pool:
            futures = {name: pool.submit(start) for name, start in starts.items()}
            for name, future in futures.items():
                try:
                    started[name] = future.result()
                except Exception as error:  # noqa: BLE001 - stop the other servers before raising
                    errors.append(f"{name}: {error}")
    except BaseException:
        for name, future in futures.items():
            if name not in started and future.done() and not future.cancelled() and future.exception() is None:
                started[name] = future.result()
        stop_servers(started)
        raise
    if errors:
        stop_servers(started)
        raise RuntimeError("a vLLM server did not start:\n" + "\n".join(errors))
    return started


def stop_servers(servers: dict[str, VllmServer]) -> None:
    for server in servers.values():
        try:
            server.stop()
        except Exception as error:  # noqa: BLE001 - stop the others anyway
            print(f"stopping {server.name}: {error}", file=sys.stderr)


def make_target(name: str, server: VllmServer, settings: Settings) -> Target:
    (pid, *_) = server.api_server_pids()
    clients = [
        openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=settings.request_timeout)
        for _ in range(max(CONCURRENCY))
    ]
    return Target(name, server, process_cpu_clock(pid), clients)


def chat(client: openai.OpenAI, model: str, data: bytes) -> bool:
    """One chat completion with ``data`` as its one image; whether it came back a 200 with tokens."""
    messages = [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": data_url(data)}}, {"type": "text", "text": PROMPT}],
        }
    ]
    try:
        completion = client.chat.completions.create(model=model, max_tokens=MAX_TOKENS, messages=messages)
    except openai.APIError:
        return False
    return bool(completion.choices) and completion.usage is not None and completion.usage.completion_tokens > 0


def settings_for(cfg: Config, rounds: int | None = None, servers: int = 2) -> Settings:
    """The run's settings; the time budget grows with the rounds asked for and the servers measured."""
    base = QUICK_SETTINGS if cfg.quick else FULL_SETTINGS
    rounds = rounds or base.rounds
    budget = base.budget_seconds * rounds / base.rounds * servers / 2
    return Settings(rounds, base.requests, base.sample_seconds, budget)


@contextlib.contextmanager
def running_targets(
    venv: Path, settings: Settings, names: Sequence[str] = (WITHOUT, WITH)
) -> Iterator[tuple[dict[str, Target], Path]]:
    """The servers and their clients, in a temporary directory; stopped and removed whatever happens."""
    with tempfile.TemporaryDirectory(prefix="mmobs-bench-vllm-") as tmp:
        directory = Path(tmp)
        model = make_model(venv, directory / "model")
        servers = start_servers(venv, model, directory, names)
        targets: dict[str, Target] = {}
        try:
            targets = {name: make_target(name, server, settings) for name, server in servers.items()}
            yield targets, directory
        finally:
            for target in targets.values():
                target.close()
            stop_servers(servers)
