"""Which of vLLM's front ends serves this server, and which of its processes this is.

vLLM 0.33 and 0.34 ship a second front end in the ``vllm`` wheel: ``vllm-rs``, a Rust binary that
``VLLM_USE_RUST_FRONTEND=1 vllm serve`` runs in place of the Python API server (vLLM RFC #40846). It
serves HTTP, loads, orients, keys and preprocesses images itself, then hands each request to the
Python engine core, as the Python API server does. Everything mmobs wraps on the API server's path
is then code that never runs: the ``vllm serve`` process only supervises, and the only Python that
sees a request is the engine core. The plugin reads both facts here, so that it wraps nothing where
nothing it wraps runs, and says so.

The choice is vLLM's own switch, read as vLLM reads it (``bool(int(value))``); every vLLM process
inherits the supervisor's environment, so every process reads the same answer.
"""

from __future__ import annotations

import multiprocessing
import os
from typing import Literal

from mmobs.keys.raw_bytes import FRONT_ENDS as FRONT_ENDS
from mmobs.keys.raw_bytes import FrontEnd as FrontEnd

RUST_FRONT_END_ENV = "VLLM_USE_RUST_FRONTEND"

#: What a vLLM process is to the plugin. The supervisor is ``vllm serve``'s own process when the Rust
#: front end serves (it starts ``vllm-rs`` and the engine, and serves nothing itself).
Role = Literal["API server", "supervisor", "engine core", "worker"]


def running_front_end() -> FrontEnd:
    """The front end this server runs: ``rust`` where ``VLLM_USE_RUST_FRONTEND`` is a true integer, as vLLM reads it."""
    try:
        return "rust" if int(os.environ.get(RUST_FRONT_END_ENV, "0") or "0") else "python"
    except ValueError:  # vLLM itself refuses to start on such a value
        return "python"


def process_role(front_end: FrontEnd | None = None) -> Role:
    """What this process is: vLLM names its engine and worker processes ``EngineCore*`` and ``*Worker*``.

    ``MainProcess`` (``vllm serve`` itself) and ``ApiServer_N`` serve the API with the Python front end;
    with the Rust one, ``MainProcess`` is the supervisor.
    """
    name = multiprocessing.current_process().name
    if name.startswith("EngineCore"):
        return "engine core"
    if name.startswith("ApiServer"):
        return "API server"
    if name == "MainProcess":
        return "supervisor" if (front_end or running_front_end()) == "rust" else "API server"
    return "worker"
