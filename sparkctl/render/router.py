"""The front door on the `gateway` host: vLLM's router (PyPI vllm-router) behind nginx, one router per served model.

    client --TLS+bearer--> front (nginx, GATEWAY_FRONT_PORT) --/<served>/<route>--> vllm-router (loopback, one per
    served model) --http--> bridge (nginx, 127.0.0.1:ROUTER_BRIDGE_PORT) --TLS+bearer, CA-verified--> box proxy

One router per served model: in regular mode a vllm-router balances one set of workers and does not pick them by
the request's `model` (its multi-model mode, --enable-igw, registers workers at run time over its admin API); the
front already routes by the served model's path prefix, so one process per pool is the simple static form.

The bridge exists because the router cannot present a bearer to its workers' health path (its --api-key is not sent
on health checks) and must not hold the token: nginx on the gateway adds `Authorization: Bearer` from a root-only
include, verifies each box against the project CA, and the router talks plain HTTP to 127.0.0.1 only. Each box is a
path prefix of the bridge (`/<box>/`), so a worker URL is http://127.0.0.1:<bridge>/<box>/<served>.

Pure functions of the typed settings; tasks/gateway.py uploads what these render.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from sparkctl.capacity.venv import index_args
from sparkctl.config.quantities import MIB
from sparkctl.config.schema import GroupData
from sparkctl.errors import SettingError
from sparkctl.render.box_files import NGINX_DIR, each_token
from sparkctl.render.monitoring import prometheus_job
from sparkctl.render.units import render_template

GATEWAY_SITE = f"{NGINX_DIR}/sites-available/sparkctl-gateway.conf"
GATEWAY_TLS_DIR = f"{NGINX_DIR}/sparkctl-gateway-tls"
GATEWAY_TOKEN_FILE = f"{NGINX_DIR}/sparkctl-gateway-token.conf"  # the front's token maps (root-only 0600)
BRIDGE_AUTH_FILE = f"{NGINX_DIR}/sparkctl-bridge-auth.conf"  # the bridge's Authorization header (root-only 0600)
BOX_CA_FILE = f"{GATEWAY_TLS_DIR}/boxes-ca.pem"  # the CA the bridge verifies the boxes with
GATEWAY_CERT, GATEWAY_KEY = f"{GATEWAY_TLS_DIR}/server.pem", f"{GATEWAY_TLS_DIR}/server.key"


@dataclass(frozen=True)
class Worker:
    box: str  # inventory name: the bridge's path prefix
    address: str  # where the box's proxy listens
    port: int  # its TLS port (PROXY_PORT)

    @property
    def segment(self) -> str:
        """The box's path prefix on the bridge (its name, kept to URL- and nginx-safe characters)."""
        return re.sub(r"[^A-Za-z0-9._-]", "-", self.box)


@dataclass(frozen=True)
class Pool:
    served: str  # the served name: the front's path prefix and the boxes' own
    role: str  # coder | embedder: which PROXY_ROUTES the front publishes
    workers: tuple[Worker, ...]
    port: int  # the primary router's loopback port
    metrics_port: int  # its Prometheus port (loopback)
    standby_port: int  # the standby router's: nginx sends to it only while the primary does not answer
    standby_metrics_port: int

    @property
    def unit(self) -> str:
        return f"{UNIT_PREFIX}{self.served}.service"

    @property
    def standby_unit(self) -> str:
        return f"{UNIT_PREFIX}{self.served}-standby.service"

    def ports(self, standby: bool) -> tuple[int, int]:
        """(router port, metrics port) of the primary or the standby."""
        return (self.standby_port, self.standby_metrics_port) if standby else (self.port, self.metrics_port)


UNIT_PREFIX = "sparkctl-router-"  # every router unit's name starts so (Pool.unit, Pool.standby_unit)


def retired_units(installed: list[str], pools: list[Pool]) -> list[str]:
    """The router units found installed (paths or names) that no pool runs any more: a served model whose pool was
    removed or renamed. Sorted; other units are never named."""
    wanted = {p.unit for p in pools} | {p.standby_unit for p in pools}
    names = {path.rsplit("/", 1)[-1] for path in installed}
    return sorted(n for n in names if n.startswith(UNIT_PREFIX) and n.endswith(".service") and n not in wanted)


