"""Monitoring on the box (issue 11): the rendered units pass systemd-analyze verify, the GPU/box facts scripts
write what node exporter's textfile collector reads (checked with prometheus_client's parser) from the GB10
stand-in's answers, and the deploy installs node exporter on loopback without the scrape token in a command.
Issue 20: the box facts say while a rollout or restart runs (and until when it may), read from what the real
box-side transaction leaves (tests/box/test_rollout_box.py's stand-in systemd and vLLM)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkctl import REPO_ROOT
from sparkctl.box import box_textfile, contract, gpu_textfile
from sparkctl.config import pki
from sparkctl.errors import SettingError
from sparkctl.render import monitoring as mon
from sparkctl.render import units
from sparkctl.sim.config import STANDINS
from tests.box.test_rollout_box import box  # noqa: F401  (the fixture)
from tests.conftest import API_TOKEN, SCRAPE_TOKEN, typed
from tests.deploy.test_deploy_fake import changes, run_fake
from tests.render.test_render import (
    needs_systemd_analyze,
    settings_for,
    standin_settings,
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
    cfg = typed(data)
    rendered = {mon.FACTS_UNIT: mon.facts_service(cfg, "/etc/nginx/sparkctl-tls/server.pem"),
                mon.FACTS_TIMER: mon.facts_timer(cfg), mon.WATCHDOG_UNIT: mon.watchdog_service(cfg)}
    root = systemd_root(tmp_path, rendered, [mon.BOX_PYTHON])
    for unit in rendered:
        rc, out = verify(root, unit)
        assert (rc, out) == (0, ""), f"{unit}: {out}"
    broken = systemd_root(tmp_path / "b", {mon.FACTS_TIMER: rendered[mon.FACTS_TIMER].replace("OnBootSec", "OnBoot")},
                          [mon.BOX_PYTHON])
    assert verify(broken, mon.FACTS_TIMER) != (0, "")  # the check is real


def test_node_exporter_binds_loopback_with_the_memory_collectors(gx10_data, gx10_cfg):
    text = mon.node_exporter_defaults(gx10_cfg)
    args = text.split('ARGS="', 1)[1].split('"', 1)[0].split()
    assert f"--web.listen-address=127.0.0.1:{gx10_data['NODE_EXPORTER_PORT']}" in args
    assert {"--collector.meminfo", "--collector.pressure", "--collector.textfile"} <= set(args)
    assert f"--collector.textfile.directory={gx10_data['TEXTFILE_DIR']}" in args


def test_watchdog_config_refuses_bad_settings(gx10_data):
    s = settings_for(gx10_data)
    cfg = json.loads(mon.watchdog_config(typed(gx10_data), s.services))
    assert [x["unit"] for x in cfg["services"]] == [svc.unit for svc in s.services]
    with pytest.raises(SettingError, match="WATCHDOG_STALL_S"):
        mon.watchdog_config(typed({**gx10_data, "WATCHDOG_STALL_S": 0}), s.services)
    with pytest.raises(SettingError, match="WATCHDOG_RESTART_COMMAND"):
        mon.watchdog_config(typed({**gx10_data, "WATCHDOG_RESTART_COMMAND": "systemctl restart"}), s.services)


def test_deploy_installs_node_exporter_after_its_loopback_arguments(tmp_path):
    out = run_fake("dgx", tmp_path)
    ops = out["ops"]
    assert ops.index("Monitoring | node exporter: loopback, meminfo + pressure + textfile collectors") < \
        ops.index("Monitoring | Install prometheus-node-exporter")
    assert "TLS proxy | Bearer tokens for the proxy: API and scrape (root-only)" in ops  # the scrape token's map
    cmds = changes(out)
    assert any("apt-get" in c and "install" in c and "prometheus-node-exporter" in c for c in cmds)
    assert not any(SCRAPE_TOKEN in c for c in out["commands"])  # the token never appears in a command


def test_missing_scrape_token_fails_before_any_change(tmp_path):
    out = run_fake("dgx", tmp_path, scrape_token=False)
    assert changes(out) == [] and "SPARK_SCRAPE_TOKEN_FILE" in f"{out['error']} {out['log']}", out["error"]


def test_scrape_token_must_differ_from_the_api_token(tmp_path):
    out = run_fake("dgx", tmp_path, scrape_token=API_TOKEN)
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
        if script in ("textfile.py", "watchdog_pair.py"):  # imported by the others, not run
            continue
        r = subprocess.run(["/usr/bin/python3", "-E", "-s", str(tmp_path / script), "--help"], capture_output=True,
                           text=True, cwd=tmp_path)
        assert r.returncode == 0 and "usage:" in r.stdout, (script, r.stderr)


# --- issue 20: a rollout in progress, and its deadline ---

READY_S, DRAIN_S = 600.0, 300.0  # the limits the facts unit passes (HEALTH_COLD_READY_TIMEOUT_S, DRAIN_TIMEOUT_S)


def stage_rendered(b, data: dict, model: str) -> str:
    """Stage the coder as the deploy does: the real env file for `model` (its served name in VLLM_ARGS) beside the
    stand-in unit; returns the served name the proxy's scrape path uses."""
    coder = settings_for(data, model).coder
    b.stage(model)
    (b.env_dir / "vllm-coder.env.next").write_text(units.render_env(coder, typed({**data, "CODING_MODEL": model})))
    return coder.served_name


