"""The front door on a `gateway` host: vLLM's router (pinned, its own venv, one sandboxed unit per served model)
behind nginx (the TLS front with the boxes' bearer, and the loopback bridge that adds the token towards the boxes
and verifies them with the project CA). See sparkctl/render/router.py for the design.

Runs only on hosts of the `gateway` inventory group (deploy.py). What it reads of the boxes (their addresses and
served models) comes from the gx10 hosts' own settings, validated here as their own deploy does. A router restarts
only when its unit or venv changed; nginx reloads (gracefully) only when a file it reads changed. While a router
restarts, the front answers 503 + Retry-After (tests/gateway measured about its start-up time: a few seconds).
"""

from __future__ import annotations

from io import StringIO

import json
import posixpath
import shlex
from pathlib import Path

import yaml

from pyinfra import host, inventory, logger
from pyinfra.api import FactBase, StringCommand, deploy, operation
from pyinfra.api.command import QuoteString
from pyinfra.facts.files import File, FindFiles
from pyinfra.operations import apt, files, server, systemd
from pyinfra.operations.util import any_changed

from sparkctl.box.contract import UNIT_DIR
from sparkctl.check.gateway import validate_gateway
from sparkctl.check.gateway_files import check_gateway_files
from sparkctl.config import pki, rotation, secrets
from sparkctl.config.secrets import secrets_dir
from sparkctl.config.hosts import per_host_models
from sparkctl.config.settings import HostConfig
from sparkctl.errors import Refused, SparkctlError
from sparkctl.render import front_doors, prometheus_rules, router
from sparkctl.render.gateway import HANDOFF_MODE, write_atomic
from sparkctl.render.box_files import NGINX_DIR
from tasks.common import fail, handoff_dir, tls_material
from tasks.facts import SystemUser, account_problems

__all__ = ["after_the_boxes", "gateway", "gateway_config"]

GATEWAY_SITE_LINK = f"{NGINX_DIR}/sites-enabled/sparkctl-gateway.conf"


def gateway_config() -> tuple[HostConfig, list[router.Pool]]:
    """This gateway's settings and pools, validated as `python -m sparkctl check` validates them
    (sparkctl.check.gateway, every gateway's data beside this one's: one front; every file this step writes through
    the real validators: sparkctl.check.gateway_files); bad input is refused here, before any command runs."""
    boxes = {h.name: h.data.dict() for h in inventory.get_group("gx10", [])}
    try:
        checked = validate_gateway(host.name, host.data.dict(), boxes, host_models=per_host_models(),
                                   gateways={h.name: h.data.dict() for h in _gateway_hosts()})
        # every file this step writes, through the real validators on this machine first, as `check` runs them
        notes = check_gateway_files(checked, host.name, [h.name for h in _gateway_hosts()])
    except SparkctlError as exc:
        raise Refused(f"{host.name}: {exc}") from None
    for line in (*checked.warnings, *notes):
        logger.info(f"{host.name}: {line}")
    return checked.config, checked.pools


def _gateway_hosts() -> list:
    """The `gateway` group's hosts in GATEWAY_HOSTS order (this one included)."""
    return list(inventory.get_group("gateway", [])) or [host]


@operation()
def _every_box_done():
    """A no-op every host runs at the same place: pyinfra orders operations by each host's chain, and chains that
    share no operation interleave, so without it the gateway's routers would (re)start beside the boxes' first
    steps, before any box serves. Sharing this one node puts every gateway operation after every box's."""
    host.noop("the gateway's steps run after every box's")
    yield from ()


@deploy("Fleet")
def after_the_boxes() -> None:
    """Called for every host between the boxes' steps and the gateway's (deploy.py)."""
    _every_box_done(name="Every box's steps before the gateway's")


@operation()
def router_venv(venv: str, version: str, pip_args: list[str]):
    """The pinned vllm-router in its own venv, unless its built marker is there; checked by running it. pip_args:
    the wheelhouses and index the box's own pip installs use (PIP_FIND_LINKS, PIP_NO_INDEX)."""
    marker = f"{venv}/.sparkctl-built"
    if host.get_fact(File, path=marker):
        host.noop(f"vllm-router {version} is installed in {venv}")
        return
    yield StringCommand("rm -rf", QuoteString(venv), "&& python3 -m venv", QuoteString(venv))
    yield StringCommand(QuoteString(f"{venv}/bin/python"), "-m pip install --no-input --progress-bar off",
                        *(QuoteString(a) for a in pip_args), QuoteString(f"vllm-router=={version}"))
    yield StringCommand(QuoteString(f"{venv}/bin/vllm-router"), "--help >/dev/null")
    yield StringCommand("touch", QuoteString(marker))


