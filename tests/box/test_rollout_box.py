"""The box-side rollout transaction (sparkctl/box/rollout*.py) against stand-in systemd tools on PATH
(tests/standins/systemd.py) and a stand-in vLLM HTTP endpoint: every path, interruptions, stale state."""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import socket
import ssl
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from sparkctl import REPO_ROOT
from sparkctl.box import contract
from sparkctl.config import groupdata

ROLLOUT = REPO_ROOT / "sparkctl" / "box" / "rollout.py"
FAKE = REPO_ROOT / "tests" / "standins" / "systemd.py"
# the settings the box is told (contract.SETTINGS) from the real group data, with the waits shortened for tests
FAST = {**{name: groupdata.load(["all"])[name] for name in contract.SETTINGS}, "HEALTH_READY_TIMEOUT_S": 5,
        "HEALTH_COLD_READY_TIMEOUT_S": 5, "HEALTH_STALL_S": 1, "HEALTH_POLL_INTERVAL_S": 0.1,
        "HEALTH_JOURNAL_LINES": 5, "DRAIN_TIMEOUT_S": 5, "DRAIN_RETRY_AFTER_S": 7, "ROUTER_OUT_WAIT_S": 0}


class Endpoint(http.server.BaseHTTPRequestHandler):
    """Stand-in vLLM: /v1/models, /v1/completions, /v1/embeddings, /metrics from the fake systemd's files."""

    sd: Path

    def log_message(self, *args):
        pass

    def _serving(self) -> dict:
        try:
            st = json.loads((self.sd / "serving.json").read_text())
        except (FileNotFoundError, ValueError):
            return {"up": False}
        return {**st, "up": True} if st.get("ready_at") and time.time() >= st["ready_at"] else st

    def _send(self, code: int, body: bytes, ctype="application/json"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/metrics":
            busy, running_for = self.sd / "running_until", self.sd / "running_for"
            if running_for.exists():  # seconds from the first look at /metrics (a drain's first poll)
                busy.write_text(str(time.time() + float(running_for.read_text())))
                running_for.unlink()
            n = 2 if busy.exists() and time.time() < float(busy.read_text()) else 0
            return self._send(200, f'vllm:num_requests_running{{engine="0"}} {n}.0\n'
                                   f'vllm:num_requests_waiting{{engine="0"}} 0.0\n'.encode(), "text/plain")
        if not self._serving()["up"]:
            return self._send(503, b"{}")
        self._send(200, json.dumps({"data": [{"id": "coder"}]}).encode())

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not self._serving()["up"]:
            return self._send(503, b"{}")
        self._send(200, json.dumps({"choices": [{"text": " return a + b"}]}).encode())


class Box:
    def __init__(self, root: Path, port: int):
        self.root, self.port = root, port
        self.sd, self.env_dir, self.units = root / "fake", root / "etc", root / "systemd"
        self.state, self.drain = root / "state", root / "drain"
        self.bin, self.venv = root / "bin", root / "venv"
        for d in (self.sd, self.env_dir, self.units, self.state, self.drain, self.bin, self.venv / "bin"):
            d.mkdir(parents=True, exist_ok=True)
        (self.venv / "bin" / "vllm").write_text("#!/bin/sh\n")
        for tool in ("systemctl", "systemd-run", "journalctl"):
            (self.bin / tool).write_text(f"#!{sys.executable}\nimport runpy\n"
                                         f"runpy.run_path({str(FAKE)!r}, {{'TOOL': {tool!r}}}, '__main__')\n")
            (self.bin / tool).chmod(0o755)
        self.environ = {**os.environ, "PATH": f"{self.bin}:{os.environ['PATH']}", "FAKE_SD": str(self.sd),
                        "SPARKCTL_ENV_DIR": str(self.env_dir), "SPARKCTL_UNIT_DIR": str(self.units),
                        "SPARKCTL_STATE_DIR": str(self.state), "SPARKCTL_DRAIN_DIR": str(self.drain)}

    # --- what the deploy does ---
    def stage(self, model: str, unit_extra: str = "", headless: bool = False) -> None:
        args = "x --headless" if headless else "x"  # a tensor-parallel worker's engine serves no API
        (self.env_dir / "vllm-coder.env.next").write_text(f"SPARKCTL_MODEL={model}\nVLLM_ARGS=\"{args}\"\n")
        (self.env_dir / "vllm-coder.service.next").write_text(
            f"[Service]\nEnvironmentFile={self.env_dir}/vllm-coder.env\n"
            f"ExecStart={self.venv}/bin/vllm serve $VLLM_ARGS\n{unit_extra}")

    def args(self, command: str = "apply", **kw) -> list[str]:
        """The options of `rollout.py command coder`, rendered as the deploy renders them (contract.argv) from FAST;
        kw, by flag name ("drain-timeout"=5), overrides a setting's value or gives a fact (port, kind, ...)."""
        given = {k.replace("-", "_"): v for k, v in kw.items()}
        setting_of = {a.dest: a.setting for a in contract.args_of(command) if a.setting}
        settings = {**FAST, **{setting_of[k]: v for k, v in given.items() if k in setting_of}}
        facts = {"port": self.port, "served": "coder", "kind": "chat",
                 **{k: v for k, v in given.items() if k not in setting_of}}
        return contract.argv(command, settings, service="coder", **facts)[2:]

    def run(self, *extra: str, txn="t1", **kw) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(ROLLOUT), "run", "coder", "--txn", txn, *self.args(**kw), *extra],
                              env=self.environ, capture_output=True, text=True, timeout=60)

    def cli(self, *argv: str, **popen) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(ROLLOUT), *argv], env=self.environ, capture_output=True,
                              text=True, timeout=60, **popen)

    # --- what is on the box ---
    def live_model(self) -> str:
        env = self.env_dir / "vllm-coder.env"
        return env.read_text().splitlines()[0].split("=", 1)[1] if env.exists() else ""

    def serving(self) -> dict:
        return json.loads((self.sd / "serving.json").read_text())

    def calls(self) -> list[str]:
        log = self.sd / "calls.log"
        return log.read_text().splitlines() if log.exists() else []

    def result(self) -> dict:
        return json.loads((self.state / "rollout" / "vllm-coder.result.json").read_text())

    def txn_dir(self) -> Path:
        return self.state / "rollout" / "vllm-coder.txn"

    def status(self) -> dict:
        r = self.cli("status", "coder")
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["coder"]

    def break_model(self, *models: str) -> None:
        (self.sd / "broken").write_text("\n".join(models) + "\n")

    def kill_on(self, what: str) -> None:
        (self.sd / "kill_on").write_text(what)

    def converge(self, model: str) -> None:
        self.stage(model)
        r = self.run(txn=f"converge-{model}")
        assert r.returncode == 0, r.stdout + r.stderr
        (self.sd / "calls.log").unlink()


