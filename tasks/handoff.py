"""Gateway hand-off: after a healthy rollout, record this box's endpoints on the control machine (changes nothing
on the box, so a converged deploy still reports no change)."""

from __future__ import annotations

import json

from pyinfra import host, inventory, logger
from pyinfra.api import deploy, operation

from sparkctl.config.settings import Settings
from sparkctl.fleet.pools import POOLS_TOPOLOGY
from sparkctl.render import gateway, prometheus_rules
from tasks.common import handoff_dir, tls_material


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
    topology = POOLS_TOPOLOGY if cfg.FLEET_POOLS else settings.role.topology  # a pool's pair says tensor-parallel
    merged = gateway.merge(existing, host.name, entries, boxes, topology, str(ca) if ca else None)
    docs = gateway.manifests(merged, cfg.GATEWAY_NAMESPACE)
    gateway.validate_manifests(docs, cfg.GATEWAY_K8S_VERSION)
    ep, k8s = gateway.write(out, merged, docs)
    prometheus_rules.write_handoff(out, merged, settings)  # the monitoring: scrape job, alert rules, dashboard
    logger.info(f"{host.name}: gateway hand-off: {ep} and {k8s} (validated against Kubernetes "
                f"{cfg.GATEWAY_K8S_VERSION} schemas; not applied)")
    host.noop("hand-off written")
    yield from ()  # an operation is a generator; this one never changes the box


@deploy("Gateway hand-off")
def handoff(settings: Settings) -> None:
    write_handoff(name="Gateway hand-off: endpoints.json and Kubernetes manifests (control machine)",
                  settings=settings)
