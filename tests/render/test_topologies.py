"""Two Sparks: the right services on the right host with the right flags, in each topology. Plans come from the
whole deploy against two @fake hosts; flags from the same settings the deploy renders."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from sparkctl import REPO_ROOT
from sparkctl.box.check_vllm_args import unescape_env_value
from sparkctl.check.validate import validate_host as validate
from sparkctl.errors import SettingError
from sparkctl.render import gateway, link, units
from tests.conftest import API_TOKEN, SCRAPE_TOKEN, changed

PAIR = ["spark-1", "spark-2"]


def run_pair(tmp_path, topology_name: str, *extra: str, models: str = "", hosts: str = "2") -> dict:
    tf = tmp_path / "api_token"
    tf.write_text(API_TOKEN)
    tf.chmod(0o600)  # secrets readable by others are refused
    (tmp_path / "scrape_token").write_text(SCRAPE_TOKEN)  # the proxy's scrape paths take their own token
    (tmp_path / "scrape_token").chmod(0o600)
    env = dict(os.environ, FAKE_KIND="dgx", FAKE_HOSTS=hosts, FAKE_MODELS=models, PYINFRA_FAKE_DELAY="0",
               PYINFRA_FAKE_DELAY_JITTER="0", SPARKCTL_TEST_SECRETS=str(tmp_path / "secrets"), GX10_HOSTS="",
               SPARK_API_TOKEN_FILE=str(tf), SPARKCTL_TEST_HANDOFF=str(tmp_path / "handoff"),
               SPARK_SCRAPE_TOKEN_FILE=str(tmp_path / "scrape_token"))
    r = subprocess.run([sys.executable, "tests/standins/deploy_runner.py", "tests/standins/gx10_inventory.py", "--data",
                        f"SPARK_TOPOLOGY={topology_name}", *extra], cwd=REPO_ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
    line = next(x for x in r.stdout.splitlines() if x.startswith("FAKE-DRIVER-JSON "))
    out = json.loads(line.split(" ", 1)[1])
    out["log"] = r.stdout + r.stderr
    return out


def ops(out: dict, host: str) -> list[str]:
    return out["ops_by_host"][f"@fake/{host}"]


def cmds(out: dict, host: str) -> list[str]:
    return out["by_host"][f"@fake/{host}"]


def fetches(out: dict, host: str) -> list[str]:
    """The box's checkpoint fetches (sparkctl/box/fetch_checkpoint.py: from the Hub, or --copy from a box)."""
    return [c for c in cmds(out, host) if "fetch_checkpoint.py --listing" in c]


def copy_sources(command: str) -> list[str]:
    """A copy's --source values, in the order the box tries them ([] for a Hub download)."""
    argv = shlex.split(command)
    return [argv[i + 1] for i, a in enumerate(argv) if a == "--source"]


def rollouts(out: dict, host: str) -> list[str]:
    return [c.split("apply ")[1] for c in cmds(out, host) if "rollout.py apply" in c]


def test_replicas_every_box_serves_everything_and_no_link(tmp_path):
    out = run_pair(tmp_path, "replicas")
    for h in PAIR:
        assert [r.split()[0] for r in rollouts(out, h)] == ["coder", "embed-qwen3", "embed-bge-m3"]
        assert not any(o.startswith("Two-Spark link") for o in ops(out, h))
        assert len(fetches(out, h)) == 5
        assert any(o.startswith("TLS proxy") for o in ops(out, h))
    assert not any(copy_sources(c) for c in fetches(out, "spark-1"))  # the first box from the Hub, once per run,
    assert all(copy_sources(c) == ["@fake/spark-1=root@@fake/spark-1"] and "--hub" in c  # the other from it (the Hub last)
               for c in fetches(out, "spark-2"))
    rounds = [o for o in out["ops"] if "checkpoint fan-out" in o]
    assert len(rounds) == 2 and "Round 0" in rounds[0] and "Round 1" in rounds[1]  # one op per round, in order


