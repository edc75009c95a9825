"""Two front doors, one service: what every gateway host renders beside its routers (docs/two-front-doors.md).

    clients --> VIP (keepalived/VRRP on one gateway at a time) --> that gateway's front (nginx) --> its routers
    cluster --> Service spark-front-doors (ClientIP affinity) --> EndpointSlice: every gateway, with its readiness

- keepalived.conf: the VIP, the VRRP router id, this gateway's priority (its place in GATEWAY_HOSTS), VRRP's
  password, and the vrrp_script that runs the front door's health script (each served model's routers through the
  local nginx's loopback health page, FRONT_HEALTH_PORT);
- the bridge's firewall: an nftables table of the deploy's own whose output hook refuses packets to the loopback
  bridge from every local user but the routers' (the bridge adds the boxes' bearer token to what it forwards);
- the hand-off's front doors: router.json's `front_doors` (every gateway, merged as each gateway's deploy records
  its own), their Kubernetes Service + EndpointSlice and llm-d's file-discovery list.

Pure functions of the typed settings; tasks/gateway.py uploads what these render.
"""

from __future__ import annotations

import ipaddress

from sparkctl.config.schema import GroupData
from sparkctl.render import router
from sparkctl.render.gateway import k8s_name
from sparkctl.render.router import Pool
from sparkctl.render.units import render_template

FIREWALL_UNIT = "sparkctl-bridge-firewall.service"
FRONT_DOORS_K8S = "k8s-front-doors.yaml"  # the front doors' Service + EndpointSlice (control machine, hand-off)
FRONT_DOORS_LLMD = "llmd-front-doors.yaml"  # llm-d's file-discovery list of the ready gateways
FRONT_DOORS_NAME = "spark-front-doors"  # the Service's name (the EndpointSlice's is <this>-gateways)


def has_vip(cfg: GroupData) -> bool:
    return bool(cfg.GATEWAY_VIP)


def priority(cfg: GroupData, gateways: list[str], name: str) -> int:
    """This gateway's VRRP priority: VRRP_PRIORITY_FIRST for the first of GATEWAY_HOSTS, VRRP_PRIORITY_STEP less for
    each next one (check/gateway.py keeps the last at 1 or more)."""
    return cfg.VRRP_PRIORITY_FIRST - gateways.index(name) * cfg.VRRP_PRIORITY_STEP


def keepalived_conf(cfg: GroupData, name: str, prio: int, password: str) -> str:
    """keepalived.conf of one gateway (root-only 0600 on the box: it holds the password)."""
    return render_template("keepalived.conf.j2", d=cfg, gateway=name, priority=prio, password=password)


def health_urls(cfg: GroupData, pools: list[Pool]) -> list[str]:
    """What the health script asks: each served model's routers (primary, else standby) through the local nginx."""
    return [f"http://127.0.0.1:{cfg.FRONT_HEALTH_PORT}/{p.served}/health" for p in pools]


def health_script(cfg: GroupData, pools: list[Pool]) -> str:
    return render_template("front-door-health.j2", d=cfg, urls=health_urls(cfg, pools))


def bridge_users(cfg: GroupData) -> list[str]:
    """The local users that connect to the bridge: the routers' (every router unit's User=). nginx's front talks to
    the routers, not to the bridge; keepalived's check talks to the front's health page."""
    return [cfg.ROUTER_USER]


def bridge_firewall(cfg: GroupData, users: list[str]) -> str:
    """The nftables ruleset: the deploy's table, replaced atomically when loaded (nft -f)."""
    allowed = users[0] if len(users) == 1 else "{ " + ", ".join(users) + " }"
    comment = f"sparkctl: the router bridge is {', '.join(users)}'s alone"
    return render_template("bridge-firewall.nft.j2", d=cfg, users=users, allowed=allowed, comment=comment)


def bridge_firewall_unit(cfg: GroupData, users: list[str]) -> str:
    return render_template("sparkctl-bridge-firewall.service.j2", d=cfg, users=users)