@pytest.fixture
def box(tmp_path):
    handler = type("H", (Endpoint,), {"sd": tmp_path / "fake"})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield Box(tmp_path, server.server_address[1])
    server.shutdown()


def restarts(b: Box) -> int:
    return sum(1 for c in b.calls() if c.startswith("restart"))


def test_first_install_commits_and_a_rerun_changes_nothing(box):
    box.stage("qwen")
    r = box.run()
    assert r.returncode == 0, r.stdout
    assert box.live_model() == "qwen" and box.serving() == {"up": True, "model": "qwen"}
    assert box.result()["outcome"] == "ready" and not box.txn_dir().exists()  # snapshot dropped on commit
    st = box.status()
    assert st["applied"] == st["wanted"] and st["active"] and st["failed"] is None
    # nothing was serving: nothing to drain, but it stays out of the routers until it is committed
    assert [c for c in box.calls() if "nginx" in c] == ["reload nginx.service"] * 2
    assert not (box.drain / "coder.unready.conf").exists() and not (box.drain / "coder.conf").exists()
    n = restarts(box)
    assert box.run(txn="t2").returncode == 0 and restarts(box) == n and box.result()["outcome"] == "unchanged"


def test_forward_ok_drains_waits_for_running_requests_then_reopens(box):
    box.converge("qwen")
    (box.sd / "running_for").write_text("1.5")  # two requests finish 1.5 s after the drain begins
    box.stage("laguna")
    r = box.run()
    assert r.returncode == 0, r.stdout
    assert box.live_model() == "laguna"
    calls = box.calls()
    assert calls.index("reload nginx.service") < calls.index("restart vllm-coder.service")  # drained first
    assert calls.count("reload nginx.service") == 3  # out of the routers, closed, then opened again
    assert not (box.drain / "coder.conf").exists() and not (box.drain / "coder.unready.conf").exists()
    assert box.result()["drain_s"] >= 1.0 and "request(s) still running" in r.stdout
    assert (box.state / "rollout" / "vllm-coder.stamp").read_text().strip() == box.status()["wanted"]


