"""``mmobs serve``: hand the parsed options to :mod:`mmobs.service.serve`, which sets the process up and runs it.

The command only dispatches, so that the CLI knows nothing of uvicorn: what
the options mean for the server is :class:`~mmobs.service.serve_options.ServeOptions`'s,
running it :func:`~mmobs.service.serve.serve`'s. Without the ``serve`` extra
the command says what to install, in one line, instead of a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from mmobs.service.serve_options import ServeOptions


def run_serve(args: argparse.Namespace) -> int:
    """Serve until stopped; 1 (and one line naming it) when the ``serve`` extra is not installed."""
    try:
        from mmobs.service.serve import serve  # imports uvicorn
    except ModuleNotFoundError as error:
        return _missing_extra("mmobs serve", "serve", error)
    serve(ServeOptions(**{field.name: getattr(args, field.name) for field in dataclasses.fields(ServeOptions)}))
    return 0


def _missing_extra(command: str, extra: str, error: ModuleNotFoundError) -> int:
    """One line naming what to install, and exit code 1 (not a traceback)."""
    print(
        f"mmobs: '{command}' needs {error.name}, which is not installed: pip install 'mmobs[{extra}]'",
        file=sys.stderr,
    )
    return 1
