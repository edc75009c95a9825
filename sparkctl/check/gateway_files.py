"""Every file the gateway step writes, rendered by the functions tasks/gateway.py uses, from the settings the gateway's
validation returned (check/gateway.py), and run through the real validators on the control machine, before any host
is touched: what `python -m sparkctl check` runs for each GATEWAY_HOSTS host after validate_gateway, the way
check/render.py validates a box's files.

| what                                          | validator                                                        |
|-----------------------------------------------|------------------------------------------------------------------|
| the nginx site (front and bridge), its token  | nginx -t in a private prefix (a box known by a DNS name stood in |
| and bridge includes                           | by 127.0.0.1: the gateway resolves it, not this machine)         |
| the routers' units, the bridge firewall's     | systemd-analyze verify in a private root (a warning counts)      |
| keepalived.conf (with GATEWAY_VIP)            | keepalived -t, in a network namespace holding the VIP's interface |
| the bridge's nftables ruleset                 | nft -c, in a network namespace knowing the routers' user         |

A file a validator refuses is blamed on the setting behind the failing line (check/render.py), naming the file and
the validator's words (a file holding a token is not shown, nor the VRRP password in keepalived.conf). A validator this machine lacks is
said to be skipped (scripts/control-packages.txt lists the packages), never passed.
"""

from __future__ import annotations

import ipaddress
import tempfile
from dataclasses import replace
from pathlib import Path

from sparkctl.check import tools
from sparkctl.check.gateway import Gateway
from sparkctl.check.render import BoxFile, skipped, throwaway_pair, validated, with_tool
from sparkctl.config import secrets
from sparkctl.render import front_doors, router

UNIT_DIR = "/etc/systemd/system"  # where tasks/gateway.py writes the units (sparkctl/box/contract.py UNIT_DIR)
HEALTH_SCRIPT = "front-door-health"  # the health script's copy, beside keepalived.conf in the private root
NAME_STAND_IN = "127.0.0.1"  # a box known by a DNS name, for nginx -t: the gateway resolves it, not this machine


def _ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def offline_pools(pools: list[router.Pool]) -> list[router.Pool]:
    """The pools with each box known by a DNS name at NAME_STAND_IN: nginx -t resolves an upstream's name when it
    loads the site, and the control machine need not resolve the gateway's names (an ssh alias, a private DNS)."""
    return [replace(p, workers=tuple(w if _ip(w.address) else replace(w, address=NAME_STAND_IN) for w in p.workers))
            for p in pools]


def _nginx(gw: Gateway, root: Path, api: str, scrape: str) -> dict[str, BoxFile]:
    """The site with its includes and TLS paths pointing into nginx's private prefix, as tasks/gateway.py renders
    them (the token file with its own map bucket size: validated alone, not beside a box's site)."""
    cert, key = throwaway_pair()
    pools = offline_pools(gw.pools)
    local = {"token_file": str(root / "token.conf"), "bridge_auth_file": str(root / "bridge.conf"),
             "ca_file": str(root / "ca.pem"), "cert_path": str(root / "server.pem"),
             "key_path": str(root / "server.key")}
    return {"site.conf": BoxFile(router.GATEWAY_SITE, lambda c: router.site(c, pools, **local)),
            "token.conf": BoxFile(router.GATEWAY_TOKEN_FILE, lambda c: router.tokens(c, api, scrape), secret=True),
            "bridge.conf": BoxFile(router.BRIDGE_AUTH_FILE, lambda c: router.bridge_auth(api), secret=True),
            "ca.pem": BoxFile(router.BOX_CA_FILE, lambda c: cert),
            "server.pem": BoxFile(router.GATEWAY_CERT, lambda c: cert),
            "server.key": BoxFile(router.GATEWAY_KEY, lambda c: key, secret=True)}


def _units(gw: Gateway) -> dict[str, BoxFile]:
    out = {}
    for p in gw.pools:
        for standby, unit in ((False, p.unit), (True, p.standby_unit)):
            out[unit] = BoxFile(f"{UNIT_DIR}/{unit}", lambda c, p=p, standby=standby: router.unit(c, p, standby))
    out[front_doors.FIREWALL_UNIT] = BoxFile(f"{UNIT_DIR}/{front_doors.FIREWALL_UNIT}", lambda c: (
        front_doors.bridge_firewall_unit(c, front_doors.bridge_users(c))))
    return out


def _nft(gw: Gateway, root: Path) -> str:
    cfg = gw.config.cfg
    if not tools.available("nft"):
        return skipped("nft -c", "nft")
    if tools.namespaces() is None:
        return "nft -c: skipped (no network namespace can be made on this control machine: unshare -rmn failed)"
    f = BoxFile(cfg.BRIDGE_FIREWALL_FILE, lambda c: front_doors.bridge_firewall(c, front_doors.bridge_users(c)))
    users = front_doors.bridge_users(cfg)
    validated("nft -c", root / "nft", {Path(cfg.BRIDGE_FIREWALL_FILE).name: f}, cfg,
              lambda r, texts: tools.nft(r, texts, users))
    return f"nft -c: {Path(cfg.BRIDGE_FIREWALL_FILE).name}"


def _keepalived(gw: Gateway, root: Path, name: str, gateways: list[str]) -> str:
    cfg = gw.config.cfg
    if not tools.available("keepalived"):
        return skipped("keepalived -t", "keepalived")
    if tools.namespaces() is None or not tools.available("ip"):
        return "keepalived -t: skipped (no network namespace with the VIP's interface can be made here)"
    prio, password = front_doors.priority(cfg, gateways, name), secrets.read_vrrp_password(cfg)
    script = str(root / "keepalived" / HEALTH_SCRIPT)  # the rendered script, where keepalived -t can read it
    f = BoxFile(cfg.KEEPALIVED_CONF, lambda c: front_doors.keepalived_conf(
        c.model_copy(update={"FRONT_HEALTH_SCRIPT": script}), name, prio, password), hidden=(password,))
    health = front_doors.health_script(cfg, gw.pools)
    validated("keepalived -t", root / "keepalived", {Path(cfg.KEEPALIVED_CONF).name: f}, cfg,
              lambda r, texts: tools.keepalived(r, texts, cfg.GATEWAY_VIP_INTERFACE, (HEALTH_SCRIPT, health)))
    return f"keepalived -t: {Path(cfg.KEEPALIVED_CONF).name} (with {Path(cfg.FRONT_HEALTH_SCRIPT).name})"


def check_gateway_files(gw: Gateway, name: str, gateways: list[str]) -> tuple[str, ...]:
    """Render every file the gateway step writes on `name` (gateways: GATEWAY_HOSTS in order, for its VRRP
    priority) and run the validators there are; a file one refuses is a SettingError naming the setting behind the
    failing line. Returns what was validated and what skipped."""
    cfg = gw.config.cfg
    api = secrets.read_api_token(cfg)
    scrape = secrets.read_scrape_token(cfg, api_token=api)
    with tempfile.TemporaryDirectory(prefix="sparkctl-check-gateway-") as tmp:  # 0700: tokens are written here
        root = Path(tmp)
        notes = [with_tool(root, "nginx", "nginx -t", _nginx(gw, root / "nginx", api, scrape), cfg, tools.nginx),
                 with_tool(root, "systemd-analyze", "systemd-analyze verify", _units(gw), cfg, tools.systemd),
                 _nft(gw, root)]
        if front_doors.has_vip(cfg):
            notes.append(_keepalived(gw, root, name, gateways))
    return tuple(notes)
