"""Monitoring on the box (issue 11): the rendered units pass systemd-analyze verify, the GPU/box facts scripts
write what node exporter's textfile collector reads (checked with prometheus_client's parser) from the GB10
stand-in's answers, and the deploy installs node exporter on loopback without the scrape token in a command."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkctl.box import box_textfile, gpu_textfile
from sparkctl.config import pki
from sparkctl.errors import SettingError
from sparkctl.render import monitoring as mon
from sparkctl.sim.config import STANDINS
from tests.deploy.test_deploy_fake import changes, run_fake
from tests.render.test_render import (
    needs_systemd_analyze,
    settings_for,
    systemd_root,
    verify,
)

SMI = str(STANDINS / "nvidia-smi")


def samples(text: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


@pytest.fixture
def fake_engine():
    """A process whose command line reads like vLLM's engine core (the stand-in lists such processes)."""
    p = subprocess.Popen(["bash", "-c", "exec -a VLLM::EngineCore sleep 60"])
    time.sleep(0.2)
    yield p
    p.kill()
    p.wait()


def test_gpu_textfile_from_the_gb10_standin(tmp_path, fake_engine):
    out = tmp_path / "sparkctl_gpu.prom"
    r = subprocess.run([sys.executable, "sparkctl/box/gpu_textfile.py", "--out", str(out), "--nvidia-smi", SMI],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = samples(out.read_text())
    assert got["sparkctl_gpu_facts_ok"][0].value == 1
    assert got["sparkctl_gpu_temperature_celsius"][0].value == 42
    assert got["sparkctl_gpu_power_watts"][0].value == 11
    assert got["sparkctl_gpu_sm_clock_hertz"][0].value == 2418e6
    assert got["sparkctl_gpu_utilization_ratio"][0].value == 0
    procs = {s.labels["pid"]: s for s in got["sparkctl_gpu_process_memory_bytes"]}
    assert str(fake_engine.pid) in procs and procs[str(fake_engine.pid)].labels["process"] == "VLLM::EngineCore"
    assert procs[str(fake_engine.pid)].value > 0
    assert not [p for p in tmp_path.iterdir() if p.name != out.name]  # the temporary file was renamed away


def test_gpu_textfile_leaves_out_na_fields_and_survives_a_missing_nvidia_smi(tmp_path):
    exp = gpu_textfile.collect(str(tmp_path / "no-such-nvidia-smi"))
    got = samples(exp.text())
    assert got["sparkctl_gpu_facts_ok"][0].value == 0 and "sparkctl_gpu_temperature_celsius" not in got
    assert gpu_textfile.number("[N/A]") is None and gpu_textfile.number("[Not Supported]") is None


def test_unit_of_reads_the_cgroup(tmp_path):
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text("0::/system.slice/vllm-coder.service\n")
    assert gpu_textfile.unit_of("42", str(tmp_path)) == "vllm-coder.service"
    assert gpu_textfile.unit_of("43", str(tmp_path)) == ""


def test_box_textfile_store_cert_and_rollout(tmp_path):
    cert, _key, _ca = pki.ensure_server_cert(tmp_path / "pki", "b", ["10.0.0.5"])
    ro = tmp_path / "rollout"
    ro.mkdir()
    got = samples(box_textfile.collect(str(tmp_path), str(cert), str(ro)).text())
    assert got["sparkctl_model_store_free_bytes"][0].value > 0
    assert got["sparkctl_tls_cert_expiry_timestamp_seconds"][0].value > time.time() + 86400
    assert "sparkctl_rollout_last_ok" not in got  # no rollout recorded yet: nothing to alert on
    # what rollout_txn.py leaves: one result per service, plus an open transaction's state and failure records
    (ro / "vllm-embed-qwen3.result.json").write_text(json.dumps({"outcome": "unchanged", "rc": 0}))
    (ro / "vllm-coder.result.json").write_text(json.dumps({"outcome": "rolled-back", "rc": 3}))
    (ro / "vllm-coder.txn").mkdir()
    (ro / "vllm-coder.txn" / "state.json").write_text(json.dumps({"phase": "draining"}))
    (ro / "vllm-coder.failed").mkdir()
    (ro / "vllm-coder.failed" / "abc.json").write_text(json.dumps({"why": "not ready"}))
    got = samples(box_textfile.collect(str(tmp_path), str(cert), str(ro)).text())
    by_unit = {s.labels["unit"]: s for s in got["sparkctl_rollout_last_ok"]}
    assert set(by_unit) == {"vllm-coder.service", "vllm-embed-qwen3.service"}
    assert (by_unit["vllm-coder.service"].value, by_unit["vllm-coder.service"].labels["result"]) == (0, "rolled-back")
    assert by_unit["vllm-embed-qwen3.service"].value == 1
    (ro / "vllm-coder.result.json").write_text("{not json")  # being rewritten: skipped, not a failure
    got = samples(box_textfile.collect(str(tmp_path), str(cert), str(ro)).text())
    assert [s.labels["unit"] for s in got["sparkctl_rollout_last_ok"]] == ["vllm-embed-qwen3.service"]


@needs_systemd_analyze
@pytest.mark.parametrize("groups", [["all", "gx10"], ["all", "gx10", "sim"]])
def test_monitoring_units_pass_systemd_analyze_verify(groups, token_file, tmp_path):
    from sparkctl.config import groupdata
    from tests.conftest import FAKE_LOCK
    data = groupdata.load(groups)
    data.update(MODEL_LOCK_FILE=FAKE_LOCK, SECRETS_DIR=str(tmp_path))
    rendered = {mon.FACTS_UNIT: mon.facts_service(data, "/etc/nginx/sparkctl-tls/server.pem"),
                mon.FACTS_TIMER: mon.facts_timer(data), mon.WATCHDOG_UNIT: mon.watchdog_service(data)}
    root = systemd_root(tmp_path, rendered, [mon.BOX_PYTHON])
    for unit in rendered:
        rc, out = verify(root, unit)
        assert (rc, out) == (0, ""), f"{unit}: {out}"
    broken = systemd_root(tmp_path / "b", {mon.FACTS_TIMER: rendered[mon.FACTS_TIMER].replace("OnBootSec", "OnBoot")},
                          [mon.BOX_PYTHON])
    assert verify(broken, mon.FACTS_TIMER) != (0, "")  # the check is real


def test_node_exporter_binds_loopback_with_the_memory_collectors(gx10_data):
    text = mon.node_exporter_defaults(gx10_data)
    args = text.split('ARGS="', 1)[1].split('"', 1)[0].split()
    assert f"--web.listen-address=127.0.0.1:{gx10_data['NODE_EXPORTER_PORT']}" in args
    assert {"--collector.meminfo", "--collector.pressure", "--collector.textfile"} <= set(args)
    assert f"--collector.textfile.directory={gx10_data['TEXTFILE_DIR']}" in args


def test_watchdog_config_and_scrape_targets_refuse_bad_settings(gx10_data):
    s = settings_for(gx10_data)
    cfg = json.loads(mon.watchdog_config(gx10_data, s.services))
    assert [x["unit"] for x in cfg["services"]] == [svc.unit for svc in s.services]
    with pytest.raises(SettingError, match="WATCHDOG_STALL_S"):
        mon.watchdog_config({**gx10_data, "WATCHDOG_STALL_S": 0}, s.services)
    with pytest.raises(SettingError, match="WATCHDOG_RESTART_COMMAND"):
        mon.watchdog_config({**gx10_data, "WATCHDOG_RESTART_COMMAND": "systemctl restart"}, s.services)
    with pytest.raises(SettingError, match="SCRAPE_NODE_PATH"):
        mon.scrape_targets({**gx10_data, "SCRAPE_NODE_PATH": "coder"}, s.services)


def test_deploy_installs_node_exporter_after_its_loopback_arguments(tmp_path):
    out = run_fake("dgx", tmp_path)
    ops = out["ops"]
    assert ops.index("Monitoring | node exporter: loopback, meminfo + pressure + textfile collectors") < \
        ops.index("Monitoring | Install prometheus-node-exporter")
    assert "TLS proxy | Bearer tokens for the proxy: API and scrape (root-only)" in ops  # the scrape token's map
    cmds = changes(out)
    assert any("apt-get" in c and "install" in c and "prometheus-node-exporter" in c for c in cmds)
    assert not any("fake-scrape-token" in c for c in out["commands"])  # the token never appears in a command


def test_missing_scrape_token_fails_before_any_change(tmp_path):
    out = run_fake("dgx", tmp_path, scrape_token=False)
    assert changes(out) == [] and "SPARK_SCRAPE_TOKEN_FILE" in f"{out['error']} {out['log']}", out["error"]


def test_scrape_token_must_differ_from_the_api_token(tmp_path):
    out = run_fake("dgx", tmp_path, scrape_token="fake-token")
    assert changes(out) == [] and "different from the API token" in f"{out['error']} {out['log']}"


def test_standin_answers_query_compute_apps_like_nvidia_smi(fake_engine):
    def smi(*args):
        return subprocess.run([sys.executable, SMI, *args], capture_output=True, text=True)

    r = smi("--query-compute-apps=pid,process_name,used_memory", "--format=csv")
    assert r.returncode == 0 and r.stdout.splitlines()[0] == "pid, process_name, used_memory [MiB]"
    row = next(line for line in r.stdout.splitlines() if line.startswith(f"{fake_engine.pid}, "))
    assert row.endswith(" MiB") and ", VLLM::EngineCore, " in row
    r = smi("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")
    assert any(line.startswith(f"{fake_engine.pid}, ") and line.split(", ")[1].isdigit()
               for line in r.stdout.splitlines())
    assert smi("--query-compute-apps=pid,bogus", "--format=csv").returncode == 2
    assert smi("--query-compute-apps=pid").returncode == 2  # no format, as the real one refuses


def test_uploaded_scripts_run_alone_with_the_system_python(tmp_path):
    """What the deploy uploads to SPARKCTL_HOME/bin is complete and stdlib-only: each monitoring script runs from
    there with the modules it shares with the rollout."""
    import shutil

    from sparkctl import REPO_ROOT
    from tasks.vllm import SHARED_SCRIPTS  # uploaded by the vLLM step, which runs before the monitoring step
    for script in (*mon.BOX_SCRIPTS, *SHARED_SCRIPTS):
        shutil.copy(REPO_ROOT / "sparkctl" / "box" / script, tmp_path / script)
    for script in mon.BOX_SCRIPTS:
        if script == "textfile.py":
            continue
        r = subprocess.run(["/usr/bin/python3", "-E", "-s", str(tmp_path / script), "--help"], capture_output=True,
                           text=True, cwd=tmp_path)
        assert r.returncode == 0 and "usage:" in r.stdout, (script, r.stderr)