def test_drain_file_answers_503_with_retry_after_while_the_service_restarts(box):
    box.converge("qwen")
    box.stage("laguna")
    box.kill_on("restart#1")  # freeze the box mid-flip to look at the proxy's drain file
    box.run()
    text = (box.drain / "coder.conf").read_text()
    assert "return 503" in text and "add_header Retry-After 7 always;" in text


def test_forward_fails_rolls_back_to_exactly_the_snapshot_and_remembers_the_candidate(box):
    box.converge("qwen")
    unit_before = (box.units / "vllm-coder.service").read_text()
    box.break_model("broken")
    box.stage("broken", unit_extra="# a unit change that travels with it\n")
    r = box.run()
    assert r.returncode == 3, r.stdout
    assert "ROLLED BACK vllm-coder.service to qwen" in r.stdout and "stand-in journal line" in r.stdout
    assert box.live_model() == "qwen" and box.serving()["up"]
    assert (box.units / "vllm-coder.service").read_text() == unit_before  # the unit rolled back too
    st = box.status()
    assert st["failed"]["why"] and st["failed"]["model"] == "broken" and st["applied"] != st["wanted"]
    assert not (box.drain / "coder.conf").exists() and not box.txn_dir().exists()
    # the same candidate again: nothing restarts, one line says when it failed and how to retry on purpose
    n = restarts(box)
    r = box.run(txn="t2")
    assert r.returncode == 7 and restarts(box) == n
    assert "failed at" in r.stdout and "ROLLOUT_RETRY_FAILED=True" in r.stdout
    # retrying on purpose tries it for real; a changed candidate is tried as new
    assert box.run("--retry-failed", txn="t3").returncode == 3 and restarts(box) == n + 2
    box.break_model()
    box.stage("broken", unit_extra="# fixed\n")
    assert box.run(txn="t4").returncode == 0 and box.live_model() == "broken"


def test_rollback_that_fails_too_says_so(box):
    box.converge("qwen")
    box.break_model("broken", "qwen")  # the previous model cannot start any more either
    box.stage("broken")
    r = box.run()
    assert r.returncode == 4 and "ALSO FAILED" in r.stdout
    assert box.live_model() == "qwen" and box.result()["outcome"] == "rollback-failed"
    assert not (box.drain / "coder.conf").exists()


def test_nothing_to_roll_back_to_removes_the_failed_first_install(box):
    box.break_model("broken")
    box.stage("broken")
    r = box.run()
    assert r.returncode == contract.code(contract.NO_PREVIOUS) and "no previous configuration" in r.stdout
    assert box.result()["outcome"] == contract.NO_PREVIOUS
    assert not (box.units / "vllm-coder.service").exists() and not (box.env_dir / "vllm-coder.env").exists()
    assert "stop vllm-coder.service" in box.calls()


def test_nothing_staged_touches_nothing(box):
    assert box.run().returncode == contract.code(contract.NOTHING_STAGED) and box.calls() == []
    assert box.result()["outcome"] == contract.NOTHING_STAGED


def test_missing_venv_is_rejected_before_anything_stops(box):
    box.converge("qwen")
    box.stage("laguna")
    text = (box.env_dir / "vllm-coder.service.next").read_text().replace(str(box.venv), str(box.root / "nope"))
    (box.env_dir / "vllm-coder.service.next").write_text(text)
    r = box.run()
    assert r.returncode == 5 and "missing" in r.stdout and box.calls() == [] and box.live_model() == "qwen"


