"""Two front doors' rendered files (sparkctl/render/front_doors.py): keepalived.conf through `keepalived -t`, the
bridge's nftables ruleset through `nft -c` (each skipped where the tool is not installed: scripts/control-packages.txt
lists both), the health script run against a stand-in front, the nginx site's health page, and the hand-off's front
doors: router.json merged gateway by gateway, their Service + EndpointSlice through the Kubernetes schema, llm-d's
list, the routers' scrape targets per gateway."""

from __future__ import annotations

import http.server
import shutil
import socket
import subprocess
import sys
import threading

import pytest

from sparkctl.config import groupdata
from sparkctl.config.schema import validate
from sparkctl.render import front_doors, gateway, router
from tests.gateway import harness
from tests.render.test_router import fleet
from tests.render.test_router_handoff import check_llmd

VIP = {"GATEWAY_VIP": "10.0.0.100", "GATEWAY_VIP_INTERFACE": "eth0"}


@pytest.fixture(scope="module")
def cfg():
    return validate({**groupdata.load(["all", "gx10"]), **VIP})


@pytest.fixture(scope="module")
def no_vip():
    return validate(groupdata.load(["all", "gx10"]))


def test_priorities_follow_the_gateway_order(cfg):
    assert [front_doors.priority(cfg, ["gw-1", "gw-2", "gw-3"], g) for g in ("gw-1", "gw-2", "gw-3")] == \
        [cfg.VRRP_PRIORITY_FIRST, cfg.VRRP_PRIORITY_FIRST - cfg.VRRP_PRIORITY_STEP,
         cfg.VRRP_PRIORITY_FIRST - 2 * cfg.VRRP_PRIORITY_STEP]


def test_keepalived_conf_holds_the_vip_the_check_and_no_preemption(cfg):
    conf = front_doors.keepalived_conf(cfg, "gw-1", 150, "3f9a0c1d")
    for line in ("virtual_router_id 51", "priority 150", "auth_pass 3f9a0c1d", "nopreempt", "state BACKUP",
                 "10.0.0.100/24 dev eth0", f'script "{cfg.FRONT_HEALTH_SCRIPT}"',
                 f"interval {cfg.FRONT_HEALTH_INTERVAL_S}", f"fall {cfg.FRONT_HEALTH_FALL}",
                 f"rise {cfg.FRONT_HEALTH_RISE}", "sparkctl_front_door\n"):
        assert line in conf, line
    preempting = validate({**groupdata.load(["all", "gx10"]), **VIP, "VRRP_PREEMPT": True})
    assert "nopreempt" not in front_doors.keepalived_conf(preempting, "gw-1", 150, "x")