def firewall_rule_present(cfg: GroupData, listing: str) -> bool:
    """Whether `nft list table inet <BRIDGE_FIREWALL_TABLE>` shows the bridge's rule: loopback output to the bridge
    port from another user than the allowed one(s), rejected."""
    return any("oifname \"lo\"" in line and f"tcp dport {cfg.ROUTER_BRIDGE_PORT}" in line and "skuid !=" in line
               and "reject" in line for line in listing.splitlines())


# --- the hand-off: the front doors, for the cluster --------------------------------------------------------------


def front_door(name: str, address: str, port: int, pools: list[Pool], ready: bool = True) -> dict:
    """One gateway's entry in router.json's front_doors."""
    return {"gateway": name, "address": address, "port": port, "ready": ready,
            "base_urls": {p.served: f"https://{address}:{port}/{p.served}/v1" for p in pools}}


def merge_front_doors(existing: list[dict], mine: dict, gateways: list[str]) -> list[dict]:
    """Every gateway's entry in GATEWAY_HOSTS order: this one's replaced, those no longer in the inventory dropped,
    the others' kept as their own deploy recorded them."""
    by_name = {e["gateway"]: e for e in existing if e.get("gateway") in gateways}
    by_name[mine["gateway"]] = mine
    return [by_name[g] for g in gateways if g in by_name]


def one_url_address(cfg: GroupData, front_doors: list[dict]) -> str:
    """The address clients use: the VIP when there is one, else the first gateway's (the others are in
    front_doors and in the cluster's Service)."""
    return cfg.GATEWAY_VIP or front_doors[0]["address"]


def handoff(cfg: GroupData, name: str, mine: dict, existing: dict, gateways: list[str], pools: list[Pool],
            ca: str | None) -> dict:
    """router.json with this gateway's front door recorded beside the others': the one URL per served model (the
    VIP's, else the first gateway's), every front door, and the VIP (None without one)."""
    doors = merge_front_doors(existing.get("front_doors") or [], mine, gateways)
    doc = router.handoff(cfg, name, one_url_address(cfg, doors), pools, ca)
    return {**doc, "vip": cfg.GATEWAY_VIP or None, "front_doors": doors}


def manifests(doc: dict, namespace: str, cfg: GroupData) -> list[dict]:
    """The front doors as a selector-less Service (ClientIP affinity: one gateway's router sees a client's sessions)
    and an EndpointSlice listing every gateway with its readiness."""
    port = doc["port"]
    labels = {"app.kubernetes.io/part-of": "carouter-cloud", "carouter.ca/role": "front-door"}
    prefixes = ",".join(f"/{served}/v1" for served in sorted(doc["models"]))
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": FRONT_DOORS_NAME, "namespace": namespace, "labels": labels,
                            "annotations": {"carouter.ca/path-prefixes": prefixes}},
               "spec": {"ports": [{"name": "https", "port": port, "targetPort": port, "protocol": "TCP"}],
                        "sessionAffinity": "ClientIP",
                        "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": cfg.FRONT_DOOR_AFFINITY_TIMEOUT_S}}}}
    endpoints = [{"addresses": [g["address"]], "hostname": k8s_name(g["gateway"]),
                  "conditions": {"ready": bool(g.get("ready", True))}} for g in doc["front_doors"]]
    slice_ = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
              "metadata": {"name": f"{FRONT_DOORS_NAME}-gateways", "namespace": namespace,
                           "labels": {**labels, "kubernetes.io/service-name": FRONT_DOORS_NAME,
                                      "endpointslice.kubernetes.io/managed-by": "sparkctl"}},
              "addressType": "IPv4", "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
              "endpoints": endpoints}
    return [service, slice_]


def llmd(doc: dict) -> dict:
    """llm-d's file-discovery list of the ready front doors (IPv4 literals only, as its plugin requires)."""
    return {"endpoints": [{"name": k8s_name(g["gateway"]), "address": g["address"], "port": str(g["port"]),
                           "labels": {"role": "front-door", "gateway": g["gateway"], "scheme": "https"}}
                          for g in doc["front_doors"] if g.get("ready", True) and _ipv4(g["address"])]}


def _ipv4(text: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(text), ipaddress.IPv4Address)
    except ValueError:
        return False
