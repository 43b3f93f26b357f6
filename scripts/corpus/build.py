"""The whole corpus, in a stable order."""

from __future__ import annotations

import functools

from .case import Case
from .costly import costly_cases
from .image_cases import _image_cases
from .request_cases import _request_cases
from .service_cases import _service_cases
from .url_cases import _url_cases


def build_corpus() -> list[Case]:
    """Every case, in a stable order, with unique names.

    Built once a process (the cases are frozen): a test process has several modules that read it.
    """
    return list(_every_case())


@functools.cache
def _every_case() -> tuple[Case, ...]:
    cases = _image_cases() + costly_cases() + _url_cases() + _request_cases() + _service_cases()
    names = [case.name for case in cases]
    duplicates = {name for name in names if names.count(name) > 1}
    if duplicates:
        raise AssertionError(f"duplicate corpus case names: {sorted(duplicates)}")
    return tuple(cases)
