"""Tensor-parallel over Ray (TP_BACKEND = "ray"): the Ray units run Ray from the coder's versioned venv, pass
systemd-analyze verify with the vLLM units' sandbox, bind the head's coder to its Ray head, and keep their venv
from being pruned."""

from __future__ import annotations

import re
import subprocess

import pytest

from sparkctl.check.validate import validate_host as validate
from sparkctl.config import groupdata
from sparkctl.render import device_check, ray, units
from tasks.services import venv_users
from tests.conftest import FAKE_LOCK, changed
from tests.render.test_render import needs_systemd_analyze, systemd_root, verify

PAIR = ["spark-1", "spark-2"]
GROUPS = [["all", "gx10"], ["all", "gx10", "sim"]]


def ray_pair(groups: list[str], tmp_path, **changes) -> dict:
    data = groupdata.load(groups)
    data.update(MODEL_LOCK_FILE=FAKE_LOCK, SECRETS_DIR=str(tmp_path), SPARK_TOPOLOGY="tensor-parallel",
                TP_BACKEND="ray", CX7_ADDRESSES={"spark-1": ["192.168.100.10/24", "192.168.101.10/24"],
                                                    "spark-2": ["192.168.100.11/24", "192.168.101.11/24"]},
                **changes)
    return {h: validate(dict(data), h, hosts=PAIR, read_secrets=False) for h in PAIR}


def service_section(text: str) -> dict[str, list[str]]:
    """[Service] directives as systemd reads them (repeated keys kept in order)."""
    out: dict[str, list[str]] = {}
    section = ""
    for line in text.splitlines():
        if line.startswith("["):
            section = line
        elif section == "[Service]" and "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            out.setdefault(key, []).append(value)
    return out


def exec_start(text: str) -> list[str]:
    return service_section(text)["ExecStart"][0].split()


def test_ray_runs_from_the_coders_versioned_venv_and_a_venv_change_is_a_unit_change(tmp_path):
    pair = ray_pair(["all", "gx10"], tmp_path)
    head, worker = pair["spark-1"], pair["spark-2"]
    venv = units.vllm_venv(head.cfg)
    head_unit = ray.render_unit(head.role, head.coder, head.cfg)
    worker_unit = ray.render_unit(worker.role, worker.coder, worker.cfg)
    assert exec_start(head_unit)[:3] == [f"{venv}/bin/ray", "start", "--block"]
    assert "--head" in exec_start(head_unit) and "--port=6379" in exec_start(head_unit)
    assert "--include-dashboard=true" in exec_start(head_unit)  # RAY_DASHBOARD; the simulated Spark's is off
    sim = ray_pair(["all", "gx10", "sim"], tmp_path)["spark-1"]
    assert "--include-dashboard=false" in exec_start(ray.render_unit(sim.role, sim.coder, sim.cfg))
    assert not any("dashboard" in a for a in exec_start(worker_unit))
    assert exec_start(worker_unit)[0] == f"{venv}/bin/ray"
    assert "--address=192.168.100.10:6379" in exec_start(worker_unit)  # the head's CX7 address
    assert "--node-ip-address=192.168.100.11" in exec_start(worker_unit)
    # the coder, whose actors Ray starts, names the same venv: Ray is installed into it, so it is a venv of its own
    assert units.render_unit(head.coder, head.cfg).count(f"{venv}/bin/vllm") == 1
    native = units.vllm_venv(changed(head.cfg, TP_BACKEND="native"))
    assert native != venv and units.vllm_venv(changed(head.cfg, SPARK_TOPOLOGY="replicas")) == native
    # a new Ray release is a new venv, hence a new Ray unit (restarted) and a new coder unit (rolled out)
    bumped = ray_pair(["all", "gx10"], tmp_path, RAY_VERSION="2.56.0")["spark-1"]
    assert units.vllm_venv(bumped.cfg) not in (venv, native)
    assert ray.render_unit(bumped.role, bumped.coder, bumped.cfg) != head_unit
    assert units.ray_requirement(bumped.cfg) == "ray[default]==2.56.0"


