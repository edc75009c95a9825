"""`sparkctl status`: the box-side probe (run for real against a stand-in vLLM and rendered env files, through
the same `python3 -` pipe ssh uses), and the table / JSON rendered from a recorded box report. The rollout files it
reads are the ones the real box-side transaction writes (tests/box/test_rollout_box.py's stand-in box), including
an open transaction's state holding the acceptance probe's key, which status must never show."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from sparkctl.config.hosts import HostConn
from sparkctl.render import units
from sparkctl.status import cli, fleet
from tests.box.test_rollout_box import box  # noqa: F401  (the fixture: the real rollout on a stand-in box)
from tests.box.test_rollout_verdict import finish, start, until_waiting, verdict
from tests.conftest import FAKE_LOCK, typed
from tests.render.test_render import standin_settings

REPORT = json.loads(open("tests/fixtures/status/spark-1.json").read())


class StandinVllm(http.server.BaseHTTPRequestHandler):
    """STAND-IN for a vLLM on loopback: /health, /version, /metrics."""

    def do_GET(self):
        body = {"/health": "", "/version": '{"version": "0.32.0"}',
                "/metrics": 'vllm:num_requests_running{engine="0",model_name="coder"} 2.0\n'
                            'vllm:num_requests_waiting{engine="0",model_name="coder"} 0.0\n'
                            'vllm:kv_cache_usage_perc{engine="0",model_name="coder"} 0.25\n'}.get(self.path)
        self.send_response(404 if body is None else 200)
        data = (body or "").encode()
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


ROUND_TRIPS: list[str] = []  # every remote command a LocalHost was asked to run


class LocalHost(HostConn):
    """The ssh round trip without ssh: the same remote command, run by a local shell."""

    def ssh_argv(self, command=None):
        ROUND_TRIPS.append(command)
        return ["sh", "-c", command]


@pytest.fixture
def rendered_box(gx10_data, tmp_path):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandinVllm)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    data = dict(gx10_data, MODEL_LOCK_FILE=FAKE_LOCK, CODER_PORT=srv.server_address[1],
                ENV_DIR=str(tmp_path / "env"), STATE_DIR=str(tmp_path / "state"))
    (tmp_path / "env").mkdir()
    (tmp_path / "state" / "rollout").mkdir(parents=True)
    s = standin_settings(data)
    for svc in s.services:
        (tmp_path / "env" / svc.env_file).write_text(units.render_env(svc, s.cfg))
    yield s.cfg
    srv.shutdown()


def test_probe_reads_the_box_in_one_round_trip(rendered_box):
    ROUND_TRIPS.clear()
    report = fleet.ask(LocalHost(name="spark-1", address="127.0.0.1"), rendered_box)
    assert len(ROUND_TRIPS) == 1 and "error" not in report, report  # counted, not timed (a loaded machine is slow)
    coder = report["services"]["coder"]
    assert (coder["served"], coder["model"], coder["health"], coder["vllm_version"]) == \
        ("coder", rendered_box.CODING_MODEL, 200, "0.32.0")
    assert coder["metrics"] == {"running": 2.0, "waiting": 0.0, "kv_usage": 0.25}
    assert report["services"]["embed-qwen3"]["health"] == 0  # nothing listens on its port here
    assert report["last_rollouts"] == {} and coder["rollout_running"] is False  # nothing rolled out yet
    assert report["mem_available_bytes"] > 0
    rows = fleet.rows("spark-1", report)
    assert rows[0]["service"] == "coder" and rows[0]["kv_usage_pct"] == 25.0 and rows[0]["running"] == 2.0


def test_unreachable_box_is_reported_not_raised(rendered_box):
    class Dead(HostConn):
        def ssh_argv(self, command=None):
            return ["sh", "-c", "echo 'ssh: connect to host 10.9.9.9 port 22: No route to host' >&2; exit 255"]

    report = fleet.ask(Dead(name="spark-9", address="10.9.9.9"), rendered_box)
    assert report["error"] == "ssh: connect to host 10.9.9.9 port 22: No route to host"


def recorded_result() -> dict:
    rows = fleet.rows("spark-1", REPORT)
    return {"schema": "sparkctl.status/2", "boxes": {
        "spark-1": {"error": None, "probe_s": 0.41, "last_rollouts": REPORT["last_rollouts"], "services": rows},
        "spark-2": {"error": "no answer over ssh within 10 s (STATUS_SSH_TIMEOUT_S)", "probe_s": None,
                    "last_rollouts": {}, "services": []}}}


def test_table_from_a_recorded_report():
    result = recorded_result()
    text = cli.render(result)
    assert "spark-1: MemAvailable 40 GiB, certificate expires in 20 days" in text
    coder_line = next(line for line in text.splitlines() if "│ coder " in line)
    for cell in ("qwen3.8-27b", "0f66df5b339e", "0.32.0", "Tue 2026-12-01 08:02:11 UTC", "healthy", "42.3",
                 "2 restarts"):
        assert cell in coder_line, (cell, coder_line)
    embed_line = next(line for line in text.splitlines() if "│ embed-qwen3 " in line)
    assert "NO (failed)" in embed_line and "3 restarts, GAVE UP" in embed_line
    assert "spark-1: a rollout or restart of coder is running now" in text
    assert "spark-1: last rollout of coder (rollout/vllm-coder.result.json, 2026-12-01 07:26:40 UTC): rolled-back " \
           "(transaction 20261201T072612Z-4242): rollout: ROLLED BACK vllm-coder.service to qwen3.8-27b" in text
    assert "spark-1: last rollout of embed-qwen3 (rollout/vllm-embed-qwen3.result.json, 2026-11-30 00:53:20 UTC): " \
           "restart-failed (transaction 20261130T004310Z-977-restart, asked by watchdog): rollout: " \
           "vllm-embed-qwen3.service does not come up again" in text
    assert "stand-in journal line" not in text  # the first line of a message; --json has the whole result
    assert "spark-2: UNREACHABLE: no answer over ssh" in text
    assert json.loads(json.dumps(result))["boxes"]["spark-1"]["services"][1]["watchdog_gave_up"] is True


def test_the_recorded_report_holds_results_in_the_shape_the_box_writes(box):  # noqa: F811
    """The recorded results are what rollout_txn.py / rollout_restart.py write for those outcomes, key for key."""
    box.converge("qwen")
    box.break_model("laguna")
    box.stage("laguna")
    assert box.run(txn="t1").returncode == 3
    rolled_back = box.result()
    (box.sd / "unready").write_text("qwen\n")
    assert box.run("--restart-only", "--reason", "watchdog", txn="r1", timeout=1).returncode == 6
    restart_failed = box.result()
    for service, real in (("coder", rolled_back), ("embed-qwen3", restart_failed)):
        recorded = REPORT["last_rollouts"][service]
        assert recorded["file"] == f"rollout/vllm-{service}.result.json"
        assert sorted(recorded["data"]) == sorted(real) and recorded["data"]["outcome"] == real["outcome"]


def test_status_shows_each_services_result_never_a_waiting_transactions_probe_key(box, gx10_data):  # noqa: F811
    """A transaction waiting for its acceptance verdict holds the probe's key in its state file, the newest JSON
    under the rollout state; status reads the service's result file (the previous rollout) and nothing else."""
    box.converge("qwen")
    box.stage("laguna")
    proc = start(box)
    try:
        key = until_waiting(box, proc)["probe_key"]
        state, result_file = box.txn_dir() / "state.json", box.state / "rollout" / "vllm-coder.result.json"
        assert key and key in state.read_text() and state.stat().st_mtime >= result_file.stat().st_mtime
        data = dict(gx10_data, ENV_DIR=str(box.env_dir), STATE_DIR=str(box.state))
        result = fleet.status([LocalHost(name="spark-1", address="127.0.0.1")], typed(data))
        text, as_json = cli.render(result), json.dumps(result)
        assert key not in text and key not in as_json
        ro = result["boxes"]["spark-1"]["last_rollouts"]
        assert list(ro) == ["coder"] and ro["coder"]["file"] == "rollout/vllm-coder.result.json"
        assert ro["coder"]["data"] == box.result() and ro["coder"]["data"]["txn"] == "converge-qwen"
        assert "last rollout of coder (rollout/vllm-coder.result.json, " in text and ": ready (transaction " \
            "converge-qwen): rollout: vllm-coder.service serves qwen" in text
    finally:
        verdict(box, "v1", "commit")
        assert finish(proc)[0] == 0