def test_split_each_box_serves_its_own_coding_model(tmp_path):
    out = run_pair(tmp_path, "split", models="laguna-s-2.1,qwen3.8-27b")
    for h in PAIR:
        assert [r.split()[0] for r in rollouts(out, h)] == ["coder", "embed-qwen3", "embed-bge-m3"]
        assert not any(o.startswith("Two-Spark link") for o in ops(out, h))
    coder_op = next(n for n in out["op_names"] if any(x.startswith("vLLM services | Roll out vllm-coder") for x in n))
    assert sorted(coder_op) == ["vLLM services | Roll out vllm-coder.service (laguna-s-2.1)",
                                "vLLM services | Roll out vllm-coder.service (qwen3.8-27b)"]


def test_tensor_parallel_native_head_and_headless_worker(tmp_path):
    out = run_pair(tmp_path, "tensor-parallel")
    head, worker = rollouts(out, "spark-1"), rollouts(out, "spark-2")
    assert [r.split()[0] for r in head] == ["coder", "embed-qwen3", "embed-bge-m3"]
    assert [r.split()[0] for r in worker] == ["coder"] and "--kind none" in worker[0]  # headless, no API
    assert not any(o.startswith("TLS proxy") for o in ops(out, "spark-2"))  # only the head is behind the proxy
    assert any("netplan" in o for o in ops(out, "spark-1")) and any("netplan" in o for o in ops(out, "spark-2"))
    # checkpoints: the head downloads, the worker copies from it over the link (the Hub only if the head cannot)
    assert len(fetches(out, "spark-1")) == 5 and not any("--copy" in c for c in fetches(out, "spark-1"))
    assert len(fetches(out, "spark-2")) == 5
    assert all(copy_sources(c)[0] == "@fake/spark-1=root@192.168.100.10" for c in fetches(out, "spark-2"))
    order = out["ops"]
    worker_start = order.index("vLLM services | Start the rollout of vllm-coder.service (tensor-parallel worker, "
                               "qwen3.8-27b; follows the head)")
    head_rollout = order.index("vLLM services | Roll out vllm-coder.service (qwen3.8-27b)")
    worker_join = order.index("Tensor-parallel unit | Tensor-parallel: the worker's vllm-coder ends with the head's "
                              "result")
    assert worker_start < head_rollout < worker_join  # one unit: the worker waits for the head's verdict
    # the pair's link judged first, both boxes at once, one rank each (tasks/rollout.py link_before_swap)
    link_op = next(i for i, o in enumerate(order) if o.startswith("vLLM services | Judge the pair's link"))
    assert link_op < worker_start
    for rank, box in enumerate(PAIR):
        probe = [c for c in cmds(out, box) if "link_probe.py --rank" in c]
        assert len(probe) == 1 and f"--rank {rank} --world 2 --master 192.168.100.10" in probe[0], probe
    # the worker reads the head's status over the link with the pair's key; the head forces that read-only command,
    # and the worker the same for the head (its watchdog judges the pair as one unit), each from the other only
    peer = shlex.split(worker[0])
    status_cmd = shlex.split(peer[peer.index("--peer-status-cmd") + 1])
    assert status_cmd[:3] == ["ssh", "-i", "/root/.ssh/sparkctl-cx7-peer"] and "root@192.168.100.10" in status_cmd
    assert "--peer-status-cmd" not in head[0]
    for box, other in (("spark-1", "192.168.100.11,192.168.101.11"), ("spark-2", "192.168.100.10,192.168.101.10")):
        keys = [c for c in cmds(out, box) if "sparkctl-cx7-peer' >> /root/.ssh/authorized_keys" in c]
        assert len(keys) == 1 and f'restrict,from="{other}"' in keys[0] and "rollout.py status coder" in keys[0], keys
    rounds = [o for o in order if "checkpoint fan-out" in o]  # the head's downloads run before the worker's copies
    assert len(rounds) == 2 and rounds[0].startswith("Checkpoints | Round 0") and "from the Hub" in rounds[0]
    assert rounds[1].startswith("Checkpoints | Round 1")