def test_the_head_vllm_joins_the_ray_head_and_ray_starts_its_actors_in_the_coders_environment(tmp_path):
    pair = ray_pair(["all", "gx10"], tmp_path)
    head = pair["spark-1"]
    coder_env = units.service_environment(head.coder, head.cfg)
    assert coder_env["RAY_ADDRESS"] == "192.168.100.10:6379"  # else ray.init would start a cluster of its own
    for s in pair.values():
        env = dict(v.strip('"').split("=", 1) for v in
                   service_section(ray.render_unit(s.role, s.coder, s.cfg))["Environment"])
        assert env["RAY_memory_monitor_refresh_ms"] == "0"
        assert env["NCCL_SOCKET_IFNAME"] == "enp1s0f1np1" and env["HF_HUB_OFFLINE"] == "1"
        assert "TMPDIR" not in env and "RAY_ADDRESS" not in env
    # the raylet's sockets live where the head's vLLM (another unit, its own private /tmp) can reach them
    head_unit = ray.render_unit(head.role, head.coder, head.cfg)
    assert f"--temp-dir={head.cfg.STATE_DIR}/ray" in exec_start(head_unit)
    assert service_section(units.render_unit(head.coder, head.cfg))["ReadWritePaths"] == [head.cfg.STATE_DIR]


def test_the_ray_units_carry_the_vllm_units_sandbox(tmp_path):
    for groups in GROUPS:
        s = ray_pair(groups, tmp_path)["spark-1"]
        vllm = service_section(units.render_unit(s.coder, s.cfg))
        ray_unit = service_section(ray.render_unit(s.role, s.coder, s.cfg))
        sandbox = {k: v for k, v in vllm.items() if k not in {
            "EnvironmentFile", "ExecStart", "KillSignal",  # vLLM's own start (SIGINT: vLLM loses SIGTERM at start-up)
            "RuntimeDirectory", "RuntimeDirectoryMode",  # vLLM's ZMQ sockets; Ray's are under STATE_DIR/ray
        }}
        # the simulated pool's admission and the page-cache eviction belong to a vLLM engine's start (the head's
        # coder unit), not Ray's
        pre = [v for v in sandbox.pop("ExecStartPre", []) if (not s.cfg.UNIFIED_MEMORY_STANDIN
               or s.cfg.UNIFIED_MEMORY_STANDIN not in v) and "/page_cache.py " not in v]
        if pre:
            sandbox["ExecStartPre"] = pre
        missing = {k: v for k, v in sandbox.items() if ray_unit.get(k) != v}
        assert missing == {}, missing
        # NCCL's RDMA devices and pinned memory in both (none on the simulated Spark: no HCAs, systemd's limit)
        memlock = ["infinity"] if groups[-1] == "gx10" else None
        assert ray_unit.get("LimitMEMLOCK") == vllm.get("LimitMEMLOCK") == memlock
        # both start after the GPU's preparation as root (VLLM_DEVICE_PREPARE), when the box has one
        wanted = [units.DEVICES_UNIT] if s.cfg.VLLM_DEVICE_PREPARE else []
        for text in (units.render_unit(s.coder, s.cfg), ray.render_unit(s.role, s.coder, s.cfg)):
            lines = device_check.unit_lines(text)
            for key in ("Wants", "After"):
                assert [v for k, v in lines if k == key and v == units.DEVICES_UNIT] == wanted, (key, lines)


