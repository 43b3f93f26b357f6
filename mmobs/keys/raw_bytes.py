"""The identifier vLLM's Rust front end gives an image: blake3 of the file's bytes, and nothing else.

``VLLM_USE_RUST_FRONTEND=1 vllm serve`` (vLLM 0.33 and 0.34 ship ``vllm-rs`` in the ``vllm`` wheel)
loads, keys and preprocesses images in Rust. The identifier it hands the engine core, the key of the
engine's encoder cache and of the prefix cache's multimodal extra keys, is the lowercase hex blake3
digest of the image file's bytes as the client sent them (a data URL's decoded payload, a download's
body): no framing, no model, no request keyword. Measured on 0.33.0's ``vllm-rs`` driving vLLM 0.32.0's
engine, it also ignores a client's ``uuid`` on the item, and refuses a request's
``mm_processor_kwargs`` with a 400 (``tests/vllm/test_vllm_rust_front_end.py``).

So one image has two keys in a fleet that runs both front ends, and a router keys it as the replica
it routes to does: :func:`mmobs.key_for_bytes` takes ``front_end="rust"`` for this one.
"""

from __future__ import annotations

from typing import Literal, get_args

import blake3

from mmobs.errors import InvalidOptionError

#: vLLM's front ends: ``python`` (its API server) and ``rust`` (``vllm-rs``).
FrontEnd = Literal["python", "rust"]
FRONT_ENDS: tuple[str, ...] = get_args(FrontEnd)


def check_front_end(front_end: object, algorithm: str, other_kwargs: dict[str, object]) -> FrontEnd:
    """``front_end`` if it is one vLLM has, with options that front end's key can honour; else InvalidOptionError."""
    if front_end not in FRONT_ENDS:
        raise InvalidOptionError("front_end", f"front_end must be one of {', '.join(FRONT_ENDS)}, not {front_end!r}")
    if front_end == "rust":
        if algorithm != "blake3":
            raise InvalidOptionError("algorithm", f"vLLM's Rust front end keys with blake3 only, not {algorithm!r}")
        if other_kwargs:
            names = ", ".join(sorted(other_kwargs))
            raise InvalidOptionError(
                "front_end",
                f"vLLM's Rust front end keys the bytes alone: request keywords ({names}) are not part of its key "
                "(it answers a request's mm_processor_kwargs with a 400)",
            )
    return front_end  # type: ignore[return-value]


def raw_bytes_key(data: bytes) -> str:
    """The Rust front end's identifier for an image file's bytes."""
    return blake3.blake3(data).hexdigest()
