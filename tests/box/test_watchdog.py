"""The liveness watchdog (sparkctl/box/watchdog.py) against a stand-in vLLM (/health, /metrics, /v1/completions
served over real HTTP on loopback) and a stand-in systemctl that records what it was asked: busy is never
restarted, wedged is, at most N times in the window, then the service is stopped and flagged."""

from __future__ import annotations

import http.server
import json
import threading
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkctl.box.watchdog import Watchdog, parse_metrics
from sparkctl.config import groupdata
from sparkctl.render import monitoring as mon
from tests.render.test_render import settings_for

METRICS = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="coder"}} {running}
vllm:num_requests_waiting{{engine="0",model_name="coder"}} {waiting}
vllm:generation_tokens_total{{engine="0",model_name="coder"}} {tokens}
vllm:prompt_tokens_total{{engine="0",model_name="coder"}} 0.0
vllm:iteration_tokens_total_count{{engine="0",model_name="coder"}} {steps}
"""


class Engine:
    """What the stand-in vLLM reports; tests change it between checks."""

    def __init__(self):
        self.health, self.running, self.waiting, self.tokens, self.steps = 200, 0, 0, 0.0, 0.0
        self.probe_delay_s = 0.0
        self.probes = 0


def standin_vllm(engine: Engine) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        def reply(self, code: int, body: str) -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                self.reply(engine.health, "")
            elif self.path == "/metrics":
                self.reply(200, METRICS.format(running=engine.running, waiting=engine.waiting, tokens=engine.tokens,
                                               steps=engine.steps))
            else:
                self.reply(404, "")

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            engine.probes += 1
            time.sleep(engine.probe_delay_s)
            engine.tokens += 1
            engine.steps += 1
            try:
                self.reply(200, json.dumps({"choices": [{"text": "x"}]}))
            except OSError:  # the watchdog gave up waiting and hung up
                pass

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


SYSTEMCTL = """#!/bin/sh
# STAND-IN for systemctl (tests/box/test_watchdog.py): records its arguments, changes nothing; `is-active` of a
# rollout transaction answers from a flag file (absent: no rollout running)
case "$1" in is-active) [ -e {log}.rollout ]; exit $? ;; esac
echo "$*" >> {log}
"""


@pytest.fixture
def setup(tmp_path):
    engine = Engine()
    srv = standin_vllm(engine)
    log = tmp_path / "systemctl.log"
    standin = tmp_path / "systemctl"
    standin.write_text(SYSTEMCTL.format(log=log))
    standin.chmod(0o755)
    cfg = {"interval_s": 1, "stall_s": 60, "probe_idle_s": 30, "probe_timeout_s": 0.5, "http_timeout_s": 2,
           "max_restarts": 3, "window_s": 6 * 3600, "restart_command": f"{standin} restart {{unit}}",
           "stop_command": f"{standin} stop {{unit}}",
           "rollout_active_command": f"{standin} is-active --quiet sparkctl-rollout-{{service}}.service",
           "state_file": str(tmp_path / "state" / "state.json"),
           "textfile": str(tmp_path / "sparkctl_watchdog.prom"),
           "services": [{"name": "coder", "unit": "vllm-coder.service", "kind": "chat", "served": "coder",
                         "url": f"http://127.0.0.1:{srv.server_address[1]}"}]}
    yield engine, cfg, log
    srv.shutdown()


def calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def metric(cfg: dict, name: str) -> float:
    text = Path(cfg["textfile"]).read_text()
    return next(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


def test_busy_engine_is_never_restarted(setup):
    engine, cfg, log = setup
    dog = Watchdog(cfg)
    engine.running, engine.waiting = 8, 4  # the bench's full load, and more queued
    for i in range(200):  # 200 checks ten seconds apart: far beyond stall_s, but every step moves a counter
        engine.steps += 1
        engine.tokens += 8
        assert dog.check_once(now=1000.0 + 10 * i)["coder"] == "busy"
    assert calls(log) == [] and metric(cfg, "sparkctl_watchdog_restarts_total") == 0


def test_slow_steps_within_stall_time_are_busy_not_wedged(setup):
    engine, cfg, log = setup
    dog = Watchdog(cfg)
    engine.running = 1  # a long prefill: one step every 50 s (< stall_s = 60)
    for i in range(20):
        if i % 5 == 0:
            engine.steps += 1
        assert dog.check_once(now=1000.0 + 10 * i)["coder"] == "busy"
    assert calls(log) == []


def test_pending_work_and_flat_counters_is_wedged_and_restarted(setup):
    engine, cfg, log = setup
    dog = Watchdog(cfg)
    engine.running, engine.waiting = 2, 1
    assert dog.check_once(now=1000.0)["coder"] == "busy"
    assert dog.check_once(now=1050.0)["coder"] == "busy"  # 50 s without a step: not yet
    assert dog.check_once(now=1061.0)["coder"] == "wedged"
    assert calls(log) == ["restart vllm-coder.service"]
    assert metric(cfg, "sparkctl_watchdog_restarts_total") == 1
    assert metric(cfg, "sparkctl_watchdog_gave_up") == 0


def test_a_service_its_rollout_owns_is_left_alone(setup):
    engine, cfg, log = setup
    dog = Watchdog(cfg)
    engine.running, engine.waiting = 2, 1  # flat counters with work pending: wedged, were it not for the rollout
    Path(f"{log}.rollout").touch()
    assert dog.check_once(now=1000.0)["coder"] == "rollout"
    assert dog.check_once(now=1100.0)["coder"] == "rollout"
    assert calls(log) == []
    Path(f"{log}.rollout").unlink()  # the transaction is done: judged afresh, the stall clock starts now
    assert dog.check_once(now=1110.0)["coder"] == "busy"
    assert dog.check_once(now=1171.0)["coder"] == "wedged"
    assert calls(log) == ["restart vllm-coder.service"]


def test_idle_engine_whose_probe_gets_no_token_is_wedged(setup):
    engine, cfg, log = setup
    dog = Watchdog(cfg)
    assert dog.check_once(now=1000.0)["coder"] == "idle"
    assert dog.check_once(now=1031.0)["coder"] == "idle" and engine.probes == 1  # the probe answered
    assert dog.check_once(now=1032.0)["coder"] == "busy"  # the probe's own token moved the counters
    engine.probe_delay_s = 2.0  # the engine stops answering (SIGSTOP'd engine core)
    assert dog.check_once(now=1070.0)["coder"] == "wedged"
    assert calls(log) == ["restart vllm-coder.service"]


def test_down_or_starting_is_left_to_systemd(setup):
    engine, cfg, log = setup
    dog = Watchdog(cfg)
    engine.health, engine.running = 503, 3
    for i in range(30):
        assert dog.check_once(now=1000.0 + 10 * i)["coder"] == "down"
    assert calls(log) == []


def test_gives_up_after_n_restarts_in_the_window_then_stops_and_flags(setup):
    engine, cfg, log = setup
    engine.running = 1
    t = 1000.0
    dog = Watchdog(cfg)
    for _ in range(cfg["max_restarts"] + 2):
        dog.check_once(now=t)
        dog.check_once(now=t + 61)  # wedged again after every restart
        dog = Watchdog(cfg)  # the history survives the watchdog's own restarts (state file)
        t += 600
    assert calls(log) == ["restart vllm-coder.service"] * 3 + ["stop vllm-coder.service"]
    assert metric(cfg, "sparkctl_watchdog_gave_up") == 1
    assert metric(cfg, "sparkctl_watchdog_restarts_in_window") == 3
    # a human starts it again and it serves: watched again, and with the window spent it is stopped at once
    engine.steps += 1
    dog.check_once(now=t)
    engine.steps += 1
    dog.check_once(now=t + 10)
    assert metric(cfg, "sparkctl_watchdog_gave_up") == 0
    dog.check_once(now=t + 71)  # wedges again: no restart left in the window, so stopped at once
    assert calls(log)[-1] == "stop vllm-coder.service" and metric(cfg, "sparkctl_watchdog_gave_up") == 1
    assert calls(log).count("restart vllm-coder.service") == 3
    # once the window has passed, restarts are allowed again
    later = t + cfg["window_s"] + 1
    engine.steps += 1
    dog.check_once(now=later)
    engine.steps += 1
    dog.check_once(now=later + 10)  # serving again: watched again
    dog.check_once(now=later + 71)
    assert calls(log)[-1] == "restart vllm-coder.service"


def test_parse_metrics_sums_engines_and_ignores_other_families():
    text = METRICS.format(running=1, waiting=2, tokens=5, steps=7) + \
        'vllm:num_requests_running{engine="1",model_name="coder"} 3\nvllm:other_total 99\n'
    assert parse_metrics(text) == ((7.0, 5.0, 0.0), 6.0)


def deployed_config(tmp_path, **overrides) -> tuple[dict, dict]:
    data = groupdata.load(["all", "gx10"])
    from tests.conftest import FAKE_LOCK
    data.update(MODEL_LOCK_FILE=FAKE_LOCK, SECRETS_DIR=str(tmp_path), **overrides)
    return data, json.loads(mon.watchdog_config(data, settings_for(data).services))


def test_deployed_configuration_drives_the_watchdog(token_file, tmp_path):
    data, cfg = deployed_config(tmp_path)
    assert cfg["stall_s"] == data["WATCHDOG_STALL_S"] and cfg["max_restarts"] == data["WATCHDOG_MAX_RESTARTS"]
    assert {s["url"] for s in cfg["services"]} == {f"http://127.0.0.1:{p}" for p in (8000, 8001, 8002)}
    # an operator's override in the old form still works: the placeholders are the watchdog's
    _, old = deployed_config(tmp_path, WATCHDOG_RESTART_COMMAND="systemctl restart {unit}")
    assert Watchdog(old).command(old["restart_command"], old["services"][0]) == ["systemctl", "restart",
                                                                               "vllm-coder.service"]


def test_the_default_restart_command_is_one_rollout_py_accepts(token_file, tmp_path, monkeypatch):
    """The rendered configuration's restart command, parsed by rollout.py's own argparse (rollout.main): the
    deploy's transaction unit, per-service port/served/kind, the rollout's limits from the settings, --wait."""
    import sys
    sys.path.insert(0, str(mon_box_dir()))
    import rollout

    data, cfg = deployed_config(tmp_path)
    dog = Watchdog(cfg)
    for svc in cfg["services"]:
        argv = dog.command(cfg["restart_command"], svc)
        at = argv.index(f"{data['SPARKCTL_HOME']}/bin/rollout.py")
        assert argv[:at] == ["/usr/bin/env", f"SPARKCTL_ENV_DIR={data['ENV_DIR']}",
                             f"SPARKCTL_STATE_DIR={data['STATE_DIR']}", f"SPARKCTL_DRAIN_DIR={data['DRAIN_DIR']}",
                             mon.BOX_PYTHON]  # the env prefix of tasks/services.py rollout_env
        got = []
        monkeypatch.setattr(rollout, "restart", lambda a: got.append(a) or 0)
        assert rollout.main(argv[at + 1:]) == 0
        a = got[0]
        assert (a.cmd, a.service, a.port, a.served, a.kind, a.reason, a.wait) == \
            ("restart", svc["name"], svc["port"], svc["served"], svc["kind"], "watchdog", True)
        assert (a.timeout, a.interval, a.journal, a.drain_timeout, a.retry_after, a.gate_max_tokens,
                a.gate_request_timeout) == (data["HEALTH_READY_TIMEOUT_S"], data["HEALTH_POLL_INTERVAL_S"],
                                            data["HEALTH_JOURNAL_LINES"], data["DRAIN_TIMEOUT_S"],
                                            data["DRAIN_RETRY_AFTER_S"], data["ROLLOUT_GATE_MAX_TOKENS"],
                                            data["ROLLOUT_GATE_REQUEST_TIMEOUT_S"])
        assert svc["url"].endswith(f":{svc['port']}")


def mon_box_dir() -> Path:
    from sparkctl import REPO_ROOT
    return REPO_ROOT / "sparkctl" / "box"


def test_the_watchdog_fills_exactly_the_placeholders_the_schema_allows():
    from sparkctl.box import watchdog
    from sparkctl.config import schema_types
    assert watchdog.PLACEHOLDERS == schema_types.WATCHDOG_PLACEHOLDERS


FAILING = """#!/bin/sh
# STAND-IN for `rollout.py restart ... --wait` whose restart does not come up again: exit 6 (restart-failed)
echo "restart $*" >> {log}
echo "rollout: vllm-coder.service does not come up again on its committed configuration" >&2
exit 6
"""


def test_a_restart_command_that_exits_non_zero_is_a_failed_restart_logged_counted_and_still_spent(setup, tmp_path,
                                                                                                  capsys):
    engine, cfg, log = setup
    failing = tmp_path / "rollout-restart"
    failing.write_text(FAILING.format(log=log))
    failing.chmod(0o755)
    cfg["restart_command"] = f"{failing} {{service}} --port {{port}} --wait"
    cfg["services"][0]["port"] = 8000
    engine.running = 1
    t, dog = 1000.0, Watchdog(cfg)
    for _ in range(cfg["max_restarts"] + 1):
        dog.check_once(now=t)
        dog.check_once(now=t + 61)
        t += 600
    out = capsys.readouterr().out
    assert "exited 6" in out and "does not come up again" in out and "the restart FAILED" in out
    assert calls(log) == ["restart coder --port 8000 --wait"] * 3 + ["stop vllm-coder.service"]  # gave up after 3
    assert metric(cfg, "sparkctl_watchdog_restart_failures_total") == 3
    assert metric(cfg, "sparkctl_watchdog_restarts_total") == 3 and metric(cfg, "sparkctl_watchdog_gave_up") == 1
    assert Watchdog(cfg).record("coder")["restart_failures_total"] == 3  # kept in the state file


def test_a_state_file_from_before_the_failure_counter_still_loads(setup):
    engine, cfg, log = setup
    Path(cfg["state_file"]).parent.mkdir(parents=True)
    Path(cfg["state_file"]).write_text(json.dumps({"coder": {"restarts": [], "restarts_total": 2, "gave_up": False}}))
    dog = Watchdog(cfg)
    dog.check_once(now=1000.0)
    assert metric(cfg, "sparkctl_watchdog_restarts_total") == 2
    assert metric(cfg, "sparkctl_watchdog_restart_failures_total") == 0


def test_a_restart_by_hand_runs_the_configured_command_and_counts_nothing(setup, tmp_path):
    """README: `watchdog.py --config ... --restart coder` runs exactly what a wedge would, with its exit code."""
    from sparkctl.box import watchdog

    engine, cfg, log = setup
    failing = tmp_path / "rollout-restart"
    failing.write_text(FAILING.format(log=log))
    failing.chmod(0o755)
    cfg.update(restart_command=f"{failing} {{service}} --port {{port}} {{limits}} --wait",
               rollout_limits=["--timeout", "1800"])
    cfg["services"][0]["port"] = 8000
    path = tmp_path / "watchdog.json"
    path.write_text(json.dumps(cfg))
    assert watchdog.main(["--config", str(path), "--restart", "coder"]) == 6
    assert calls(log) == ["restart coder --port 8000 --timeout 1800 --wait"]
    assert not Path(cfg["state_file"]).exists()  # not one of the watchdog's own restarts
    with pytest.raises(SystemExit):
        watchdog.main(["--config", str(path), "--restart", "nope"])
