"""The fuzzer's parts, one module per section; ``scripts/fuzz.py`` is the command line."""

from .containers import Wrapper, materialize
from .engines import record_finding, reproduce, run_atheris, run_random
from .harness import (
    Harness,
    PropertyViolation,
    Stats,
    asarray_key,
    counting_observer,
    exif_spy,
    original_bytes_key,
)
from .modules import (
    CONTAINERS,
    EXIF_FLAG,
    FUZZ_MAX_BYTES,
    FUZZ_MAX_PIXELS,
    TAGS,
    WHOLE_FILE,
    M,
    load_modules,
)
from .mutations import mutate, tiff_mutation
from .seeds import seed_inputs

__all__ = [
    "CONTAINERS",
    "EXIF_FLAG",
    "FUZZ_MAX_BYTES",
    "FUZZ_MAX_PIXELS",
    "TAGS",
    "WHOLE_FILE",
    "Harness",
    "M",
    "PropertyViolation",
    "Stats",
    "Wrapper",
    "asarray_key",
    "counting_observer",
    "exif_spy",
    "load_modules",
    "materialize",
    "mutate",
    "original_bytes_key",
    "record_finding",
    "reproduce",
    "run_atheris",
    "run_random",
    "seed_inputs",
    "tiff_mutation",
]
