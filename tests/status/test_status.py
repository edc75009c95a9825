"""`sparkctl status`: the box-side probe (run for real against a stand-in vLLM and rendered env files, through
the same `python3 -` pipe ssh uses), and the table / JSON rendered from a recorded box report."""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest

from sparkctl.config.hosts import HostConn
from sparkctl.render import units
from sparkctl.status import cli, fleet
from tests.conftest import FAKE_LOCK
from tests.render.test_render import settings_for

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


class LocalHost(HostConn):
    """The ssh round trip without ssh: the same remote command, run by a local shell."""

    def ssh_argv(self, command=None):
        return ["sh", "-c", command]


@pytest.fixture
def box(gx10_data, tmp_path):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandinVllm)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    data = dict(gx10_data, MODEL_LOCK_FILE=FAKE_LOCK, CODER_PORT=srv.server_address[1],
                ENV_DIR=str(tmp_path / "env"), STATE_DIR=str(tmp_path / "state"))
    (tmp_path / "env").mkdir()
    (tmp_path / "state" / "rollout").mkdir(parents=True)
    s = settings_for(data)
    for svc in s.services:
        (tmp_path / "env" / svc.env_file).write_text(units.render_env(svc, s.cfg))
    (tmp_path / "state" / "rollout" / "r.json").write_text('{"outcome": "applied", "service": "coder"}')
    yield s.cfg
    srv.shutdown()


def test_probe_reads_the_box_in_one_round_trip(box):
    t0 = time.monotonic()
    report = fleet.ask(LocalHost(name="spark-1", address="127.0.0.1"), box)
    assert time.monotonic() - t0 < 2.0 and "error" not in report, report
    coder = report["services"]["coder"]
    assert (coder["served"], coder["model"], coder["health"], coder["vllm_version"]) == \
        ("coder", box.CODING_MODEL, 200, "0.32.0")
    assert coder["metrics"] == {"running": 2.0, "waiting": 0.0, "kv_usage": 0.25}
    assert report["services"]["embed-qwen3"]["health"] == 0  # nothing listens on its port here
    assert report["rollout"]["rollout/r.json"]["data"] == {"outcome": "applied", "service": "coder"}
    assert report["mem_available_bytes"] > 0
    rows = fleet.rows("spark-1", report)
    assert rows[0]["service"] == "coder" and rows[0]["kv_usage_pct"] == 25.0 and rows[0]["running"] == 2.0


def test_unreachable_box_is_reported_not_raised(box):
    class Dead(HostConn):
        def ssh_argv(self, command=None):
            return ["sh", "-c", "echo 'ssh: connect to host 10.9.9.9 port 22: No route to host' >&2; exit 255"]

    report = fleet.ask(Dead(name="spark-9", address="10.9.9.9"), box)
    assert report["error"] == "ssh: connect to host 10.9.9.9 port 22: No route to host"


def test_table_from_a_recorded_report():
    rows = fleet.rows("spark-1", REPORT)
    result = {"schema": "sparkctl.status/1", "boxes": {
        "spark-1": {"error": None, "probe_s": 0.41, "last_rollout": fleet.last_rollout(REPORT), "services": rows},
        "spark-2": {"error": "no answer over ssh within 10 s (STATUS_SSH_TIMEOUT_S)", "probe_s": None,
                    "last_rollout": None, "services": []}}}
    text = cli.render(result)
    assert "spark-1: MemAvailable 40 GiB, certificate expires in 20 days" in text
    coder_line = next(line for line in text.splitlines() if "│ coder " in line)
    for cell in ("qwen3.8-27b", "0f66df5b339e", "0.32.0", "Tue 2026-12-01 08:02:11 UTC", "healthy", "42.3",
                 "2 restarts"):
        assert cell in coder_line, (cell, coder_line)
    embed_line = next(line for line in text.splitlines() if "│ embed-qwen3 " in line)
    assert "NO (failed)" in embed_line and "3 restarts, GAVE UP" in embed_line
    assert 'last rollout (rollout/result.json, 2026-12-01 07:26:40 UTC): {"candidate": "laguna-s-2.1", ' \
           '"result": "rolled_back"}' in text
    assert "spark-2: UNREACHABLE: no answer over ssh" in text
    assert json.loads(json.dumps(result))["boxes"]["spark-1"]["services"][1]["watchdog_gave_up"] is True


def test_status_command_is_registered_and_exits_nonzero_when_something_is_wrong(monkeypatch, capsys):
    from sparkctl import __main__ as main
    monkeypatch.setattr("sparkctl.config.hosts.configured_hosts", lambda: [HostConn(name="spark-1", address="x")])
    monkeypatch.setattr(fleet, "ask_all", lambda hosts, d: {"spark-1": REPORT})
    assert main.main(["status", "--json"]) == 1  # embed-qwen3 is down and the watchdog gave up on it
    out = json.loads(capsys.readouterr().out)
    assert out["schema"] == "sparkctl.status/1" and len(out["boxes"]["spark-1"]["services"]) == 2