@pytest.mark.parametrize("kill_on, phase", [("reload#1", "prepared"), ("reload#2", "draining"),
                                            ("daemon-reload#1", "installed"),
                                            ("restart#1", "started")])
def test_interrupted_forward_step_resumes_from_its_snapshot(box, kill_on, phase):
    box.converge("qwen")
    (box.sd / "running_until").write_text(str(time.time() + 0.3))
    box.stage("laguna")
    box.kill_on(kill_on)
    assert box.run().returncode != 0
    state = json.loads((box.txn_dir() / "state.json").read_text())
    assert state["phase"] == phase and (box.txn_dir() / "env").read_text().startswith("SPARKCTL_MODEL=qwen")
    assert box.status()["phase"] == phase
    r = box.run(txn="t2")  # the next run resumes: the snapshot (qwen) stays the known-good state
    assert r.returncode == 0 and "resuming" in r.stdout and box.live_model() == "laguna"
    assert not box.txn_dir().exists() and not (box.drain / "coder.conf").exists()
    assert not (box.drain / "coder.unready.conf").exists()  # the resumed run let the routers back in


def test_interrupted_forward_step_of_a_broken_candidate_rolls_back_to_the_snapshot_not_a_leftover(box):
    box.converge("qwen")
    box.stage("broken")
    box.break_model("broken")
    box.kill_on("restart#1")  # killed after the broken candidate was installed, before the gate
    box.run()
    assert box.live_model() == "broken"
    box.stage("laguna")  # meanwhile the operator staged something else; it too fails
    box.break_model("broken", "laguna")
    r = box.run(txn="t2")
    assert r.returncode == 3 and box.live_model() == "qwen"  # the last known-good, not the un-gated leftover


def test_interrupted_rollback_is_finished_by_the_next_run(box):
    box.converge("qwen")
    box.break_model("broken")
    box.stage("broken")
    box.kill_on("restart#2")  # the rollback's restart
    box.run()
    assert json.loads((box.txn_dir() / "state.json").read_text())["phase"] == "rolling-back"
    r = box.run(txn="t2")
    assert r.returncode == 3 and "resuming the interrupted rollback" in r.stdout and box.live_model() == "qwen"
    assert box.status()["failed"]["model"] == "broken"


def test_interrupted_after_commit_only_cleans_up(box):
    box.converge("qwen")
    (box.sd / "running_until").write_text(str(time.time() + 0.2))
    box.stage("laguna")
    box.kill_on("reload#3")  # reopening the proxy, after the stamp was written
    box.run()
    n = restarts(box)
    r = box.run(txn="t2")
    assert r.returncode == 0 and restarts(box) == n and not (box.drain / "coder.conf").exists()
    assert box.status()["applied"] == box.status()["wanted"]


def test_a_stale_temp_file_is_never_restored(box):
    box.converge("qwen")
    (box.env_dir / ".vllm-coder.env.tmp-1").write_text("SPARKCTL_MODEL=junk\n")  # an interrupted atomic write
    box.break_model("broken")
    box.stage("broken")
    assert box.run().returncode == 3 and box.live_model() == "qwen"
    box.break_model()
    box.stage("laguna")
    assert box.run(txn="t2").returncode == 0 and box.live_model() == "laguna"


def test_half_written_snapshot_is_discarded(box):
    box.converge("qwen")
    box.txn_dir().mkdir()
    (box.txn_dir() / "env").write_text("SPARKCTL_MODEL=half\n")  # no state.json: the snapshot never completed
    box.break_model("broken")
    box.stage("broken")
    assert box.run().returncode == 3 and box.live_model() == "qwen"


