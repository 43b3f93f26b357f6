"""promtool's ``input_series`` notation, expanded to samples (for loading the same series into a real Prometheus).

``promtool test rules`` writes a series' values as a list of items, one per
evaluation ``interval`` starting at time 0: ``a``; ``a+bxn`` and ``a-bxn``
(``n + 1`` values from ``a`` in steps of ``b``); ``axn`` (``a`` ``n + 1``
times); ``_`` (no sample) and ``_xn`` (``n`` of them); ``stale`` (a staleness
marker). Anything else raises, so a fixture this expander misreads cannot pass
silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_SERIES = re.compile(rf"(?P<start>{_NUMBER})(?:(?P<sign>[-+])(?P<step>{_NUMBER}))?x(?P<times>\d+)")
_BLANKS = re.compile(r"_x(?P<times>\d+)")
_SELECTOR = re.compile(r"(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)\{(?P<labels>.*)\}")
_LABEL = re.compile(r'\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*"(?P<value>(?:[^"\\]|\\.)*)"\s*(?:,|$)')

#: Marks a staleness marker among the values.
STALE = "stale"


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    #: (step index, value or STALE); steps without a sample are left out.
    samples: list[tuple[int, float | str]]


def expand(values: str) -> list[float | str | None]:
    """One entry per step: a value, ``STALE``, or ``None`` for no sample."""
    out: list[float | str | None] = []
    for item in values.split():
        if item == "_":
            out.append(None)
        elif item == STALE:
            out.append(STALE)
        elif blanks := _BLANKS.fullmatch(item):
            out.extend([None] * int(blanks["times"]))
        elif series := _SERIES.fullmatch(item):
            start, step = float(series["start"]), float(series["step"] or 0)
            step = -step if series["sign"] == "-" else step
            out.extend(start + i * step for i in range(int(series["times"]) + 1))
        elif re.fullmatch(_NUMBER, item):
            out.append(float(item))
        else:
            raise ValueError(f"cannot read promtool series value {item!r}")
    return out


def parse(series: str, values: str) -> Series:
    """``'name{a="b"}'`` and its values, as labels (``__name__`` included) and samples."""
    match = _SELECTOR.fullmatch(series.strip())
    if match is None:
        raise ValueError(f"cannot read promtool series {series!r}")
    labels = {"__name__": match["name"]}
    rest = match["labels"]
    while rest.strip():
        label = _LABEL.match(rest)
        if label is None:
            raise ValueError(f"cannot read the labels of {series!r}")
        labels[label["name"]] = label["value"].encode().decode("unicode_escape")
        rest = rest[label.end() :]
    samples = [(step, value) for step, value in enumerate(expand(values)) if value is not None]
    return Series(labels, samples)
