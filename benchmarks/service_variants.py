"""The reference service with the proposed fast paths, as a uvicorn factory.

``proposed`` is ``mmobs.service.create_app`` with pybase64 and orjson patched
in (``proposals.patch_service_fast_paths``); run it with
``PILLOW_BLOCKS_MAX=8`` to add Pillow's block cache, as the benchmark does.
"""

from __future__ import annotations

import os

from starlette.applications import Starlette

import proposals


def proposed() -> Starlette:
    from mmobs.service import ServiceConfig, create_app

    patched = proposals.patch_service_fast_paths()
    os.environ["MMOBS_BENCH_PATCHED"] = ",".join(patched)
    return create_app(ServiceConfig(log_format="json", log_level="info"))