def test_status_command_is_registered_and_exits_nonzero_when_something_is_wrong(monkeypatch, capsys):
    from sparkctl import __main__ as main
    monkeypatch.setattr("sparkctl.config.hosts.configured_hosts", lambda: [HostConn(name="spark-1", address="x")])
    monkeypatch.setattr(fleet, "ask_all", lambda hosts, d: {"spark-1": REPORT})
    assert main.main(["status", "--json"]) == 1  # embed-qwen3 is down and the watchdog gave up on it
    out = json.loads(capsys.readouterr().out)
    assert out["schema"] == "sparkctl.status/2" and len(out["boxes"]["spark-1"]["services"]) == 2


def test_a_retired_box_says_so_and_its_stopped_services_are_not_an_outage(box, gx10_data, monkeypatch):  # noqa: F811
    """After the real retire script ran on the stand-in box, status reads its marker: the table says RETIRED and how
    the box comes back, and `status` exits 0 for its stopped coder (the same stopped coder without the marker: 1)."""
    from tests.box.test_retire_box import retire, serving_box
    serving_box(box)
    assert retire(box, txn="r7").returncode == 0
    data = dict(gx10_data, ENV_DIR=str(box.env_dir), STATE_DIR=str(box.state))
    result = fleet.status([LocalHost(name="spark-3", address="127.0.0.1")], typed(data))
    spark3 = result["boxes"]["spark-3"]
    assert spark3["retired"]["txn"] == "r7" and spark3["services"][0]["healthy"] is False
    text = cli.render(result)
    assert f"spark-3: RETIRED at {spark3['retired']['at']} (transaction r7): its services are stopped on purpose; " \
           "`pyinfra inventory.py deploy.py --limit spark-3` brings it back" in text
    assert not cli.unwell(spark3) and cli.unwell({**spark3, "retired": None})
    assert cli.unwell({**spark3, "error": "no answer over ssh within 10 s (STATUS_SSH_TIMEOUT_S)"})
