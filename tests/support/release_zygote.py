"""A child interpreter that imports what every vLLM release's sources import, once, and forks a process per script.

Run by :class:`tests.support.vllm_releases.ReleaseRunner`. A release probe spends most of its ten
seconds importing torch, transformers and the rest of vLLM's dependencies, which are the test
environment's and the same for every release; only ``vllm`` itself differs. So this process imports
those (and never ``vllm`` or ``mmobs``), then reads one JSON command a line from stdin::

    {"script": PATH, "argv": [...], "path": [RELEASE_TREE, ROOT], "env": {...}, "cwd": DIR,
     "output": FILE}

and for each forks a process that starts as ``python SCRIPT ARGV...`` would with ``PYTHONPATH`` set
to ``path`` (the script's folder first, then ``path``), the ``env`` added, in ``cwd``, its stdout and
stderr in ``output``; it answers on stdout with one JSON line naming the process (``{"pid": N}``) as it
starts and one with its exit status (``{"returncode": N}``) when it ends.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import traceback

# What vllm.multimodal.hasher, its loader and vLLM's config modules import from the environment: ~85% of
# a probe's import time. (torch._dynamo and torch._inductor come with vllm.config, openai with its
# reasoning parsers.)
import numpy  # noqa: F401
import openai  # noqa: F401
import PIL.Image  # noqa: F401
import torch
import torch._dynamo
import torch._inductor  # noqa: F401
import transformers  # noqa: F401


def _run(command: dict) -> int:
    """In the forked process: become ``python SCRIPT ARGV...`` and run it; its exit status."""
    output = os.open(command["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.close(output)
    os.chdir(command["cwd"])
    os.environ.update(command["env"])
    script = command["script"]
    sys.path[0:1] = [os.path.dirname(script), *command["path"]]
    sys.argv = [script, *command["argv"]]
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as leaving:
        code = leaving.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def main() -> None:
    for line in sys.stdin:
        command = json.loads(line)
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                status = _run(command)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
        print(json.dumps({"pid": pid}), flush=True)
        _, wait_status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(wait_status)}), flush=True)


if __name__ == "__main__":
    main()