def _nginx(config: HostConfig, pools: list[router.Pool], beside_box: bool) -> bool:
    """The front's TLS pair, the boxes' CA, both token files (root-only) and the site; True when one changed."""
    cfg = config.cfg
    # during a rotation window the front accepts both tokens and the bridge sends the new one: every box accepts it
    # by now, as the boxes' steps (their proxies' token maps) ran before this one (after_the_boxes)
    api = secrets.read_api_tokens(cfg)
    tokens = router.tokens(cfg, api.accepted, secrets.read_scrape_tokens(cfg, api).accepted,
                           beside_box_site=beside_box)
    cert, key, ca = front_tls(config)
    ca_src = str(ca) if ca is not None else "/etc/ssl/certs/ca-certificates.crt"  # an operator's CA: the system's
    files.directory(name=f"Create {router.GATEWAY_TLS_DIR}", path=router.GATEWAY_TLS_DIR, user="root",
                    group="root", mode="0700")
    private = dict(user="root", group="root", mode="0600", _temp_dir=router.GATEWAY_TLS_DIR)
    changes = [
        files.put(name="Gateway TLS certificate chain", src=str(cert), dest=router.GATEWAY_CERT, **private),
        files.put(name="Gateway TLS private key (root-only)", src=str(key), dest=router.GATEWAY_KEY, **private),
        files.put(name="The CA the bridge verifies the boxes with (root-only)", src=ca_src,
                  dest=router.BOX_CA_FILE, **private),
        files.put(name="Front's bearer tokens (root-only)", src=StringIO(tokens), dest=router.GATEWAY_TOKEN_FILE,
                  **private),
        files.put(name="Bridge's bearer for the boxes (root-only)", src=StringIO(router.bridge_auth(api.sent)),
                  dest=router.BRIDGE_AUTH_FILE, **private),
        files.put(name="nginx site sparkctl-gateway", src=StringIO(router.site(cfg, pools)),
                  dest=router.GATEWAY_SITE, user="root", group="root", mode="0644"),
        files.link(name="Enable site sparkctl-gateway", path=GATEWAY_SITE_LINK, target=router.GATEWAY_SITE),
    ]
    if not beside_box:  # a box's own step leaves the distribution's default site to its proxy step
        changes.append(files.link(name="Disable the distribution's default site",
                                  path=f"{NGINX_DIR}/sites-enabled/default", present=False))
    return any_changed(*changes)


@operation()
def boxes_accept_new_token(config: HostConfig, pools: list[router.Pool]):
    """In an API token rotation window, once the boxes' steps ran and before this gateway's bridge sends the new
    token: every box's proxy is asked with it from the control machine (as the health gate asks them); one that
    answers 401 fails this gateway's step, which then changes nothing (its front and bridge keep the current token,
    which every box still accepts). A box that does not answer is named and left to its router's health check: it
    answers the bridge 401 until its own deploy gives it the window's tokens, so no router sends it a request."""
    if not host.state.is_executing:
        host.noop("asked when the deploy runs, after the boxes' steps")
        return
    cfg = config.cfg
    token = secrets.read_api_tokens(cfg).next  # read here, never an operation argument pyinfra would log
    _cert, _key, ca = front_tls(config)
    targets = {w.box: f"https://{w.address}:{w.port}/{p.served}/v1/models" for p in pools for w in p.workers}
    answers = rotation.ask_boxes(sorted(targets.items()), token, str(ca) if ca else True, cfg.ROUTER_HEALTH_TIMEOUT_S)
    for a in answers:
        if a.status is None:
            logger.warning(f"{host.name}: {a.box} did not answer ({a.error}); deploy it before `secrets finish`")
    refused = rotation.refusing(answers)
    if refused:
        yield fail(f"{host.name}: {', '.join(a.box for a in refused)} refuse the new API token (401 from "
                   f"{refused[0].url}): their proxies do not have the rotation window yet, so this gateway's bridge "
                   f"keeps sending the current token. Deploy those boxes, then rerun.")
        return
    host.noop(f"every box that answered accepts the new API token ({len(answers)} asked)")


