"""Just enough of ``kustomize build`` for deploy/k8s, for a machine with no kustomize binary.

It supports what the base and the overlay use, and nothing else (an unknown field is an error, so the
manifests cannot drift past it unnoticed): resources (files and directories), namespace, labels,
configMapGenerator (literals, files) with the name hash disabled, images, and JSON 6902 patches
targeted by kind, name and label selector. tests/stack/test_deploy.py checks it against kubectl's
kustomize wherever both exist.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

KNOWN = {"apiVersion", "kind", "resources", "namespace", "labels", "configMapGenerator", "generatorOptions",
         "images", "patches"}  # fmt: skip
CLUSTER_SCOPED = {"Namespace"}


def build(target: Path) -> list[dict[str, Any]]:
    """The resources ``kustomize build target`` renders."""
    spec = yaml.safe_load((target / "kustomization.yaml").read_text())
    unknown = set(spec) - KNOWN
    if unknown:
        raise ValueError(f"kustomize_lite does not support {sorted(unknown)} in {target}")
    if spec.get("configMapGenerator") and not spec.get("generatorOptions", {}).get("disableNameSuffixHash"):
        raise ValueError("kustomize_lite needs generatorOptions.disableNameSuffixHash")
    docs: list[dict[str, Any]] = []
    for entry in spec.get("resources", []):
        path = target / entry
        if path.is_dir():
            docs += build(path)
        else:
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    for generator in spec.get("configMapGenerator", []):
        data = dict(literal.split("=", 1) for literal in generator.get("literals", []))
        for item in generator.get("files", []):
            key, _, name = item.rpartition("=")
            data[key or Path(name).name] = (target / name).read_text()
        docs.append(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": generator["name"]}, "data": data}
        )
    for doc in docs:
        for group in spec.get("labels", []):
            doc["metadata"].setdefault("labels", {}).update(group["pairs"])
        if "namespace" in spec and doc["kind"] not in CLUSTER_SCOPED:
            doc["metadata"]["namespace"] = spec["namespace"]
        for image in spec.get("images", []):
            for container in _containers(doc):
                if container["image"].split(":")[0] == image["name"]:
                    container["image"] = f"{image.get('newName', image['name'])}:{image['newTag']}"
    for patch in spec.get("patches", []):
        operations = yaml.safe_load((target / patch["path"]).read_text())
        for doc in docs:
            if _targets(patch["target"], doc):
                for operation in operations:
                    _apply(doc, operation)
    return docs


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    template = doc.get("spec", {}).get("template", {}).get("spec", {})
    return list(template.get("containers", []))


def _targets(target: dict[str, str], doc: dict[str, Any]) -> bool:
    if "kind" in target and doc["kind"] != target["kind"]:
        return False
    if "name" in target and not re.fullmatch(target["name"], doc["metadata"]["name"]):
        return False
    labels = doc["metadata"].get("labels", {})
    for term in re.findall(r"[^,(]+(?:\([^)]*\))?", target.get("labelSelector", "")):
        if match := re.fullmatch(r"\s*([\w./-]+)\s+notin\s+\(([^)]*)\)\s*", term):
            if labels.get(match[1]) in {v.strip() for v in match[2].split(",")}:
                return False
        else:
            key, _, value = term.partition("=")
            if labels.get(key.strip()) != value.strip():
                return False
    return True


def _apply(doc: dict[str, Any], operation: dict[str, Any]) -> None:
    *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in operation["path"].split("/")[1:]]
    node: Any = doc
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    value = copy.deepcopy(operation["value"])
    if operation["op"] == "add" and isinstance(node, list):
        node.insert(len(node) if last == "-" else int(last), value)
    elif operation["op"] in ("add", "replace"):
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    else:
        raise ValueError(f"kustomize_lite does not support op {operation['op']}")
