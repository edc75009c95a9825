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
import shlex

from pyinfra import host, inventory, logger
from pyinfra.api import StringCommand, deploy, operation
from pyinfra.api.command import QuoteString
from pyinfra.facts.files import File, FindFiles
from pyinfra.operations import apt, files, server, systemd
from pyinfra.operations.util import any_changed

from sparkctl.box.contract import UNIT_DIR
from sparkctl.check.gateway import validate_gateway
from sparkctl.config import secrets
from sparkctl.config.hosts import per_host_models
from sparkctl.config.settings import HostConfig
from sparkctl.errors import Refused, SparkctlError
from sparkctl.render import prometheus_rules, router
from sparkctl.render.gateway import HANDOFF_MODE, write_atomic
from sparkctl.render.box_files import NGINX_DIR
from tasks.common import handoff_dir, tls_material

__all__ = ["after_the_boxes", "gateway", "gateway_config"]

GATEWAY_SITE_LINK = f"{NGINX_DIR}/sites-enabled/sparkctl-gateway.conf"


def gateway_config() -> tuple[HostConfig, list[router.Pool]]:
    """This gateway's settings and pools, validated as `python -m sparkctl check` validates them
    (sparkctl.check.gateway); bad input is refused here, before any command runs."""
    boxes = {h.name: h.data.dict() for h in inventory.get_group("gx10", [])}
    try:
        checked = validate_gateway(host.name, host.data.dict(), boxes, host_models=per_host_models())
    except SparkctlError as exc:
        raise Refused(f"{host.name}: {exc}") from None
    return checked.config, checked.pools


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
    api = secrets.read_api_token(cfg)
    tokens = router.tokens(cfg, api, secrets.read_scrape_token(cfg, api_token=api), beside_box_site=beside_box)
    cert, key, ca = tls_material(config)
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
        files.put(name="Bridge's bearer for the boxes (root-only)", src=StringIO(router.bridge_auth(api)),
                  dest=router.BRIDGE_AUTH_FILE, **private),
        files.put(name="nginx site sparkctl-gateway", src=StringIO(router.site(cfg, pools)),
                  dest=router.GATEWAY_SITE, user="root", group="root", mode="0644"),
        files.link(name="Enable site sparkctl-gateway", path=GATEWAY_SITE_LINK, target=router.GATEWAY_SITE),
    ]
    if not beside_box:  # a box's own step leaves the distribution's default site to its proxy step
        changes.append(files.link(name="Disable the distribution's default site",
                                  path=f"{NGINX_DIR}/sites-enabled/default", present=False))
    return any_changed(*changes)


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
    out = handoff_dir(config.cfg)
    out.mkdir(parents=True, exist_ok=True)
    _cert, _key, ca = tls_material(config)
    doc = router.handoff(config.cfg, host.name, config.address, pools, str(ca) if ca else None)
    write_atomic(str(out / router.ROUTER_HANDOFF), json.dumps(doc, indent=2) + "\n", HANDOFF_MODE)
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
    apt.packages(name="Install nginx and python3-venv", packages=cfg.GATEWAY_PACKAGES, update=True,
                 cache_time=cfg.APT_CACHE_TIME_S)
    server.user(name=f"Create system user {cfg.ROUTER_USER}", user=cfg.ROUTER_USER, system=True,
                shell="/usr/sbin/nologin", create_home=False)
    for path in (cfg.ROUTER_HOME, f"{cfg.ROUTER_HOME}/venvs"):
        files.directory(name=f"Create {path}", path=path, user="root", group="root", mode="0755")
    venv = router_venv(name=f"Install vllm-router {cfg.ROUTER_VERSION} in {router.venv(cfg)}",
                       venv=router.venv(cfg), version=cfg.ROUTER_VERSION, pip_args=router.pip_args(cfg))
    changed = _nginx(config, pools, beside_box)
    systemd.service(name="nginx enabled and running", service="nginx.service", running=True, enabled=True)
    # the front and bridge first: a router (re)started below finds its boxes through them
    server.shell(name="Check the nginx configuration, then reload nginx", commands=["nginx -t -q",
                 "systemctl reload nginx"], _if=changed)
    _routers(config, pools, venv)
    _retire_routers(pools)
    write_router_handoff(name="Gateway hand-off: router.json and the routers' scrape job (control machine)",
                         config=config, pools=pools)
