"""The gateway hand-off: which HTTPS base URLs serve which model, per box, written after a rollout.

endpoints.json (stable, read by the CARouter gateway):
    {"schema": "sparkctl.endpoints/1", "topology": "replicas", "ca_bundle": "<path or null>",
     "models": {"<served name>": [{"box": "spark-1", "base_url": "https://10.250.0.11:443/coder/v1",
                                  "model": "qwen3.8-27b", "revision": "<sha>", "ready": true}, ...]}}
"ready" is false while a rollout drains and restarts that box's service (the gateway sends its traffic elsewhere).
In `split` both boxes serve "coder" with different models: the gateway routes by the "model" field.
Kubernetes manifests (optional, never applied): per served model a Service without selector plus an
EndpointSlice listing the boxes, so the cluster the boxes joined as capacity reaches them by name. They are
validated offline against the Kubernetes JSON schemas (kubernetes-validate).
llm-d (optional): llmd-endpoints-<served>.yaml per served model, the file-discovery list of its ready boxes.
"""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path

import yaml

from sparkctl.box.boxio import write_atomic  # the one atomic write, the box's and the control side's

# the hand-off files are for the operator's tooling and hold no secret (the CA bundle is a path): readable by all
HANDOFF_MODE = 0o644


def entry(box: str, address: str, port: int, svc, ready: bool = True) -> dict:
    return {"box": box, "address": address, "port": port,
            "base_url": f"https://{address}:{port}/{svc.served_name}/v1",
            "model": svc.model.key, "revision": svc.checkpoint.sha, "ready": ready}


def set_ready(endpoints: dict, box: str, served: str, ready: bool) -> dict:
    """The same hand-off with `box`'s endpoint for `served` marked (not) ready: a rollout drains it first."""
    out = json.loads(json.dumps(endpoints))
    for e in (out.get("models") or {}).get(served, []):
        if e["box"] == box:
            e["ready"] = ready
    return out


def merge(existing: dict, box: str, entries: list[dict], boxes: list[str], topology: str, ca: str | None) -> dict:
    """Replace this box's entries, drop boxes no longer in the inventory, keep the others'."""
    models: dict[str, list] = {}
    for served, items in (existing.get("models") or {}).items():
        keep = [e for e in items if e["box"] != box and e["box"] in boxes]
        if keep:
            models[served] = keep
    for e in entries:
        served = e["base_url"].rstrip("/").split("/")[-2]
        models.setdefault(served, []).append(e)
    for items in models.values():
        items.sort(key=lambda e: e["box"])
    return {"schema": "sparkctl.endpoints/1", "topology": topology, "ca_bundle": ca,
            "models": dict(sorted(models.items()))}


def k8s_name(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63]


def manifests(endpoints: dict, namespace: str) -> list[dict]:
    """A selector-less Service + an EndpointSlice per (served name, model) pair."""
    docs = []
    groups: dict[tuple[str, str], list[dict]] = {}
    for served, items in endpoints["models"].items():
        for e in items:
            groups.setdefault((served, e["model"]), []).append(e)
    split = len({model for (_s, model) in groups}) > len({s for (s, _m) in groups})
    for (served, model), items in sorted(groups.items()):
        name = k8s_name(f"spark-{served}-{model}" if split else f"spark-{served}")
        port = items[0]["port"]
        labels = {"app.kubernetes.io/part-of": "carouter-cloud", "carouter.ca/served-model": k8s_name(served),
                  "carouter.ca/model": k8s_name(model)}
        docs.append({"apiVersion": "v1", "kind": "Service",
                     "metadata": {"name": name, "namespace": namespace, "labels": labels,
                                  "annotations": {"carouter.ca/path-prefix": f"/{served}/v1"}},
                     "spec": {"ports": [{"name": "https", "port": port, "targetPort": port, "protocol": "TCP"}]}})
        docs.append({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                     "metadata": {"name": f"{name}-boxes", "namespace": namespace,
                                  "labels": {**labels, "kubernetes.io/service-name": name,
                                             "endpointslice.kubernetes.io/managed-by": "sparkctl"}},
                     "addressType": "IPv4",
                     "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
                     "endpoints": [{"addresses": [e["address"]], "hostname": k8s_name(e["box"]),
                                    "conditions": {"ready": e.get("ready", True)}} for e in items]})
    return docs


def validate_manifests(docs: list[dict], k8s_version: str) -> None:
    """Raise kubernetes_validate's ValidationError when a document does not match the schema."""
    import kubernetes_validate

    for doc in docs:
        kubernetes_validate.validate(doc, k8s_version, strict=True)


LLMD_PREFIX = "llmd-endpoints-"  # llmd-endpoints-<served>.yaml: llm-d's file-discovery list of one pool


def llmd_endpoints(endpoints: dict) -> dict[str, dict]:
    """Per served model, llm-d's file-discovery document (its EPP runs without Kubernetes on it and reloads it on
    an atomic rename): the boxes ready to serve it (a draining box is left out, so the EPP deletes it), each an
    IPv4 literal as the plugin requires (a box known by a DNS name only is left out: the EndpointSlice has it)."""
    out = {}
    for served, items in endpoints["models"].items():
        eps = [{"name": k8s_name(e["box"]), "address": e["address"], "port": str(e["port"]),
                "labels": {"served-model": served, "model": e["model"], "box": e["box"], "scheme": "https",
                           "path-prefix": f"/{served}/v1"}}
               for e in items if e.get("ready", True) and _ipv4(e["address"])]
        out[served] = {"endpoints": eps}
    return out


def _ipv4(text: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(text), ipaddress.IPv4Address)
    except ValueError:
        return False


def write(out_dir: Path, endpoints: dict, docs: list[dict]) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    ep, k8s = out_dir / "endpoints.json", out_dir / "k8s-endpoints.yaml"
    for path, text in ((ep, json.dumps(endpoints, indent=2) + "\n"),
                       (k8s, yaml.safe_dump_all(docs, sort_keys=False))):
        write_atomic(str(path), text, HANDOFF_MODE)
    write_llmd(out_dir, endpoints)
    return ep, k8s


def write_llmd(out_dir: Path, endpoints: dict) -> list[Path]:
    """Each pool's llm-d endpoints file, replaced by an atomic rename; a pool no longer served loses its file."""
    docs = llmd_endpoints(endpoints)
    paths = []
    for served, doc in sorted(docs.items()):
        path = out_dir / f"{LLMD_PREFIX}{served}.yaml"
        write_atomic(str(path), yaml.safe_dump(doc, sort_keys=False), HANDOFF_MODE)
        paths.append(path)
    for old in out_dir.glob(f"{LLMD_PREFIX}*.yaml"):
        if old.name[len(LLMD_PREFIX):-len(".yaml")] not in docs:
            old.unlink()
    return paths