def converge_rendered(b, data: dict, model: str) -> str:
    served = stage_rendered(b, data, model)
    r = b.run(txn=f"converge-{model}")
    assert r.returncode == 0, r.stdout + r.stderr
    (b.sd / "calls.log").unlink()  # count the stand-in's calls from here (kill_on counts them)
    return served


def facts_text(b, tmp_path) -> str:
    """box_textfile.py run as the facts unit runs it, with the stand-in systemctl on PATH."""
    out = tmp_path / "sparkctl_box.prom"
    r = subprocess.run([sys.executable, str(REPO_ROOT / "sparkctl/box/box_textfile.py"), "--out", str(out),
                        "--model-store", str(b.root), "--cert", str(b.root / "no-cert.pem"),
                        "--rollout-dir", str(b.state / "rollout"), "--env-dir", str(b.env_dir),
                        "--ready-timeout", str(READY_S), "--drain-timeout", str(DRAIN_S)],
                       env=b.environ, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return out.read_text()


def facts(b, tmp_path) -> dict[str, list]:
    return samples(facts_text(b, tmp_path))


def interrupted_flip(b, data: dict) -> None:
    """A committed coder, then a flip whose transaction died after installing the candidate: it stays open."""
    converge_rendered(b, data, "qwen3.8-27b")
    flip_dies_after_install(b, data)


def flip_dies_after_install(b, data: dict) -> None:
    stage_rendered(b, data, "laguna-s-2.1")
    b.kill_on("restart#1")
    b.run()


def progress(got: dict) -> tuple[dict, dict]:
    """(served -> in progress, served -> deadline) for the coder's unit."""
    flag = {s.labels["served"]: s.value for s in got["sparkctl_rollout_in_progress"]
            if s.labels["unit"] == "vllm-coder.service"}
    end = {s.labels["served"]: s.value for s in got.get("sparkctl_rollout_deadline_timestamp_seconds", [])}
    return flag, end


def test_a_deploy_transaction_is_in_progress_until_it_ends_even_across_an_interruption(box, gx10_data, tmp_path):
    served = converge_rendered(box, gx10_data, "qwen3.8-27b")
    assert progress(facts(box, tmp_path)) == ({served: 0}, {})  # committed: nothing runs, no deadline
    t0 = time.time()
    flip_dies_after_install(box, gx10_data)  # as when the box reboots mid-flip
    assert box.status()["phase"] == "started" and not box.status()["running"]
    flag, end = progress(facts(box, tmp_path))
    assert flag == {served: 1} and served == gx10_data["CODER_SERVED_NAME"]  # the name `up` carries as service
    assert int(t0) + DRAIN_S + READY_S <= end[served] <= time.time() + DRAIN_S + READY_S  # recorded start
    assert box.run(txn="t2").returncode == 0  # the next deploy resumes and commits it
    assert progress(facts(box, tmp_path)) == ({served: 0}, {})


def test_a_restart_through_the_transient_unit_is_in_progress_while_it_runs(box, gx10_data, tmp_path):
    served = converge_rendered(box, gx10_data, "qwen3.8-27b")
    (box.sd / "unready").write_text("qwen3.8-27b\n")  # its restart never gets ready: it gates for 4 s, then fails
    r = box.cli("restart", "coder", *box.args("restart", timeout=4), "--reason", "watchdog")
    assert r.returncode == 0, r.stderr
    t0 = time.time()
    assert box.status()["running"]  # sparkctl-rollout-coder.service (the stand-in's) runs the restart
    flag, end = progress(facts(box, tmp_path))
    assert flag == {served: 1} and t0 - 5 + DRAIN_S + READY_S <= end[served] <= time.time() + DRAIN_S + READY_S
    while box.status()["running"]:
        time.sleep(0.2)
    got = facts(box, tmp_path)
    assert progress(got) == ({served: 0}, {})
    assert [(s.labels["result"], s.value) for s in got["sparkctl_rollout_last_ok"]] == [("restart-failed", 0)]


def fake_systemctl(tmp_path, monkeypatch, props: str) -> None:
    """A `systemctl` on PATH that answers `show` with these properties for the coder's rollout unit."""
    (tmp_path / "bin").mkdir(exist_ok=True)
    tool = tmp_path / "bin" / "systemctl"
    tool.write_text(f"#!/bin/sh\nprintf 'Id=sparkctl-rollout-coder.service\\n{props}\\n'\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")


def test_the_start_is_systemds_and_a_verdict_wait_or_a_rollback_extends_the_deadline(tmp_path, monkeypatch):
    mono = int((time.monotonic() - 100) * 1e6)  # the unit became active 100 s ago (systemd: CLOCK_MONOTONIC, µs)
    fake_systemctl(tmp_path, monkeypatch, f"ActiveState=active\\nActiveEnterTimestampMonotonic={mono}")
    started = box_textfile.running_rollouts(["coder"])["coder"]
    assert abs(started - (time.time() - 100)) < 2
    fake_systemctl(tmp_path, monkeypatch, f"ActiveState=inactive\\nActiveEnterTimestampMonotonic={mono}")
    assert box_textfile.running_rollouts(["coder"]) == {}
    limits = box_textfile.Limits(str(tmp_path), READY_S, DRAIN_S)
    assert box_textfile.deadline(1000.0, {}, limits) == 1000 + DRAIN_S + READY_S
    waiting = {"phase": "awaiting-verdict", "verdict_deadline": 5000.0}
    assert box_textfile.deadline(1000.0, waiting, limits) == 5000.0
    rejected = {**waiting, "verdict": {"decision": "rollback", "by": "control"}}
    assert box_textfile.deadline(1000.0, rejected, limits) == 5000.0 + DRAIN_S + READY_S
    assert box_textfile.deadline(1000.0, {"phase": "rolling-back"}, limits) == 1000 + 2 * (DRAIN_S + READY_S)


def test_the_facts_unit_runs_box_textfile_with_arguments_it_accepts(gx10_data, tmp_path):
    """The rendered ExecStart, with the box's paths moved under tmp_path, runs the script as the timer would."""
    data = {**gx10_data, "TEXTFILE_DIR": str(tmp_path / "textfile"), "MODEL_STORE": str(tmp_path),
            "STATE_DIR": str(tmp_path / "state"), "ENV_DIR": str(tmp_path / "env")}
    for d in ("textfile", "state/rollout", "env"):
        (tmp_path / d).mkdir(parents=True)
    coder = standin_settings(data).coder
    (tmp_path / "env" / coder.env_file).write_text(units.render_env(coder, typed(data)))
    line = next(x for x in mon.facts_service(typed(data), str(tmp_path / "none.pem")).splitlines()
                if "box_textfile" in x)
    argv = shlex.split(line.split("=", 1)[1])
    argv[:2] = [sys.executable, str(REPO_ROOT / "sparkctl/box" / Path(argv[1]).name)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = samples((tmp_path / "textfile" / "sparkctl_box.prom").read_text())
    assert [(s.labels, s.value) for s in got["sparkctl_rollout_in_progress"]] == \
        [({"served": coder.served_name, "unit": coder.unit}, 0)]
    assert f"--ready-timeout {data['HEALTH_COLD_READY_TIMEOUT_S']} --drain-timeout {data['DRAIN_TIMEOUT_S']}" in line
    args = box_textfile.parser().parse_args(argv[2:])  # the flags rendered from the contract, read by its table
    assert (args.ready_timeout, args.drain_timeout, args.rollout_dir) == \
        (data["HEALTH_COLD_READY_TIMEOUT_S"], data["DRAIN_TIMEOUT_S"], contract.rollout_dir(data["STATE_DIR"]))
