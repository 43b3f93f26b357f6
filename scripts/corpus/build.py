"""The whole corpus, in a stable order."""

from __future__ import annotations

import functools
import re

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


def one_image_of_each_class() -> list[Case]:
    """The first image case of each class: its family (the name's first word), media type, file extension and
    expected outcome (fallback or not, or the status of a refusal), in corpus order.

    For paths that cost a request each, where the corpus's variants of one class (the EXIF structures of one
    format, the bombs of one decoder) take the same way through: every format and outcome, at a fifth of the
    requests. The whole corpus is held where it costs a function call (the in-process key tests).
    """
    chosen: dict[tuple[object, ...], Case] = {}
    for case in _every_case():
        if case.kind == "image":
            family = re.split(r"[-.]", case.name, maxsplit=1)[0]
            extension = case.name.rsplit(".", 1)[-1]
            chosen.setdefault((family, case.media_type, extension, case.expect[:2]), case)
    return list(chosen.values())