def pools(cfg: GroupData, boxes: list[tuple[str, str, int, list]]) -> list[Pool]:
    """One pool per served name over the boxes serving it: boxes = [(name, address, proxy port, services)], the API
    services of each gx10 host. Router ports by served name in order (sparkctl/check/gateway.py keeps them apart)."""
    members: dict[str, tuple[str, list[Worker]]] = {}
    for name, address, port, services in boxes:
        for svc in services:
            if not svc.headless:
                members.setdefault(svc.served_name, (svc.role, []))[1].append(Worker(name, address, port))
    if not members:
        raise SettingError("GX10_HOSTS", [b[0] for b in boxes], "at least one box serving a model behind its proxy",
                           "the gateway's routers would have no workers")
    out = []
    for i, served in enumerate(sorted(members)):
        role, workers = members[served]
        out.append(Pool(served, role, tuple(sorted(workers, key=lambda w: w.box)), cfg.ROUTER_PORT_BASE + i,
                        cfg.ROUTER_METRICS_PORT_BASE + i, cfg.ROUTER_STANDBY_PORT_BASE + i,
                        cfg.ROUTER_STANDBY_METRICS_PORT_BASE + i))
    return out


def pip_args(cfg: GroupData) -> list[str]:
    """The router venv's pip options: the wheelhouses and index every pip install of the deploy uses (an air-gapped
    gateway installs from PIP_FIND_LINKS like its boxes)."""
    return index_args(cfg)


def venv(cfg: GroupData) -> str:
    return f"{cfg.ROUTER_HOME}/venvs/vllm-router-{cfg.ROUTER_VERSION}"


def worker_url(cfg: GroupData, pool: Pool, worker: Worker) -> str:
    return f"http://127.0.0.1:{cfg.ROUTER_BRIDGE_PORT}/{worker.segment}/{pool.served}"


def router_argv(cfg: GroupData, pool: Pool, standby: bool = False) -> list[str]:
    """vllm-router's whole command line for one pool's primary or standby; it holds no secret (the bridge adds the
    token)."""
    port, metrics_port = pool.ports(standby)
    return [
        f"{venv(cfg)}/bin/vllm-router",
        "--host", "127.0.0.1", "--port", str(port),
        "--worker-urls", *(worker_url(cfg, pool, w) for w in pool.workers),
        "--policy", cfg.ROUTER_POLICY,
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port),
        "--health-check-endpoint", cfg.ROUTER_HEALTH_PATH,
        "--health-check-interval-secs", str(cfg.ROUTER_HEALTH_INTERVAL_S),
        "--health-check-timeout-secs", str(cfg.ROUTER_HEALTH_TIMEOUT_S),
        "--health-failure-threshold", str(cfg.ROUTER_HEALTH_FAILURE_THRESHOLD),
        "--health-success-threshold", str(cfg.ROUTER_HEALTH_SUCCESS_THRESHOLD),
        "--worker-startup-timeout-secs", str(cfg.ROUTER_WORKER_STARTUP_TIMEOUT_S),
        "--worker-startup-check-interval", str(cfg.ROUTER_STARTUP_CHECK_INTERVAL_S),
        "--retry-max-retries", str(cfg.ROUTER_RETRIES),
        "--retry-initial-backoff-ms", str(cfg.ROUTER_RETRY_INITIAL_BACKOFF_MS),
        "--retry-max-backoff-ms", str(cfg.ROUTER_RETRY_MAX_BACKOFF_MS),
        "--cb-failure-threshold", str(cfg.ROUTER_CB_FAILURE_THRESHOLD),
        "--cb-success-threshold", str(cfg.ROUTER_CB_SUCCESS_THRESHOLD),
        "--cb-timeout-duration-secs", str(cfg.ROUTER_CB_TIMEOUT_S),
        "--cb-window-duration-secs", str(cfg.ROUTER_CB_WINDOW_S),
        "--request-timeout-secs", str(cfg.ROUTER_REQUEST_TIMEOUT_S),
        "--queue-timeout-secs", str(cfg.ROUTER_QUEUE_TIMEOUT_S),
        "--max-payload-size", str(cfg.PROXY_MAX_BODY_MB * MIB),
    ]


def unit(cfg: GroupData, pool: Pool, standby: bool = False) -> str:
    """The sandboxed systemd unit of one pool's primary (or standby) router."""
    port, metrics_port = pool.ports(standby)
    return render_template("vllm-router.service.j2", d=cfg, pool=pool, standby=standby, port=port,
                           metrics_port=metrics_port, exec_start=shlex.join(router_argv(cfg, pool, standby)))