def test_closed_stdout_and_stderr_do_not_stop_the_rollback(box):
    box.converge("qwen")
    box.break_model("broken")
    box.stage("broken")
    r, w = os.pipe()
    os.close(r)  # the reader (the deploy's ssh channel) is gone: every write gets EPIPE
    proc = subprocess.run([sys.executable, str(ROLLOUT), "run", "coder", "--txn", "t1", *box.args()],
                          env=box.environ, stdout=w, stderr=w, timeout=60)
    os.close(w)
    assert proc.returncode == 3 and box.live_model() == "qwen" and box.serving()["up"]
    box.break_model()
    box.stage("laguna")
    proc = subprocess.run([sys.executable, str(ROLLOUT), "run", "coder", "--txn", "t2", *box.args()],
                          env=box.environ, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60,
                          preexec_fn=lambda: (os.close(1), os.close(2)))
    assert proc.returncode == 0 and box.live_model() == "laguna"
    assert "serves laguna" in (box.state / "rollout" / "vllm-coder.log").read_text()


def test_apply_detaches_follow_reports_and_a_second_apply_attaches(box):
    box.converge("qwen")
    (box.sd / "running_until").write_text(str(time.time() + 2))
    box.stage("laguna")
    first = json.loads(box.cli("apply", "coder", *box.args()).stdout)
    assert first["attached"] is False
    second = json.loads(box.cli("apply", "coder", *box.args()).stdout)
    assert second == {"txn": first["txn"], "attached": True}  # one transaction, not two
    assert sum(1 for c in box.calls() if c.startswith("systemd-run")) == 1
    st = json.loads(box.cli("follow", "coder", "--txn", first["txn"]).stdout.splitlines()[-1][3:])
    assert st["running"] and not st["done"]
    r = box.cli("follow", "coder", "--txn", first["txn"], "--wait")
    assert r.returncode == 0 and "serves laguna" in r.stdout and "draining" in r.stdout
    assert box.live_model() == "laguna"


def test_killing_the_follower_changes_nothing_on_the_box(box):
    box.converge("qwen")
    box.break_model("broken")
    (box.sd / "running_until").write_text(str(time.time() + 1))
    box.stage("broken")
    txn = json.loads(box.cli("apply", "coder", *box.args()).stdout)["txn"]
    follower = subprocess.Popen([sys.executable, str(ROLLOUT), "follow", "coder", "--txn", txn, "--wait"],
                                env=box.environ, stdout=subprocess.PIPE)
    time.sleep(0.3)
    follower.kill()  # the control side is gone
    follower.wait()
    deadline = time.time() + 30
    while box.status()["running"]:
        assert time.time() < deadline
        time.sleep(0.2)
    assert box.result()["txn"] == txn and box.result()["outcome"] == "rolled-back" and box.live_model() == "qwen"
    st = box.status()  # what the next deploy reads
    assert st["failed"]["model"] == "broken" and st["last"]["outcome"] == "rolled-back"


