"""The hand-off's gateway parts: llm-d's file-discovery endpoints per pool (its format and rules, written by atomic
rename, a draining box left out), and the routers' job in the Prometheus scrape config."""

from __future__ import annotations

import ipaddress
import json
import os

import yaml

from sparkctl.config import groupdata
from sparkctl.config.schema import validate
from sparkctl.render import gateway, prometheus_rules, router


def endpoints(ready_b: bool = True) -> dict:
    def e(box, address, model, ready=True):
        return {"box": box, "address": address, "port": 443, "base_url": f"https://{address}:443/coder/v1",
                "model": model, "revision": "abc", "ready": ready}
    return {"schema": "sparkctl.endpoints/1", "topology": "replicas", "ca_bundle": "/x/ca.pem",
            "models": {"coder": [e("spark-1", "10.0.0.11", "qwen3.8-27b"), e("spark-2", "10.0.0.12", "qwen3.8-27b",
                                                                               ready_b),
                                 e("spark-3", "spark-3.lan", "qwen3.8-27b")],
                       "laguna": [e("spark-4", "10.0.0.14", "laguna-s-2.1")]}}


def check_llmd(doc: dict) -> None:
    """llm-d's file-discovery rules (docs/discovery.md): endpoints with a name, an IPv4 literal, a port string."""
    names = set()
    for ep in doc["endpoints"]:
        assert isinstance(ipaddress.ip_address(ep["address"]), ipaddress.IPv4Address)
        assert isinstance(ep["port"], str) and 1 <= int(ep["port"]) <= 65535
        assert ep["name"] and ep["name"] not in names
        names.add(ep["name"])
        assert all(isinstance(v, str) for v in ep["labels"].values())


def test_one_llmd_file_per_pool_with_its_ready_ipv4_boxes():
    docs = gateway.llmd_endpoints(endpoints())
    assert sorted(docs) == ["coder", "laguna"]
    for doc in docs.values():
        check_llmd(doc)
    assert [e["address"] for e in docs["coder"]["endpoints"]] == ["10.0.0.11", "10.0.0.12"]  # no DNS-only box
    assert docs["coder"]["endpoints"][0]["labels"]["path-prefix"] == "/coder/v1"
    draining = gateway.llmd_endpoints(endpoints(ready_b=False))
    assert [e["name"] for e in draining["coder"]["endpoints"]] == ["spark-1"]  # the EPP deletes spark-2


def test_the_files_are_replaced_atomically_and_a_retired_pool_loses_its_file(tmp_path):
    gateway.write(tmp_path, endpoints(), [])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["endpoints.json", "k8s-endpoints.yaml",
                                                          "llmd-endpoints-coder.yaml", "llmd-endpoints-laguna.yaml"]
    inode = os.stat(tmp_path / "llmd-endpoints-coder.yaml").st_ino
    one = endpoints(ready_b=False)
    del one["models"]["laguna"]
    gateway.write(tmp_path, one, [])
    assert not (tmp_path / "llmd-endpoints-laguna.yaml").exists()
    assert os.stat(tmp_path / "llmd-endpoints-coder.yaml").st_ino != inode  # a new file renamed over the old one
    check_llmd(yaml.safe_load((tmp_path / "llmd-endpoints-coder.yaml").read_text()))
    assert oct((tmp_path / "llmd-endpoints-coder.yaml").stat().st_mode & 0o777) == oct(gateway.HANDOFF_MODE)


def test_the_scrape_config_gains_the_routers_job_once_a_gateway_recorded_it(tmp_path):
    cfg = validate(groupdata.load(["all", "gx10"]))
    eps = endpoints()
    assert [j["job_name"] for j in prometheus_rules.scrape_configs(tmp_path, eps, cfg)] == ["sparkctl"]

    class Svc:
        def __init__(self, served):
            self.served_name, self.role, self.headless = served, "coder", False
    pools = router.pools(cfg, [("spark-1", "10.0.0.11", 443, [Svc("coder")]), ("spark-4", "10.0.0.14", 443,
                                                                               [Svc("laguna")])])
    doc = router.handoff(cfg, "gw-1", "10.0.0.5", pools, "/x/ca.pem")
    assert doc["models"]["coder"]["base_url"] == "https://10.0.0.5:443/coder/v1"
    (tmp_path / router.ROUTER_HANDOFF).write_text(json.dumps(doc))
    jobs = prometheus_rules.scrape_configs(tmp_path, eps, cfg)
    assert [j["job_name"] for j in jobs] == ["sparkctl", "sparkctl-router"]
    assert [(g["targets"], g["labels"]["__metrics_path__"], g["labels"]["router"])
            for g in jobs[1]["static_configs"]] == [
        (["10.0.0.5:443"], "/router/coder/metrics", "primary"),
        (["10.0.0.5:443"], "/router/coder/standby/metrics", "standby"),
        (["10.0.0.5:443"], "/router/laguna/metrics", "primary"),
        (["10.0.0.5:443"], "/router/laguna/standby/metrics", "standby")]
    path = prometheus_rules.write_scrape(tmp_path, eps, cfg)
    assert yaml.safe_load(path.read_text()) == jobs