def front_tls(config: HostConfig) -> tuple[Path, Path, Path | None]:
    """The front's TLS pair: the box's own (tls_material), or with a VIP a certificate of the front door's own
    that also names the VIP clients connect to (a box that is a gateway keeps its proxy's certificate as it was)."""
    cfg = config.cfg
    if not cfg.GATEWAY_VIP or cfg.TLS_CERT_FILE:  # the operator's certificate: it must name the VIP (docs)
        return tls_material(config)
    names = [config.address, config.host_name, *cfg.TLS_SERVER_NAMES, cfg.GATEWAY_VIP]
    return pki.ensure_server_cert(secrets_dir(cfg) / "pki", f"{config.host_name}-front-door", names)


def _staged(name: str, text: str, dest: str, check: str, mode: str, then: list[str]) -> None:
    """Upload a file beside its place (the staged copy is what changes are measured on), check it with the tool that
    reads it, and only then install it and run `then`: a file the tool refuses never reaches its place."""
    staged = f"{dest}.sparkctl-staged"
    put = files.put(name=f"{name} (staged)", src=StringIO(text), dest=staged, user="root", group="root", mode=mode)
    server.shell(name=f"{name}: checked ({check.split()[0]}), installed" + (", applied" if then else ""),
                 commands=[f"{check} {shlex.quote(staged)}",
                           f"install -m {mode} -o root -g root {shlex.quote(staged)} {shlex.quote(dest)}", *then],
                 _if=put.did_change)


def bridge_firewall(cfg) -> None:
    """The bridge's firewall: the routers' user alone may open 127.0.0.1:ROUTER_BRIDGE_PORT (nftables table of the
    deploy's own, loaded by a oneshot unit at boot and whenever it changed), then checked on the box."""
    users = front_doors.bridge_users(cfg)
    # root-only, as ENV_DIR is (the shipped file is in it): root's nft alone reads it, and on a box that is the gateway
    # too the two steps agree on the directory's mode instead of flipping it every run
    files.directory(name=f"Create {posixpath.dirname(cfg.BRIDGE_FIREWALL_FILE)}",
                    path=posixpath.dirname(cfg.BRIDGE_FIREWALL_FILE), user="root", group="root", mode="0700")
    unit = files.put(name=f"Unit {front_doors.FIREWALL_UNIT}", src=StringIO(front_doors.bridge_firewall_unit(
        cfg, users)), dest=f"{UNIT_DIR}/{front_doors.FIREWALL_UNIT}", user="root", group="root", mode="0644")
    systemd.daemon_reload(name="systemd daemon-reload (bridge firewall unit)", _if=unit.did_change)
    _staged("Bridge firewall (nftables)", front_doors.bridge_firewall(cfg, users), cfg.BRIDGE_FIREWALL_FILE,
            "nft -c -f", "0644", [f"systemctl restart {front_doors.FIREWALL_UNIT}"])
    # enabled (and so started) only once its file is in place: pyinfra's systemd.service starts what it enables
    systemd.service(name=f"{front_doors.FIREWALL_UNIT} enabled and applied", service=front_doors.FIREWALL_UNIT,
                    running=True, enabled=True)
    bridge_firewall_present(name=f"The bridge refuses every user but {', '.join(users)} (nft list table)", cfg=cfg)


class BridgeTable(FactBase):
    """`nft list table inet TABLE`, or nothing when it is not loaded."""

    def command(self, table):
        return StringCommand("nft list table inet", QuoteString(table), "2>/dev/null || true")

    def process(self, output):
        return "\n".join(output)


@operation()
def bridge_firewall_present(cfg):
    """After loading: the bridge's rule is in the kernel's ruleset (read when the deploy runs, not when it plans)."""
    if not host.state.is_executing:
        host.noop("checked after the firewall is loaded")
        return
    listing = host.get_fact(BridgeTable, table=cfg.BRIDGE_FIREWALL_TABLE) or ""
    if front_doors.firewall_rule_present(cfg, listing):
        host.noop(f"nftables table inet {cfg.BRIDGE_FIREWALL_TABLE} refuses other users on the bridge")
        return
    yield fail(f"{host.name}: the bridge's firewall rule is not in nftables table inet {cfg.BRIDGE_FIREWALL_TABLE} "
               f"after loading {cfg.BRIDGE_FIREWALL_FILE} (nft list table shows:\n{listing or '(no such table)'})")