def settings_pair(gx10_data, topo: str, backend: str = "native"):
    out = {}
    for h in PAIR:
        d = dict(gx10_data, SPARK_TOPOLOGY=topo, TP_BACKEND=backend)
        out[h] = validate(d, h, hosts=PAIR)
    return out


def env_of(s, svc):
    return {k: unescape_env_value(v) for k, v in (line.split("=", 1) for line in
            units.render_env(svc, s.cfg).splitlines() if line and not line.startswith("#"))}


def args_of(s, svc):
    return shlex.split(env_of(s, svc)["VLLM_ARGS"])


def test_tensor_parallel_unit_id_is_one_for_both_boxes_and_moves_with_either(gx10_data):
    s = settings_pair(gx10_data, "tensor-parallel")
    pair = [(s[h].coder, s[h].cfg) for h in PAIR]
    uid = units.tp_unit_id(pair)
    for h in PAIR:
        assert env_of(s[h], units.with_tp_unit(s[h].coder, uid))["SPARKCTL_TP_UNIT"] == uid
    # a change that only the worker's files see still changes the id, so the head rolls out with it
    worker = s["spark-2"].cfg
    other = changed(worker, VLLM_EXTRA_ENV={**worker.VLLM_EXTRA_ENV, "X": "1"})
    assert units.tp_unit_id([pair[0], (s["spark-2"].coder, other)]) != uid
    assert units.tp_unit_id(list(reversed(pair))) != uid  # rank order is part of it


def test_the_pairs_waits_cover_what_the_other_box_may_take(gx10_data):
    """The worker's transaction waits through the head's drain, its gate, a rollback's gate and the acceptance
    verdict; a pair restart through the other box's stop and gate. Each gate may be a cold start's, the longest
    (HEALTH_COLD_READY_TIMEOUT_S). Only the native backend runs a pair as one unit (with Ray the worker runs no vLLM
    service), and only tensor-parallel."""
    s = settings_pair(gx10_data, "tensor-parallel")
    cfg, role = s["spark-2"].cfg, s["spark-2"].role
    follow = link.peer_facts(cfg, role.head_address, "apply")
    assert follow["peer_timeout"] == \
        cfg.DRAIN_TIMEOUT_S + 2 * cfg.HEALTH_COLD_READY_TIMEOUT_S + cfg.ACCEPTANCE_VERDICT_TIMEOUT_S
    assert cfg.HEALTH_COLD_READY_TIMEOUT_S > cfg.HEALTH_READY_TIMEOUT_S
    no_verdict = link.peer_facts(changed(cfg, ACCEPTANCE_ENABLED=False), role.head_address, "apply")
    assert no_verdict["peer_timeout"] == follow["peer_timeout"] - cfg.ACCEPTANCE_VERDICT_TIMEOUT_S
    restart = link.peer_facts(cfg, role.head_address, "restart")
    assert restart["peer_timeout"] == cfg.SERVICE_STOP_TIMEOUT_S + cfg.HEALTH_COLD_READY_TIMEOUT_S
    # a cold deadline set below the warm one is read as the warm one (the box does the same)
    short = link.peer_facts(changed(cfg, HEALTH_COLD_READY_TIMEOUT_S=1), role.head_address, "restart")
    assert short["peer_timeout"] == cfg.SERVICE_STOP_TIMEOUT_S + cfg.HEALTH_READY_TIMEOUT_S
    assert follow["peer_status_cmd"] == restart["peer_status_cmd"] == link.peer_status_command(cfg, role.head_address)
    assert link.native_pair(cfg, role)
    assert not link.native_pair(settings_pair(gx10_data, "tensor-parallel", backend="ray")["spark-2"].cfg, role)
    replicas = settings_pair(gx10_data, "replicas")["spark-2"]
    assert not link.native_pair(replicas.cfg, replicas.role)


