"""Gateway hand-off: after a healthy rollout, record this box's endpoints on the control machine (changes nothing
on the box, so a converged deploy still reports no change)."""

from __future__ import annotations

import json
from pathlib import Path

from pyinfra import host, inventory, logger
from pyinfra.api import deploy, operation

from sparkctl import REPO_ROOT
from sparkctl.config.schema import GroupData
from sparkctl.config.settings import Settings
from sparkctl.render import gateway, prometheus_rules
from tasks.proxy import tls_material


def handoff_dir(cfg: GroupData) -> Path:
    return Path(cfg.GATEWAY_HANDOFF_DIR) if Path(cfg.GATEWAY_HANDOFF_DIR).is_absolute() \
        else REPO_ROOT / cfg.GATEWAY_HANDOFF_DIR


def ready_target(cfg: GroupData, served: str) -> dict:
    """What a rollout needs to mark its box's endpoint for `served` (not) ready in the hand-off."""
    return {"dir": str(handoff_dir(cfg)), "namespace": cfg.GATEWAY_NAMESPACE, "k8s": cfg.GATEWAY_K8S_VERSION,
            "served": served}


def mark_ready(target: dict, box: str, ready: bool) -> None:
    """During a rollout: flip `conditions.ready` of this box's endpoint in the existing hand-off (none yet: no-op)."""
    out, served = Path(target["dir"]), target["served"]
    if not (out / "endpoints.json").exists():
        return
    endpoints = gateway.set_ready(json.loads((out / "endpoints.json").read_text()), box, served, ready)
    docs = gateway.manifests(endpoints, target["namespace"])
    gateway.validate_manifests(docs, target["k8s"])
    gateway.write(out, endpoints, docs)
    logger.info(f"{box}: gateway hand-off: {served} on {box} {'ready' if ready else 'NOT ready (draining)'}")


@operation()
def write_handoff(settings: Settings):
    if not host.state.is_executing:
        host.noop("written after rollout")
        return
    cfg = settings.cfg
    out = handoff_dir(cfg)
    existing = json.loads((out / "endpoints.json").read_text()) if (out / "endpoints.json").exists() else {}
    entries = [gateway.entry(host.name, settings.address, cfg.PROXY_PORT, s)
               for s in settings.services if not s.headless] if settings.role.serves_api else []
    _cert, _key, ca = tls_material(settings) if settings.role.serves_api else (None, None, None)
    boxes = [h.name for h in inventory.get_group("gx10")]
    merged = gateway.merge(existing, host.name, entries, boxes, settings.role.topology, str(ca) if ca else None)
    docs = gateway.manifests(merged, cfg.GATEWAY_NAMESPACE)
    gateway.validate_manifests(docs, cfg.GATEWAY_K8S_VERSION)
    ep, k8s = gateway.write(out, merged, docs)
    prometheus_rules.write_handoff(out, merged, settings)  # issue 11: scrape job, alert rules, Grafana dashboard
    logger.info(f"{host.name}: gateway hand-off: {ep} and {k8s} (validated against Kubernetes "
                f"{cfg.GATEWAY_K8S_VERSION} schemas; not applied)")
    host.noop("hand-off written")
    yield from ()  # an operation is a generator; this one never changes the box


@deploy("Gateway hand-off")
def handoff(settings: Settings) -> None:
    write_handoff(name="Gateway hand-off: endpoints.json and Kubernetes manifests (control machine)",
                  settings=settings)