@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx not installed (apt-get install nginx-light)")
def test_real_nginx_answers_503_with_retry_after_while_drained_and_reopens(box, gx10_data, tmp_path):
    """The real site template, the real nginx, the box's drain file: 503 + Retry-After, token still required."""
    from tests.render.test_render import TOKEN, render_proxy_site, standin_settings

    sys.path.insert(0, str(ROLLOUT.parent))
    import drain

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        proxy_port = s.getsockname()[1]
    data = {**gx10_data, "PROXY_PORT": proxy_port, "CODER_PORT": box.port, "DRAIN_DIR": str(box.drain)}
    site = render_proxy_site(data, standin_settings(data), tmp_path).replace("listen [::]:", "# listen [::]:")
    prefix = tmp_path / "nginx"
    prefix.mkdir()
    conf = prefix / "nginx.conf"
    conf.write_text(f"pid {prefix}/nginx.pid;\nerror_log {prefix}/error.log;\nevents {{}}\nhttp {{\n"
                    f"    access_log off;\n    include {tmp_path}/site.conf;\n}}\n")
    (tmp_path / "site.conf").write_text(site)
    nginx = ["nginx", "-p", str(prefix), "-c", str(conf)]
    subprocess.run(nginx, check=True, capture_output=True)
    reload = lambda: (subprocess.run([*nginx, "-s", "reload"], check=True), time.sleep(0.5))  # noqa: E731
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    url = f"https://127.0.0.1:{proxy_port}/coder/v1/models"

    def get(token=TOKEN, **headers):
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}", **headers})
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
                return r.status, r.headers
        except urllib.error.HTTPError as e:
            return e.code, e.headers

    try:
        (box.sd / "serving.json").write_text('{"up": true, "model": "qwen"}')
        assert get()[0] == 200
        drain._reload_nginx = lambda: (reload(), (True, ""))[1]
        assert drain.drain_on(str(box.drain), "coder", 30) == (True, "")
        code, headers = get()
        assert code == 503 and headers["Retry-After"] == "30"
        assert get("wrong")[0] == 401  # draining never opens the door
        # a candidate waiting for its acceptance verdict: drained for everyone but the probe with its key
        key = "0123456789abcdef0123456789abcdef"
        probe = drain.PROBE_HEADER
        assert drain.drain_on(str(box.drain), "coder", 30, "its acceptance check", except_key=key) == \
            (True, "")
        assert stat.S_IMODE(os.stat(box.drain / "coder.conf").st_mode) == 0o600  # the key is root's
        assert get(**{probe: key})[0] == 200
        for other in ({}, {probe: key[:-1]}, {probe: key + "0"}, {probe: ""}, {probe.lower(): key.upper()}):
            code, headers = get(**other)
            assert code == 503 and headers["Retry-After"] == "30", other
        assert get("wrong", **{probe: key})[0] == 401  # the key never stands in for the token
        with pytest.raises(ValueError):
            drain.drain_on(str(box.drain), "coder", 30, except_key='x"; return 200; #')
        assert drain.drain_off(str(box.drain), "coder") == (True, "")
        assert get()[0] == 200
    finally:
        subprocess.run([*nginx, "-s", "quit"], capture_output=True)


def test_a_box_that_fails_its_rollout_stops_the_rollout_of_the_later_boxes(tmp_path):
    """Two @fake Sparks in replicas whose coder rollout rolls back: the first box tried stops the rollout, the
    other box's coder is never touched (the wave gate: a pair's MAX_UNAVAILABLE is one box, and a failed wave stops
    the rest), and the deploy names the box it did not roll out."""
    from tests.render.test_topologies import cmds, run_pair

    os.environ["FAKE_ROLLOUT_FAILS"] = "1"
    try:
        out = run_pair(tmp_path, "replicas")
    finally:
        del os.environ["FAKE_ROLLOUT_FAILS"]
    tried = [h for h in ("spark-1", "spark-2") if any("rollout.py apply coder" in c for c in cmds(out, h))]
    assert len(tried) == 1, tried
    assert "(each rolled itself back)" in out["log"] and "this box stays on its previous configuration" in out["log"]
    untouched = next(h for h in ("spark-1", "spark-2") if h not in tried)
    assert f"not rolled out: @fake/{untouched};" in out["log"]
    assert sorted(out["failed_hosts"]) == ["@fake/spark-1", "@fake/spark-2"]


def test_the_gateway_hand_off_marks_a_draining_box_not_ready(gx10_data):
    from sparkctl.render import gateway
    from tests.render.test_render import settings_for

    s = settings_for(gx10_data)
    merged = {}
    for i, box_name in enumerate(("spark-1", "spark-2")):
        merged = gateway.merge(merged, box_name, [gateway.entry(box_name, f"10.0.0.{i + 1}", 443, svc)
                                                  for svc in s.services], ["spark-1", "spark-2"], "replicas", None)
    out = gateway.set_ready(merged, "spark-2", "coder", False)
    docs = gateway.manifests(out, "carouter")
    gateway.validate_manifests(docs, "1.30")
    coder = next(d for d in docs if d["kind"] == "EndpointSlice" and d["metadata"]["name"] == "spark-coder-boxes")
    assert [(e["hostname"], e["conditions"]["ready"]) for e in coder["endpoints"]] == [("spark-1", True),
                                                                                       ("spark-2", False)]
    assert all(e["ready"] for e in merged["models"]["coder"])  # the input is not changed
    assert all(e["ready"] for e in out["models"]["embed-qwen3"])  # only that served model


