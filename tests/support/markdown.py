"""Read the fenced code blocks of the project's Markdown (README synopsis, runbook commands)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")


@dataclass(frozen=True)
class Block:
    """One fenced block: its info string (``sh``, ``promql``, empty...) and its lines, indentation removed."""

    language: str
    lines: tuple[str, ...]

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def fenced_blocks(markdown: str) -> list[Block]:
    """Every fenced block, in order (indented ones inside list items included)."""
    blocks: list[Block] = []
    lines = markdown.splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        index += 1
        if not opening:
            continue
        indent, fence, language = opening.groups()
        body: list[str] = []
        while index < len(lines) and not lines[index].strip().startswith(fence):
            line = lines[index]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            index += 1
        index += 1  # the closing fence
        blocks.append(Block(language, tuple(body)))
    return blocks


def section(markdown: str, heading: str) -> str:
    """The text under ``heading`` (a ``## `` line) up to the next heading of the same level."""
    _, _, rest = markdown.partition(heading + "\n")
    return rest.split("\n## ", 1)[0]