def site(cfg: GroupData, pool_list: list[Pool], token_file: str = GATEWAY_TOKEN_FILE,
         bridge_auth_file: str = BRIDGE_AUTH_FILE, ca_file: str = BOX_CA_FILE, cert_path: str = GATEWAY_CERT,
         key_path: str = GATEWAY_KEY) -> str:
    """The gateway's nginx site: the TLS front and the loopback bridge to every box of every pool."""
    by_box = {w.box: w for p in pool_list for w in p.workers}
    bridged = [{"name": w.box, "segment": w.segment, "address": w.address, "port": w.port,
                "upstream": "sparkctl_box_" + re.sub(r"[^A-Za-z0-9_]", "_", w.box)} for _n, w in sorted(by_box.items())]
    return render_template("nginx-gateway.conf.j2", d=cfg, pools=pool_list, boxes=bridged,
                           scrape=scrape_paths(cfg, pool_list), token_file=token_file,
                           bridge_auth_file=bridge_auth_file, ca_file=ca_file, cert_path=cert_path,
                           key_path=key_path)


def tokens(cfg: GroupData, api_token: str | Sequence[str], scrape_token: str | Sequence[str],
           beside_box_site: bool = False) -> str:
    """The front's token maps (root-only): the API token opens the routes, the scrape token the routers' metrics
    (two of each during a rotation window). beside_box_site: this host is also a box, whose token file already sets
    the map hash bucket size (nginx refuses it twice)."""
    return render_template("nginx-gateway-token.conf.j2", d=cfg, tokens=each_token(api_token),
                           scrape_tokens=each_token(scrape_token), bucket=not beside_box_site)


def bridge_auth(api_token: str) -> str:
    """The bridge's header (root-only): the boxes' API token, added to every request the routers send (during a
    rotation window the new one: secrets.Tokens.sent)."""
    return render_template("nginx-bridge-auth.conf.j2", token=api_token)


def scrape_paths(cfg: GroupData, pool_list: list[Pool]) -> dict[str, int]:
    """The front's scrape paths -> metrics port: /<ROUTER_SCRAPE_PATH>/<served>/metrics (the primary) and
    /<ROUTER_SCRAPE_PATH>/<served>/standby/metrics."""
    out = {}
    for p in pool_list:
        out[f"/{cfg.ROUTER_SCRAPE_PATH}/{p.served}/metrics"] = p.metrics_port
        out[f"/{cfg.ROUTER_SCRAPE_PATH}/{p.served}/standby/metrics"] = p.standby_metrics_port
    return out


ROUTER_HANDOFF = "router.json"  # the gateway's part of the hand-off (control machine), beside endpoints.json


def handoff(cfg: GroupData, gateway: str, address: str, pool_list: list[Pool], ca: str | None) -> dict:
    """What the gateway step records for the hand-off: the one URL per served model and the routers' scrape paths;
    ca: the generated CA clients verify the front with (None: the operator's certificate, the system's trust)."""
    base = f"https://{address}:{cfg.GATEWAY_FRONT_PORT}"
    return {"schema": "sparkctl.router/1", "gateway": gateway, "address": address, "port": cfg.GATEWAY_FRONT_PORT,
            "ca_bundle": ca,
            "models": {p.served: {"base_url": f"{base}/{p.served}/v1", "boxes": [w.box for w in p.workers],
                                  "metrics_paths": {"primary": f"/{cfg.ROUTER_SCRAPE_PATH}/{p.served}/metrics",
                                                    "standby": f"/{cfg.ROUTER_SCRAPE_PATH}/{p.served}/standby/metrics"}}
                       for p in pool_list}}


def scrape_job_name(cfg: GroupData) -> str:
    """The routers' Prometheus job (the dashboard's router row and the router alerts select on it)."""
    return f"{cfg.PROMETHEUS_JOB_NAME}-router"


def scrape_job(doc: dict, cfg: GroupData) -> dict:
    """The hand-off's Prometheus job for the routers: one target group per served model on the gateway's front,
    with the same scrape token and CA as the boxes' job."""
    doors = doc.get("front_doors") or [{"gateway": doc["gateway"], "address": doc["address"], "port": doc["port"]}]
    # each gateway's own routers at its own address (never through the VIP: it reaches one gateway alone)
    groups = [{"targets": [f"{g['address']}:{g['port']}"],
               "labels": {"__metrics_path__": path, "gateway": g["gateway"], "service": served, "router": role}}
              for g in doors for served, m in sorted(doc["models"].items())
              for role, path in sorted(m["metrics_paths"].items())]
    return prometheus_job(scrape_job_name(cfg), groups, cfg, bool(doc.get("ca_bundle")))