def test_a_stopped_service_on_its_committed_configuration_is_restarted_and_never_marked_failed(box):
    box.converge("qwen")
    box.cli("run", "coder", "--txn", "x", *box.args())  # (unchanged)
    subprocess.run(["systemctl", "stop", "vllm-coder.service"], env=box.environ, check=True)
    assert box.run(txn="t2").returncode == 0 and box.result()["outcome"] == "restarted"
    subprocess.run(["systemctl", "stop", "vllm-coder.service"], env=box.environ, check=True)
    box.break_model("qwen")  # e.g. out of memory at start: not the configuration's fault
    r = box.run(txn="t3")
    assert r.returncode == 6 and box.status()["failed"] is None and box.live_model() == "qwen"


@pytest.mark.parametrize("setting, value", [("ROLLOUT_RETRY_FAILED", "yes"), ("DRAIN_TIMEOUT_S", "-1"),
                                            ("VLLM_VENVS_KEEP", "two"), ("DRAIN_DIR", "relative/dir")])
def test_bad_rollout_settings_are_refused_before_the_box_changes(tmp_path, setting, value):
    from tests.deploy.test_deploy_fake import changes, run_fake

    out = run_fake("dgx", tmp_path, "--data", f"{setting}={value}")
    assert changes(out) == [], changes(out)[:5]
    assert f"{setting} = " in out["log"] and "is not valid" in out["log"] and "Traceback" not in out["log"]


def test_every_box_module_is_uploaded():
    """Every box module is uploaded by a step (vLLM's, or monitoring's), except the status probe, which
    `sparkctl status` pipes to the box's python3 on each call, and the retire, which retire.py's deploy uploads with
    the deploy's own modules it imports."""
    from sparkctl.render.monitoring import BOX_SCRIPTS
    from tasks.retire import RETIRE_SCRIPTS
    from tasks.vllm import REMOTE_SCRIPTS, SHARED_SCRIPTS

    on_disk = {p.name for p in ROLLOUT.parent.glob("*.py")} - {"__init__.py"}
    assert on_disk == set(REMOTE_SCRIPTS) | set(BOX_SCRIPTS) | {"status_probe.py", "retire_services.py"}
    assert set(RETIRE_SCRIPTS) - {"retire_services.py"} <= set(REMOTE_SCRIPTS) | set(BOX_SCRIPTS)
    assert not set(REMOTE_SCRIPTS) & set(BOX_SCRIPTS)  # one step uploads each (its change restarts what it runs)
    assert set(SHARED_SCRIPTS) <= set(REMOTE_SCRIPTS)  # the modules both steps' scripts import: the vLLM step's


def test_a_renamed_box_script_is_removed_and_no_current_script_reuses_its_name():
    """The vLLM step removes what an earlier version uploaded under a name since changed; a script that took such a
    name back would be uploaded and then removed by the same step, and every box import of it would fail."""
    from tasks.vllm import RENAMED_SCRIPTS

    on_disk = {p.name for p in ROLLOUT.parent.glob("*.py")}
    assert {"rollout_gate.py", "rollout_drain.py", "retire.py"} <= set(RENAMED_SCRIPTS)
    assert not set(RENAMED_SCRIPTS) & on_disk
    imported = {m for p in ROLLOUT.parent.glob("*.py")
                for m in re.findall(r"^(?:import|from) (\w+)", p.read_text(), re.M)}
    assert not {s.removesuffix(".py") for s in RENAMED_SCRIPTS} & imported  # nothing on the box imports an old name


def test_a_candidate_that_disappears_mid_transaction_is_rolled_back_and_that_rollback_resumed(box):
    box.converge("qwen")
    box.stage("laguna")
    box.kill_on("restart#1")  # killed after the candidate was installed, before its gate
    box.run()
    assert box.live_model() == "laguna" and box.status()["phase"] == contract.STARTED
    assert stat.S_IMODE(os.stat(box.txn_dir() / "state.json").st_mode) == 0o600  # root's: it may hold a probe key
    for staged in ("vllm-coder.env.next", "vllm-coder.service.next"):
        (box.env_dir / staged).unlink()  # the operator removed what was staged
    box.kill_on("restart#2")  # and the rollback itself is interrupted
    box.run(txn="t2")
    assert box.status()["phase"] == contract.ROLLING_BACK  # recorded before it acted
    r = box.run(txn="t3")
    assert r.returncode == contract.code(contract.ROLLED_BACK) and "resuming the interrupted rollback" in r.stdout
    assert box.live_model() == "qwen" and not box.txn_dir().exists() and not (box.drain / "coder.conf").exists()
    assert box.result()["why"] == "the staged candidate disappeared"