def test_tensor_parallel_flags_and_nccl_environment(gx10_data):
    s = settings_pair(gx10_data, "tensor-parallel")
    head, worker = args_of(s["spark-1"], s["spark-1"].coder), args_of(s["spark-2"], s["spark-2"].coder)
    for a, rank in ((head, "0"), (worker, "1")):
        assert a[a.index("--tensor-parallel-size") + 1] == "2" and a[a.index("--nnodes") + 1] == "2"
        assert a[a.index("--node-rank") + 1] == rank
        assert a[a.index("--master-addr") + 1] == "192.168.100.10"  # the head's CX7 address
    assert "--headless" in worker and "--headless" not in head
    assert [svc.name for svc in s["spark-2"].services] == ["coder"]
    env = env_of(s["spark-2"], s["spark-2"].coder)
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == env["TP_SOCKET_IFNAME"] == "enp1s0f1np1"
    assert env["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"  # both twins
    assert env["VLLM_HOST_IP"] == "192.168.100.11"
    for topo in ("replicas", "split"):
        for h, st in settings_pair(gx10_data, topo).items():
            e = env_of(st, st.coder)
            assert "NCCL_SOCKET_IFNAME" not in e and e["VLLM_HOST_IP"] == "127.0.0.1"
            assert "--nnodes" not in args_of(st, st.coder)


LINK_SETTINGS = {"RDMA_DEVICES": ["char-infiniband_verbs", "char-other"], "TP_MEMLOCK": "64M",
                 "NCCL_IB_GID_INDEX": 3, "NCCL_SYSTEM_LIBRARY": "/usr/lib/aarch64-linux-gnu/libnccl.so.2"}


def test_the_pairs_engines_get_the_link_as_nccl_needs_it(gx10_data):
    """The coder on head and worker: the verbs devices, LimitMEMLOCK, both twins, a GID index and the system NCCL
    when set (neither by default: NCCL picks the GID, vLLM torch's NCCL)."""
    s = settings_pair(gx10_data, "tensor-parallel")
    for h in PAIR:
        unit = units.render_unit(s[h].coder, s[h].cfg).splitlines()
        assert "DeviceAllow=char-infiniband_verbs rw" in unit and "LimitMEMLOCK=infinity" in unit
        env = env_of(s[h], s[h].coder)
        assert env["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1" and env["NCCL_IB_DISABLE"] == "0"
        assert "NCCL_IB_GID_INDEX" not in env and "VLLM_NCCL_SO_PATH" not in env
        assert all("LimitMEMLOCK" not in units.render_unit(e, s[h].cfg) for e in s[h].embedders)
    s = settings_pair({**gx10_data, **LINK_SETTINGS}, "tensor-parallel")
    env = env_of(s["spark-2"], s["spark-2"].coder)
    assert env["NCCL_IB_GID_INDEX"] == "3" and env["VLLM_NCCL_SO_PATH"] == LINK_SETTINGS["NCCL_SYSTEM_LIBRARY"]
    unit = units.render_unit(s["spark-2"].coder, s["spark-2"].cfg).splitlines()
    assert {"DeviceAllow=char-other rw", "LimitMEMLOCK=64M"} <= set(unit)


def test_the_netplan_file_gives_both_twins_the_mtu(gx10_data):
    import yaml

    from sparkctl.render import box_files

    s = settings_pair(gx10_data, "tensor-parallel")["spark-1"]
    twins = yaml.safe_load(box_files.netplan(s.cfg, "spark-1"))["network"]["ethernets"]
    assert {name: t["mtu"] for name, t in twins.items()} == {"enp1s0f1np1": 9000, "enP2p1s0f1np1": 9000}
    twins = yaml.safe_load(box_files.netplan(changed(s.cfg, CX7_MTU=0), "spark-1"))["network"]["ethernets"]
    assert all("mtu" not in t for t in twins.values())  # 0: the interfaces keep their own


@pytest.mark.parametrize("topo", ["replicas", "split"])
def test_replicas_and_split_render_as_without_the_link_settings(gx10_data, topo):
    """A rerun on boxes that are no pair restarts nothing: their units and env files do not see the link's
    settings (the pair's engines only), so they render byte for byte as with none of them set."""
    plain = {**gx10_data, "RDMA_DEVICES": [], "TP_MEMLOCK": "", "CX7_MTU": 0}
    for h, st in settings_pair({**gx10_data, **LINK_SETTINGS}, topo).items():
        other = settings_pair(plain, topo)[h]
        for svc, was in zip(st.services, other.services):
            assert units.render_unit(svc, st.cfg) == units.render_unit(was, other.cfg)
            assert units.render_env(svc, st.cfg) == units.render_env(was, other.cfg)
            assert "LimitMEMLOCK" not in units.render_unit(svc, st.cfg)


def test_tensor_parallel_ray_backend(gx10_data):
    s = settings_pair(gx10_data, "tensor-parallel", backend="ray")
    head = args_of(s["spark-1"], s["spark-1"].coder)
    assert head[head.index("--distributed-executor-backend") + 1] == "ray" and "--nnodes" not in head
    assert s["spark-2"].services == []  # the worker's GPU joins through `ray start`, no vLLM of its own
    assert s["spark-1"].role.env["RAY_memory_monitor_refresh_ms"] == "0"


def test_tensor_parallel_needs_two_hosts_and_a_valid_head(gx10_data):
    with pytest.raises(SettingError, match="two hosts"):
        validate(dict(gx10_data, SPARK_TOPOLOGY="tensor-parallel"), "spark-1", hosts=["spark-1"])
    with pytest.raises(SettingError, match="TP_HEAD"):
        validate(dict(gx10_data, SPARK_TOPOLOGY="tensor-parallel", TP_HEAD="spark-9"), "spark-1", hosts=PAIR)
    with pytest.raises(SettingError, match="TP_BACKEND = 'mpi' is not valid; expected 'native' or 'ray'"):
        validate(dict(gx10_data, SPARK_TOPOLOGY="tensor-parallel", TP_BACKEND="mpi"), "spark-1", hosts=PAIR)


def test_gateway_handoff_and_kubernetes_manifests(gx10_data, tmp_path):
    import kubernetes_validate

    st = settings_pair(gx10_data, "split")
    st["spark-1"] = validate(dict(gx10_data, SPARK_TOPOLOGY="split", CODING_MODEL="laguna-s-2.1"), "spark-1",
                             hosts=PAIR)
    merged = {}
    for i, h in enumerate(PAIR):
        entries = [gateway.entry(h, f"10.0.0.{i + 1}", 443, svc) for svc in st[h].services]
        merged = gateway.merge(merged, h, entries, PAIR, "split", "/ca.pem")
    assert [e["model"] for e in merged["models"]["coder"]] == ["laguna-s-2.1", "qwen3.8-27b"]
    assert merged["models"]["embed-qwen3"][1]["base_url"] == "https://10.0.0.2:443/embed-qwen3/v1"
    docs = gateway.manifests(merged, "carouter")
    kinds = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert ("Service", "spark-coder-laguna-s-2-1") in kinds and ("Service", "spark-coder-qwen3-8-27b") in kinds
    gateway.validate_manifests(docs, "1.30")  # real schema check
    bad = json.loads(json.dumps(docs))
    bad[1]["endpoints"][0]["addresses"] = "10.0.0.1"  # not a list
    with pytest.raises(kubernetes_validate.ValidationError):
        gateway.validate_manifests(bad, "1.30")
    dropped = gateway.merge(merged, "spark-1", [], ["spark-1"], "replicas", None)  # spark-2 left the inventory
    assert all(e["box"] != "spark-2" for items in dropped["models"].values() for e in items)
    ep, k8s = gateway.write(tmp_path, merged, docs)
    assert json.loads(ep.read_text())["schema"] == "sparkctl.endpoints/1" and "EndpointSlice" in k8s.read_text()


def test_a_pairs_link_below_the_floor_leaves_both_boxes_serving_and_fails_them_naming_the_figure(tmp_path,
                                                                                                 monkeypatch):
    """The whole deploy with the link probe answering 5.2 GB/s on both ranks (LINK_MIN_BUSBW_GBPS = 15): neither box's
    coder transaction starts (no `rollout.py apply coder`: nothing drained, stopped or installed), the head's
    embedders still roll out, and the health step fails both boxes with the measured figure and the setting."""
    monkeypatch.setenv("FAKE_LINK_BUSBW", "5.2")
    out = run_pair(tmp_path, "tensor-parallel")
    assert [r.split()[0] for r in rollouts(out, "spark-1")] == ["embed-qwen3", "embed-bge-m3"]
    assert rollouts(out, "spark-2") == []
    assert all(any("link_probe.py --rank" in c for c in cmds(out, box)) for box in PAIR)
    assert sorted(out["failed_hosts"]) == [f"@fake/{b}" for b in PAIR]
    assert "busbw 5.20 GB/s (below the floor)" in out["log"] and "LINK_MIN_BUSBW_GBPS = 15 GB/s" in out["log"]
    assert "link was judged before its swap and refused" in out["log"]


def test_a_tensor_parallel_pool_in_a_fleet_deploys_its_pair_and_leaves_the_other_box_alone(tmp_path, monkeypatch):
    """FLEET_POOLS: spark-1 + spark-2 a tensor-parallel pair, spark-3 Laguna alone. The pair is deployed as the
    two-box topology deploys it (head behind the proxy, headless worker copying over the link), each box letting in
    only its own peer over the link; spark-3 gets no link, no peer key, and its own model."""
    monkeypatch.setenv("FAKE_POOLS", json.dumps({"pair": {"model": "qwen3.8-27b", "boxes": 2, "tensor_parallel": True},
                                                 "laguna": {"model": "laguna-s-2.1", "boxes": 1}}))
    out = run_pair(tmp_path, "replicas", hosts="3")
    assert [r.split()[0] for r in rollouts(out, "spark-1")] == ["coder", "embed-qwen3", "embed-bge-m3"]
    worker = rollouts(out, "spark-2")
    assert [r.split()[0] for r in worker] == ["coder"] and "--kind none" in worker[0]
    # checkpoints: each from the Hub once (spark-1), the worker over the link, spark-3 from a box that has them
    assert not any("--copy" in c for c in fetches(out, "spark-1"))
    assert all(copy_sources(c)[0] == "@fake/spark-1=root@192.168.100.10" for c in fetches(out, "spark-2"))
    assert all(copy_sources(c)[0] in ("@fake/spark-1=root@@fake/spark-1", "@fake/spark-2=root@@fake/spark-2")
               for c in fetches(out, "spark-3"))
    assert [len(fetches(out, f"spark-{i}")) for i in (1, 2, 3)] == [5, 3, 5]  # the worker: what its part keeps
    for box, other in (("spark-1", "192.168.100.11,192.168.101.11"), ("spark-2", "192.168.100.10,192.168.101.10")):
        keys = [c for c in cmds(out, box) if "sparkctl-cx7-peer' >> /root/.ssh/authorized_keys" in c]
        assert len(keys) == 1 and f'restrict,from="{other}"' in keys[0], keys  # never spark-3's address
    alone = rollouts(out, "spark-3")
    assert [r.split()[0] for r in alone] == ["coder", "embed-qwen3", "embed-bge-m3"]
    assert not any(o.startswith("Two-Spark link") for o in ops(out, "spark-3"))
    assert "--served laguna " in alone[0] and "--served coder " in rollouts(out, "spark-1")[0]
