"""The gateway's rendered files through the real validators: nginx -t (the gateway alone, and beside a box's own
site on the same host), systemd-analyze verify of each router unit, and vllm-router's own argument parser on the
argv (from the cached PyPI venv of tests/gateway/harness.py, skipped where it cannot be installed)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from sparkctl.check import tools as check_tools
from sparkctl.config import groupdata, pki
from sparkctl.config.schema import validate
from sparkctl.errors import SettingError
from sparkctl.render import router
from tests.conftest import API_TOKEN, SCRAPE_TOKEN
from tests.gateway import harness

nginx = pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx not installed (apt-get install nginx-light)")


@pytest.fixture(scope="module")
def cfg():
    return validate(groupdata.load(["all", "gx10"]))


class Svc:  # what pools() reads of a Service
    def __init__(self, served: str, role: str, headless: bool = False):
        self.served_name, self.role, self.headless = served, role, headless


def fleet(cfg):
    boxes = [("spark-1", "10.0.0.11", 443, [Svc("coder", "coder"), Svc("embed-qwen3", "embedder")]),
             ("spark-2", "10.0.0.12", 443, [Svc("coder", "coder")]),
             ("spark-3", "10.0.0.13", 443, [Svc("laguna", "coder")]),
             ("spark-4", "10.0.0.14", 443, [Svc("coder", "coder", headless=True)])]
    return router.pools(cfg, boxes)


def test_one_pool_per_served_name_with_its_own_ports(cfg):
    pools = fleet(cfg)
    assert [(p.served, [w.box for w in p.workers], p.port, p.metrics_port) for p in pools] == [
        ("coder", ["spark-1", "spark-2"], cfg.ROUTER_PORT_BASE, cfg.ROUTER_METRICS_PORT_BASE),
        ("embed-qwen3", ["spark-1"], cfg.ROUTER_PORT_BASE + 1, cfg.ROUTER_METRICS_PORT_BASE + 1),
        ("laguna", ["spark-3"], cfg.ROUTER_PORT_BASE + 2, cfg.ROUTER_METRICS_PORT_BASE + 2)]
    with pytest.raises(SettingError, match="GX10_HOSTS"):
        router.pools(cfg, [("spark-4", "10.0.0.14", 443, [Svc("coder", "coder", headless=True)])])


def test_only_router_units_no_pool_runs_are_retired(cfg):
    """A served model whose pool was removed leaves its two routers behind: the gateway step retires exactly those."""
    pools = fleet(cfg)
    installed = [f"/etc/systemd/system/{u}" for p in pools for u in (p.unit, p.standby_unit)] + [
        "/etc/systemd/system/sparkctl-router-old-pool.service", "/etc/systemd/system/sparkctl-router-old-pool-standby"
        ".service", "/etc/systemd/system/vllm-coder.service", "/etc/systemd/system/sparkctl-router-x.conf"]
    assert router.retired_units(installed, pools) == ["sparkctl-router-old-pool-standby.service",
                                                      "sparkctl-router-old-pool.service"]
    assert router.retired_units(installed[:2 * len(pools)], pools) == []  # nothing stale: nothing retired
    assert router.retired_units(installed, []) == sorted(
        n.rsplit("/", 1)[-1] for n in installed if n.endswith(".service") and "/sparkctl-router-" in n)


def test_the_argv_holds_no_secret_and_reaches_boxes_only_through_the_bridge(cfg):
    for pool in fleet(cfg):
        argv = router.router_argv(cfg, pool)
        text = " ".join(argv)
        assert API_TOKEN not in text and "--api-key" not in argv
        urls = argv[argv.index("--worker-urls") + 1:argv.index("--policy")]
        assert urls == [f"http://127.0.0.1:{cfg.ROUTER_BRIDGE_PORT}/{w.box}/{pool.served}" for w in pool.workers]
        assert argv[argv.index("--policy") + 1] == "cache_aware"
        for flag in ("--request-timeout-secs", "--queue-timeout-secs", "--worker-startup-timeout-secs"):
            assert int(argv[argv.index(flag) + 1]) >= 7200, flag  # a 10-minute cut once lost long generations


def test_the_real_router_parses_the_argv(cfg):
    exe, why = harness.router_venv(cfg.ROUTER_VERSION)
    if exe is None:
        pytest.skip(why)
    py = exe.parent / "python"
    for pool, standby in [(p, s) for p in fleet(cfg) for s in (False, True)]:
        argv = router.router_argv(cfg, pool, standby)[1:]
        code = ("import json, sys; from vllm_router.launch_router import parse_router_args; "
                "a = parse_router_args(json.loads(sys.argv[1])); "
                "print(json.dumps({k: getattr(a, k) for k in ('policy', 'worker_urls', 'prometheus_port', "
                "'request_timeout_secs', 'health_check_endpoint', 'retry_max_retries', 'cb_failure_threshold')}))")
        r = subprocess.run([str(py), "-c", code, json.dumps(argv)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout.strip().splitlines()[-1])
        assert got["policy"] == cfg.ROUTER_POLICY and got["prometheus_port"] == pool.ports(standby)[1]
        assert got["request_timeout_secs"] == cfg.ROUTER_REQUEST_TIMEOUT_S
        assert got["health_check_endpoint"] == cfg.ROUTER_HEALTH_PATH and len(got["worker_urls"]) == len(pool.workers)
        assert got["retry_max_retries"] == cfg.ROUTER_RETRIES and got["cb_failure_threshold"] == \
            cfg.ROUTER_CB_FAILURE_THRESHOLD


def _gateway_files(cfg, tmp: Path) -> str:
    cert, key, ca = pki.ensure_server_cert(tmp / "pki", "gateway", ["gateway"])
    (tmp / "gw-token.conf").write_text(router.tokens(cfg, API_TOKEN, SCRAPE_TOKEN, beside_box_site=True))
    (tmp / "bridge.conf").write_text(router.bridge_auth(API_TOKEN))
    return router.site(cfg, fleet(cfg), token_file=str(tmp / "gw-token.conf"),
                       bridge_auth_file=str(tmp / "bridge.conf"), ca_file=str(ca), cert_path=str(cert),
                       key_path=str(key))


@nginx
def test_nginx_accepts_the_gateway_site(cfg, tmp_path):
    site = _gateway_files(cfg, tmp_path)
    (tmp_path / "gw-token.conf").write_text(router.tokens(cfg, API_TOKEN, SCRAPE_TOKEN))
    r = harness.nginx_test(tmp_path, site)
    assert r.returncode == 0, r.stderr
    assert API_TOKEN not in site and SCRAPE_TOKEN not in site  # the tokens live in the root-only includes
    for line in ("proxy_ssl_verify on;", f"listen 127.0.0.1:{cfg.ROUTER_BRIDGE_PORT};", "proxy_ssl_name spark-1;"):
        assert line in site
    for route in cfg.PROXY_ROUTES.coder:
        assert f"location = /laguna{route} {{" in site


@nginx
def test_nginx_accepts_the_gateway_beside_a_box_site_on_the_same_host(cfg, tmp_path):
    """A box that is also the gateway: both sites in one http block (distinct variables, one map bucket size)."""
    from sparkctl.render import box_files
    from tests.render.test_render import settings_for

    data = groupdata.load(["all", "gx10"])
    from tests.conftest import FAKE_LOCK

    data.update(MODEL_LOCK_FILE=FAKE_LOCK, SECRETS_DIR=str(tmp_path / "secrets"), GATEWAY_FRONT_PORT=8443)
    mp = pytest.MonkeyPatch()
    for name, token in (("SPARK_API_TOKEN_FILE", API_TOKEN), ("SPARK_SCRAPE_TOKEN_FILE", SCRAPE_TOKEN)):
        (tmp_path / name).write_text(token + "\n")
        (tmp_path / name).chmod(0o600)
        mp.setenv(name, str(tmp_path / name))
    mp.setenv("GX10_HOSTS", "")
    try:
        s = settings_for(data)
    finally:
        mp.undo()
    gw_site = _gateway_files(s.cfg, tmp_path)
    cert, key, _ca = pki.ensure_server_cert(tmp_path / "pki", "spark-1", ["spark-1"])
    (tmp_path / "box-token.conf").write_text(box_files.tokens(s.cfg, API_TOKEN, SCRAPE_TOKEN))
    box_site = box_files.site(s.cfg, [x for x in s.services if not x.headless],
                              token_file=str(tmp_path / "box-token.conf"), cert_path=str(cert), key_path=str(key))
    r = harness.nginx_test(tmp_path, box_site + "\n" + gw_site)
    assert r.returncode == 0, r.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_accepts_each_router_unit(cfg, tmp_path):
    texts = {**{p.unit: router.unit(cfg, p) for p in fleet(cfg)},
             **{p.standby_unit: router.unit(cfg, p, standby=True) for p in fleet(cfg)}}
    assert check_tools.systemd(tmp_path / "root", texts) == []
    for text in texts.values():
        assert f"User={cfg.ROUTER_USER}" in text and "ProtectSystem=strict" in text and "Restart=always" in text
        assert "CapabilityBoundingSet=\n" in text and "IPAddressAllow=localhost" in text
        assert API_TOKEN not in text
    unit = tmp_path / "root/etc/systemd/system" / fleet(cfg)[0].unit
    r = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--threshold=20", str(unit)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout[-2000:]
