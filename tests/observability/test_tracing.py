"""Without OpenTelemetry, or with it installed and no one tracing, mmobs neither imports it nor changes anything.

Each case runs in a child interpreter: OpenTelemetry's global tracer provider, once set, is set for
good, and this process must not be the one that imported it. The traced paths themselves are proven on
the wire, from running servers (``tests/service/test_tracing.py``, ``tests/vllm/test_vllm_tracing.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_REQUESTS = """
import json, sys
{block}
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

import mmobs
from mmobs.asgi.middleware import MMObsMiddleware
from mmobs.observability import tracing
from tests.support import golden

def keyed(request):
    mmobs.MultiModalHasher.hash_kwargs("blake3", image=mmobs.ImageMediaIO().load_bytes(golden.input_bytes("bad-exif-header.jpg")))
    return PlainTextResponse("ok")

app = Starlette(routes=[Route("/k", keyed)])
client = TestClient(MMObsMiddleware(app, server_spans=True))
traceparent = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
answer = client.get("/k", headers={{"traceparent": traceparent, "X-Request-ID": "plain-1"}})
metrics = client.get("/metrics", headers={{"Accept": "application/openmetrics-text; version=1.0.0"}}).text
line = next(
    l for l in metrics.splitlines()
    if l.startswith('mmobs_exif_fallback_total{{exception="SyntaxError",kind="media_with_bytes"}}')
)
with tracing.span("mmobs.image.key") as live:
    pass
print(json.dumps({{
    "status": answer.status_code,
    "exemplar": line.partition(" # ")[2].split(" ")[0],
    "imported": sorted(m for m, module in sys.modules.items() if module and m.split(".")[0] == "opentelemetry"),
    "tracing_on": tracing.tracing_on(),
    "live": live is not None,
}}))
"""


@pytest.mark.parametrize(
    "block",
    [
        pytest.param("sys.modules['opentelemetry'] = None", id="without-opentelemetry"),
        pytest.param("", id="installed-and-not-tracing"),
    ],
)
def test_a_process_that_does_not_trace_is_served_as_before_and_never_imports_opentelemetry(block: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _REQUESTS.format(block=block)], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result == {
        "status": 200,
        "exemplar": '{request_id="plain-1"}',
        "imported": [],
        "tracing_on": False,
        "live": False,
    }