def keepalived(config: HostConfig, pools: list[router.Pool]) -> None:
    """With GATEWAY_VIP: keepalived holds the VIP on one healthy gateway at a time; its configuration (0600: the VRRP
    password) is checked with keepalived -t before it is installed and reloaded."""
    cfg = config.cfg
    apt.packages(name="Install keepalived (the front doors' VIP)", packages=cfg.KEEPALIVED_PACKAGES,
                 cache_time=cfg.APT_CACHE_TIME_S)
    files.directory(name=f"Create {posixpath.dirname(cfg.FRONT_HEALTH_SCRIPT)}",
                    path=posixpath.dirname(cfg.FRONT_HEALTH_SCRIPT), user="root", group="root", mode="0755")
    files.put(name="The front door's health check (keepalived's vrrp_script)", src=StringIO(
        front_doors.health_script(cfg, pools)), dest=cfg.FRONT_HEALTH_SCRIPT, user="root", group="root", mode="0755")
    names = [h.name for h in _gateway_hosts()]
    conf = front_doors.keepalived_conf(cfg, host.name, front_doors.priority(cfg, names, host.name),
                                       secrets.read_vrrp_password(cfg))
    _staged("keepalived.conf (root-only: VRRP's password)", conf, cfg.KEEPALIVED_CONF, "keepalived -t -f", "0600",
            ["systemctl reload-or-restart keepalived.service"])
    # enabled (and so started) only once its checked configuration is in place
    systemd.service(name="keepalived enabled and running", service="keepalived.service", running=True, enabled=True)


def _routers(config: HostConfig, pools: list[router.Pool], venv_changed) -> None:
    """Two units per pool (primary, standby); when either unit or the venv changed, the primary restarts first and
    the standby only once the primary listens again: nginx sends to whichever answers, so no request is refused."""
    cfg = config.cfg
    units = {(p.served, standby): files.put(
        name=f"Router unit {p.standby_unit if standby else p.unit}", src=StringIO(router.unit(cfg, p, standby)),
        dest=f"{UNIT_DIR}/{p.standby_unit if standby else p.unit}", user="root", group="root", mode="0644")
        for p in pools for standby in (False, True)}
    systemd.daemon_reload(name="systemd daemon-reload (router units)", _if=any_changed(*units.values()))
    for p in pools:
        for unit in (p.unit, p.standby_unit):
            systemd.service(name=f"{unit} enabled and running", service=unit, running=True, enabled=True)
        server.shell(name=f"Restart {p.served}'s routers one at a time (a unit or the venv changed)",
                     commands=[f"systemctl restart {p.unit}", _listening(cfg, p.port),
                               f"systemctl restart {p.standby_unit}", _listening(cfg, p.standby_port)],
                     _if=any_changed(units[(p.served, False)], units[(p.served, True)], venv_changed))


def _retire_routers(pools: list[router.Pool]) -> None:
    """Routers of a served model no pool serves any more (the front stopped routing to them in the reload above):
    stopped (each finishes the streams it holds first), disabled and removed."""
    installed = host.get_fact(FindFiles, path=UNIT_DIR, maxdepth=1, fname=f"{router.UNIT_PREFIX}*.service") or []
    retired = router.retired_units(installed, pools)
    for unit in retired:
        systemd.service(name=f"Retire {unit} (no pool serves its model)", service=unit, running=False, enabled=False)
        files.file(name=f"Remove {unit}", path=f"{UNIT_DIR}/{unit}", present=False)
    if retired:
        systemd.daemon_reload(name="systemd daemon-reload (routers retired)")


def _listening(cfg, port: int) -> str:
    """Wait until a router listens (it does once a box answers its health check), or fail the step."""
    loop = (f"for i in $(seq {cfg.ROUTER_READY_TIMEOUT_S}); do (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null "
            f"&& exit 0; sleep 1; done; echo 'router on 127.0.0.1:{port} not listening after "
            f"{cfg.ROUTER_READY_TIMEOUT_S} s (no box healthy?)' >&2; exit 1")
    return f"bash -c {shlex.quote(loop)}"


