"""The ``mmobs`` command: hash files, explain their EXIF, print the fingerprint, read logs, serve.

Exit codes: 0 success, 1 some input could not be keyed, 2 usage errors.

:mod:`~mmobs.cli.parser` holds the command line (one builder per
subcommand); each subcommand's work is its own module's
(:mod:`~mmobs.cli.hash_command`, :mod:`~mmobs.cli.inspect_command`,
:mod:`~mmobs.cli.fingerprint_command`, :mod:`~mmobs.cli.log_commands`), and
``mmobs serve`` hands its options to the service (:mod:`~mmobs.cli.serve_command`,
:mod:`mmobs.service.serve`). :func:`main` parses and dispatches.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from mmobs.cli.parser import build_parser
from mmobs.observability.logs import configure_logging


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand (``argv``, or the process's arguments) and return its exit code."""
    args = build_parser().parse_args(argv)
    if args.command != "serve":
        # Events go to stderr so stdout stays clean for --json; the command prints the facts.
        configure_logging("console", "warning", stream=sys.stderr)
    return int(args.handler(args))
