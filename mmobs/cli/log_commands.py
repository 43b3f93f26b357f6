"""``mmobs events`` and ``mmobs vllm-logging-config``: logs read back as JSON lines, and vLLM's logs made JSON."""

from __future__ import annotations

import argparse
import json
import os
import sys
from importlib import resources


def run_events(args: argparse.Namespace) -> int:
    """Every record of the logs (or of standard input) as one JSON line, whichever format wrote it."""
    from mmobs.observability.log_reader import read_events

    wanted = set(args.event or ())
    try:
        for name in args.files or ["-"]:
            try:
                source = sys.stdin if name == "-" else open(name, encoding="utf-8", errors="replace")  # noqa: SIM115
            except OSError as error:
                print(f"mmobs: {name}: cannot read the log: {error.strerror or error}", file=sys.stderr)
                return 1
            with source:
                for event in read_events(source):
                    if not wanted or event.get("event") in wanted:
                        print(json.dumps(event, ensure_ascii=False, default=str))
    except BrokenPipeError:  # `mmobs events ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


#: mmobs's JSON logging config for vLLM (``VLLM_LOGGING_CONFIG_PATH``), shipped in the package.
VLLM_LOGGING_CONFIG = resources.files("mmobs") / "vllm" / "logging.json"


def run_vllm_logging_config(args: argparse.Namespace) -> int:
    """The shipped config, byte for byte, for the operator to save where vLLM can read it."""
    sys.stdout.write(VLLM_LOGGING_CONFIG.read_text(encoding="utf-8"))
    return 0