@operation()
def write_router_handoff(config: HostConfig, pools: list[router.Pool]):
    """On the control machine, after the routers: router.json (the one URL per served model) and the hand-off's
    scrape config with the routers' job. Changes nothing on the gateway."""
    if not host.state.is_executing:
        host.noop("written after the routers")
        return
    cfg = config.cfg
    out = handoff_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    _cert, _key, ca = front_tls(config)
    path = out / router.ROUTER_HANDOFF
    existing = json.loads(path.read_text()) if path.exists() else {}
    mine = front_doors.front_door(host.name, config.address, cfg.GATEWAY_FRONT_PORT, pools)
    doc = front_doors.handoff(cfg, host.name, mine, existing, [h.name for h in _gateway_hosts()], pools,
                              str(ca) if ca else None)
    write_atomic(str(path), json.dumps(doc, indent=2) + "\n", HANDOFF_MODE)
    write_atomic(str(out / front_doors.FRONT_DOORS_K8S), yaml.safe_dump_all(
        front_doors.manifests(doc, cfg.GATEWAY_NAMESPACE, cfg), sort_keys=False), HANDOFF_MODE)
    write_atomic(str(out / front_doors.FRONT_DOORS_LLMD), yaml.safe_dump(front_doors.llmd(doc), sort_keys=False),
                 HANDOFF_MODE)
    ep = out / "endpoints.json"
    prometheus_rules.write_scrape(out, json.loads(ep.read_text()) if ep.exists() else {}, config.cfg)
    logger.info(f"{host.name}: gateway hand-off: {out / router.ROUTER_HANDOFF} ("
                f"{', '.join(m['base_url'] for m in doc['models'].values())})")
    host.noop("router hand-off written")
    yield from ()  # an operation is a generator; this one never changes the host


@deploy("Gateway: vLLM's router")
def gateway() -> None:
    config, pools = gateway_config()
    cfg = config.cfg
    beside_box = "gx10" in host.groups
    problems = account_problems("ROUTER_USER", cfg.ROUTER_USER, host.get_fact(SystemUser, user=cfg.ROUTER_USER))
    if problems:  # the host's own passwd: an operator's login would lose its shell to the routers' nologin user
        raise Refused(f"{host.name}: the gateway step refused this host (nothing was changed):\n  - "
                      + "\n  - ".join(problems))
    apt.packages(name=f"Install {', '.join(cfg.GATEWAY_PACKAGES)}", packages=cfg.GATEWAY_PACKAGES, update=True,
                 cache_time=cfg.APT_CACHE_TIME_S)
    server.user(name=f"Create system user {cfg.ROUTER_USER}", user=cfg.ROUTER_USER, system=True,
                shell="/usr/sbin/nologin", create_home=False)
    bridge_firewall(cfg)  # before nginx (re)loads the bridge: it is never open to every local user
    for path in (cfg.ROUTER_HOME, f"{cfg.ROUTER_HOME}/venvs"):
        files.directory(name=f"Create {path}", path=path, user="root", group="root", mode="0755")
    venv = router_venv(name=f"Install vllm-router {cfg.ROUTER_VERSION} in {router.venv(cfg)}",
                       venv=router.venv(cfg), version=cfg.ROUTER_VERSION, pip_args=router.pip_args(cfg))
    if secrets.read_api_tokens(cfg).next:  # a rotation window: the bridge sends the new token only if boxes take it
        boxes_accept_new_token(name="Every box accepts the new API token (rotation window)", config=config,
                               pools=pools)
    changed = _nginx(config, pools, beside_box)
    systemd.service(name="nginx enabled and running", service="nginx.service", running=True, enabled=True)
    # the front and bridge first: a router (re)started below finds its boxes through them
    server.shell(name="Check the nginx configuration, then reload nginx", commands=["nginx -t -q",
                 "systemctl reload nginx"], _if=changed)
    _routers(config, pools, venv)
    _retire_routers(pools)
    if front_doors.has_vip(cfg):  # after the routers: a gateway takes the VIP only once its front door answers
        keepalived(config, pools)
    write_router_handoff(name="Gateway hand-off: router.json and the routers' scrape job (control machine)",
                         config=config, pools=pools)