@pytest.mark.skipif(shutil.which("keepalived") is None, reason="keepalived not installed (apt-get install keepalived)")
def test_keepalived_accepts_the_conf(cfg, tmp_path):
    script = tmp_path / "front-door-health"
    script.write_text(front_doors.health_script(cfg, fleet(cfg)))
    script.chmod(0o755)
    local = cfg.model_copy(update={"FRONT_HEALTH_SCRIPT": str(script)})
    conf = tmp_path / "keepalived.conf"
    conf.write_text(front_doors.keepalived_conf(local, "gw-1", 150, "3f9a0c1d"))
    conf.chmod(0o600)
    r = subprocess.run(["keepalived", "-t", "-f", str(conf)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    conf.write_text(front_doors.keepalived_conf(local, "gw-1", 150, "x").replace("virtual_router_id", "virtual_rtr"))
    bad = subprocess.run(["keepalived", "-t", "-f", str(conf)], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0  # the check can fail: a misspelt keyword is refused


def test_the_bridge_is_the_router_users_alone(cfg):
    """Every router unit runs as a user the firewall allows, and the firewall allows no one else."""
    users = front_doors.bridge_users(cfg)
    assert users == [cfg.ROUTER_USER]
    for p in fleet(cfg):
        for standby in (False, True):
            assert f"User={cfg.ROUTER_USER}\n" in router.unit(cfg, p, standby)
    rules = front_doors.bridge_firewall(cfg, users)
    assert (f'oifname "lo" tcp dport {cfg.ROUTER_BRIDGE_PORT} meta skuid != {cfg.ROUTER_USER} reject with tcp reset'
            in rules)
    assert f"delete table inet {cfg.BRIDGE_FIREWALL_TABLE}" in rules  # replaced in one transaction, idempotent
    assert "meta skuid != { a, b }" in front_doors.bridge_firewall(cfg, ["a", "b"])


def _nft_check(text: str, tmp_path) -> subprocess.CompletedProcess:
    path = tmp_path / "bridge.nft"
    path.write_text(text)
    # nft -c talks to the kernel: in a user + network namespace of its own it needs no root
    return subprocess.run(["unshare", "-rn", "nft", "-c", "-f", str(path)], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.skipif(shutil.which("nft") is None or shutil.which("unshare") is None,
                    reason="nft not installed (apt-get install nftables)")
def test_nft_accepts_the_ruleset(cfg, tmp_path):
    r = _nft_check(front_doors.bridge_firewall(cfg, ["nobody"]), tmp_path)  # a user every machine has
    if r.returncode and "Operation not permitted" in r.stderr:
        pytest.skip(f"no user namespaces here: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    bad = _nft_check(front_doors.bridge_firewall(cfg, ["nobody"]).replace("reject with tcp reset", "refuse"), tmp_path)
    assert bad.returncode != 0, bad.stderr


def test_the_rule_is_found_in_nfts_listing_and_only_there(cfg):
    listing = ("table inet sparkctl_bridge {\n\tchain output {\n\t\ttype filter hook output priority filter; "
               f'policy accept;\n\t\toifname "lo" tcp dport {cfg.ROUTER_BRIDGE_PORT} meta skuid != 999 reject with '
               'tcp reset comment "x"\n\t}\n}')
    assert front_doors.firewall_rule_present(cfg, listing)
    assert not front_doors.firewall_rule_present(cfg, "")
    assert not front_doors.firewall_rule_present(cfg, listing.replace(str(cfg.ROUTER_BRIDGE_PORT), "1"))
    assert not front_doors.firewall_rule_present(cfg, listing.replace("reject with tcp reset", "accept"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_health_script_passes_only_while_every_served_models_routers_answer(cfg, tmp_path):
    port = _free_port()
    local = cfg.model_copy(update={"FRONT_HEALTH_PORT": port, "FRONT_HEALTH_TIMEOUT_S": 2})
    pools = fleet(cfg)
    script = tmp_path / "health"
    script.write_text(front_doors.health_script(local, pools))
    failing = {"/laguna/health"}

    class Front(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(503 if self.path in failing else 200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Front)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        run = lambda: subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=30)  # noqa: E731
        down = run()
        assert down.returncode == 1 and "laguna/health" in down.stderr
        failing.clear()
        assert run().returncode == 0
    finally:
        server.shutdown()
        server.server_close()
    assert run().returncode == 1  # the front gone: refused


@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx not installed")
def test_nginx_accepts_the_site_with_its_health_page(cfg, no_vip, tmp_path):
    from tests.render.test_router import _gateway_files
    from tests.conftest import API_TOKEN, SCRAPE_TOKEN

    site = _gateway_files(cfg, tmp_path)
    (tmp_path / "gw-token.conf").write_text(router.tokens(cfg, API_TOKEN, SCRAPE_TOKEN))
    r = harness.nginx_test(tmp_path, site)
    assert r.returncode == 0, r.stderr
    assert f"listen 127.0.0.1:{cfg.FRONT_HEALTH_PORT};" in site
    assert "location = /coder/health {" in site and cfg.FRONT_HEALTH_ROUTER_PATH in site
    assert f"{cfg.FRONT_HEALTH_PORT}" not in router.site(no_vip, fleet(no_vip))  # one gateway, no VIP: as before


def test_router_json_merges_each_gateways_front_door(cfg, no_vip):
    pools = fleet(cfg)
    gws = ["gw-1", "gw-2"]
    one = front_doors.handoff(cfg, "gw-2", front_doors.front_door("gw-2", "10.0.0.22", 443, pools), {}, gws, pools,
                              "/x/ca.pem")
    both = front_doors.handoff(cfg, "gw-1", front_doors.front_door("gw-1", "10.0.0.21", 443, pools), one, gws, pools,
                               "/x/ca.pem")
    assert [d["gateway"] for d in both["front_doors"]] == gws  # GATEWAY_HOSTS order, whoever wrote last
    assert both["vip"] == "10.0.0.100" and both["models"]["coder"]["base_url"] == "https://10.0.0.100:443/coder/v1"
    gone = front_doors.handoff(cfg, "gw-1", front_doors.front_door("gw-1", "10.0.0.21", 443, pools), both, ["gw-1"],
                               pools, None)
    assert [d["gateway"] for d in gone["front_doors"]] == ["gw-1"]  # a gateway no longer in the inventory: dropped
    single = front_doors.handoff(no_vip, "gw-1", front_doors.front_door("gw-1", "10.0.0.21", 443, pools), {}, ["gw-1"],
                                 pools, None)
    assert single["vip"] is None and single["models"]["coder"]["base_url"] == "https://10.0.0.21:443/coder/v1"
    job = router.scrape_job(both, cfg)
    targets = {(g["targets"][0], g["labels"]["gateway"]) for g in job["static_configs"]}
    assert targets == {("10.0.0.21:443", "gw-1"), ("10.0.0.22:443", "gw-2")}  # each gateway's routers, not the VIP


def test_the_front_doors_service_and_slice_pass_the_kubernetes_schema(cfg):
    pools = fleet(cfg)
    doors = [front_doors.front_door("gw-1", "10.0.0.21", 443, pools),
             front_doors.front_door("gw-2", "10.0.0.22", 443, pools, ready=False)]
    doc = {**router.handoff(cfg, "gw-1", "10.0.0.100", pools, None), "front_doors": doors}
    docs = front_doors.manifests(doc, cfg.GATEWAY_NAMESPACE, cfg)
    gateway.validate_manifests(docs, cfg.GATEWAY_K8S_VERSION)  # the real schema, strict
    service, slice_ = docs
    assert service["spec"]["sessionAffinity"] == "ClientIP"
    assert service["spec"]["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"] == cfg.FRONT_DOOR_AFFINITY_TIMEOUT_S
    assert slice_["metadata"]["labels"]["kubernetes.io/service-name"] == service["metadata"]["name"]
    assert [(e["addresses"], e["conditions"]["ready"]) for e in slice_["endpoints"]] == \
        [(["10.0.0.21"], True), (["10.0.0.22"], False)]
    llmd = front_doors.llmd(doc)
    check_llmd(llmd)
    assert [e["address"] for e in llmd["endpoints"]] == ["10.0.0.21"]  # the gateway not ready is left out