@needs_systemd_analyze
@pytest.mark.parametrize("groups", GROUPS)
def test_ray_units_and_the_coder_dropin_pass_systemd_analyze_verify(groups, token_file, tmp_path):
    pair = ray_pair(groups, tmp_path)
    head, worker = pair["spark-1"], pair["spark-2"]
    rendered = {ray.HEAD_UNIT: ray.render_unit(head.role, head.coder, head.cfg),
                ray.WORKER_UNIT: ray.render_unit(worker.role, worker.coder, worker.cfg),
                head.coder.unit: units.render_unit(head.coder, head.cfg)}
    root = systemd_root(tmp_path, rendered, [ray.ray_bin(head.cfg), f"{units.vllm_venv(head.cfg)}/bin/vllm",
                                             "/bin/rm", f"{units.vllm_venv(head.cfg)}/bin/python"])
    dropin = root / ray.coder_dropin_path(head.coder).lstrip("/")
    dropin.parent.mkdir(parents=True)
    dropin.write_text(ray.render_coder_dropin())
    for unit in rendered:
        rc, out = verify(root, unit)
        assert (rc, out) == (0, ""), f"{unit}: {out}"  # warnings (unknown keys...) count as failures
    # verify read the drop-in with the coder's unit (so its clean pass above covers it): a bad key in it shows
    dropin.write_text(ray.render_coder_dropin().replace("Requires=", "Requirez="))
    rc, out = verify(root, head.coder.unit)
    assert "Unknown key" in out and "Requirez" in out, out
    for unit in (ray.HEAD_UNIT, ray.WORKER_UNIT):
        r = subprocess.run(["systemd-analyze", "security", "--offline=true", f"--root={root}", unit],
                           capture_output=True, text=True)
        exposure = float(re.search(r"Overall exposure level for \S+: ([0-9.]+)", r.stdout).group(1))
        print(f"{unit}: systemd-analyze security exposure {exposure}")
        assert exposure <= 3.0, r.stdout[-2000:]


def test_a_venv_a_ray_unit_runs_is_never_pruned(tmp_path):
    """The pruning reads ExecStart= of every unit its globs match: the Ray units' globs are among them (a Ray worker
    runs no vLLM unit, so its venv is named by its Ray unit alone)."""
    s = ray_pair(["all", "gx10"], tmp_path)["spark-2"]
    etc = tmp_path / "etc/systemd/system"
    etc.mkdir(parents=True)
    (etc / ray.WORKER_UNIT).write_text(ray.render_unit(s.role, s.coder, s.cfg))
    globs = [g.replace("/etc/systemd/system", str(etc)) for g in venv_users(s.cfg)]
    # the fact's own command (tasks/facts.py VenvsInUse), run here against the rendered unit
    from tasks.facts import VenvsInUse
    cmd = VenvsInUse().command(root=str(tmp_path / "venvs"), unit_globs=globs)
    out = subprocess.run(["sh", "-c", cmd.get_raw_value()], capture_output=True, text=True).stdout.splitlines()
    used = VenvsInUse().process(out)["used"]
    assert used == [ray.ray_bin(s.cfg)]


def test_the_deploy_runs_one_ray_unit_per_box_and_installs_ray_into_the_new_venv(tmp_path):
    from tests.render.test_topologies import cmds, ops, run_pair

    out = run_pair(tmp_path, "tensor-parallel", "--data", "TP_BACKEND=ray")
    head, worker = " ".join(cmds(out, "spark-1")), " ".join(cmds(out, "spark-2"))
    assert "systemctl start ray-head.service" in head and "ray-worker" not in head
    assert "systemctl start ray-worker.service" in worker and "ray-head" not in worker
    assert f"vllm-coder.service.d/{ray.COORDINATION_DROPIN}" in head  # only the head's coder is bound to Ray
    assert ray.COORDINATION_DROPIN not in worker
    for h in ("spark-1", "spark-2"):
        build = next(o for o in ops(out, h) if o.startswith("vLLM | Build"))
        venv = build.rsplit(" in ", 1)[1]
        assert any(f"{venv}/bin/python -m pip install" in c and "'ray[default]==2.55.1'" in c for c in cmds(out, h))