def watch_files(paths: list[Path], stop: threading.Event) -> dict:
    """In the background: when each path first appeared (time.monotonic()), while `stop` is not set."""
    seen: dict = {}

    def poll():
        while not stop.is_set():
            for p in paths:
                if p not in seen and p.exists():
                    seen[p] = time.monotonic()
            time.sleep(0.01)

    threading.Thread(target=poll, daemon=True).start()
    return seen


def test_a_served_model_leaves_the_routers_and_waits_their_window_before_its_drain_and_returns_after_the_commit(box):
    box.converge("qwen")
    box.stage("laguna")
    unready, drained = box.drain / "coder.unready.conf", box.drain / "coder.conf"
    stop = threading.Event()
    seen = watch_files([unready, drained], stop)
    r = box.run(**{"unready-wait": 1.5})
    stop.set()
    assert r.returncode == 0, r.stdout
    assert "waiting 1.5 s (ROUTER_OUT_WAIT_S) for the routers to take this box out" in r.stdout
    # the router health path failed first; the API kept serving for the routers' window; then the drain
    assert seen[drained] - seen[unready] >= 1.4
    calls = box.calls()
    assert calls[0] == "reload nginx.service" and calls.index("restart vllm-coder.service") > 1
    assert not unready.exists() and not drained.exists()  # back in the routers after the commit
    assert box.live_model() == "laguna"


def test_the_unready_file_fails_the_health_path_alone(box):
    sys.path.insert(0, str(ROLLOUT.parent))
    import drain

    reloads = []
    drain._reload_nginx, before = (lambda: (reloads.append(1), (True, ""))[1]), drain._reload_nginx
    try:
        assert drain.unready_on(str(box.drain), "coder") == (True, "") and len(reloads) == 1
        assert "return 503" in (box.drain / "coder.unready.conf").read_text()
        assert not (box.drain / "coder.conf").exists()  # the API is not drained
        assert drain.reopen(str(box.drain), "coder") == (True, "") and len(reloads) == 2
        assert drain.reopen(str(box.drain), "coder") == (True, "") and len(reloads) == 2  # nothing to do
        assert drain.reopen(str(box.drain), "coder", reload=True) == (True, "") and len(reloads) == 3
    finally:
        drain._reload_nginx = before


def test_a_rollback_keeps_the_box_out_of_the_routers_until_the_snapshot_serves_again(box):
    box.converge("qwen")
    box.break_model("broken")
    box.stage("broken")
    box.kill_on("restart#2")  # the rollback's restart: frozen before the snapshot serves
    box.run()
    assert (box.drain / "coder.unready.conf").exists() and box.status()["phase"] == contract.ROLLING_BACK
    r = box.run(txn="t2")  # the resumed rollback
    assert r.returncode == contract.code(contract.ROLLED_BACK) and box.serving() == {"up": True, "model": "qwen"}
    assert not (box.drain / "coder.unready.conf").exists() and not (box.drain / "coder.conf").exists()


def test_a_tensor_parallel_worker_has_no_router_health_path(box):
    """A headless worker serves no client: its rollouts neither leave the routers nor drain (a replica that becomes
    a worker does both first: tests/box/test_rollout_tp.py)."""
    box.stage("qwen", headless=True)
    assert box.run(txn="converge", kind="none").returncode == 0
    (box.sd / "calls.log").unlink()
    box.stage("laguna", headless=True)
    box.run(kind="none")
    assert "reload nginx.service" not in box.calls() and not (box.drain / "coder.unready.conf").exists()
