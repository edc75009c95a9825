"""`retire_services.py --stale` (sparkctl/box/retire_services.py, the deploy's step tasks/stale.py) against the stand-in systemd tools
and vLLM endpoint of the rollout tests: a service installed on the box but no longer configured there leaves the
routers, drains, stops, is disabled and removed; the box is not retired and keeps serving what it is configured to
run; a second run changes nothing; refused while a rollout owns the service; and a deploy that configures the
service again brings it back."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading

import pytest

from sparkctl.box import contract
from tests.box.test_retire_box import RETIRE, WATCHDOG
from tests.box.test_rollout_box import FAST, ROLLOUT, Box, Endpoint

SPARE = "vllm-spare.service"  # what the box ran before its configuration changed (a second chat model)


class TwoModels(Endpoint):
    """The rollout tests' stand-in vLLM, listing the spare's served name beside the coder's (its gate asks)."""

    def do_GET(self):
        if self.path != "/v1/models" or not self._serving()["up"]:
            return super().do_GET()
        self._send(200, json.dumps({"data": [{"id": "coder"}, {"id": "spare"}]}).encode())


@pytest.fixture
def box(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("H", (TwoModels,), {"sd": tmp_path / "fake"}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield Box(tmp_path, server.server_address[1])
    server.shutdown()


def stale(b: Box, *cmd: str, txn: str = "s1", keep: tuple[str, ...] = ("coder",)) -> subprocess.CompletedProcess:
    """`retire_services.py run --stale` (or `cmd`) as tasks/stale.py renders it: keep the configured services, pause the
    watchdog; limits shortened."""
    what = ["--stale", *(x for k in keep for x in ("--keep", k)), "--quiet", WATCHDOG]
    limits = ["--unready-wait", "0", "--drain-timeout", "5", "--retry-after", "7", "--interval", "0.1",
              "--textfile-dir", str(b.root / "textfile")]
    argv = list(cmd) or ["run", "--txn", txn]
    return subprocess.run([sys.executable, str(RETIRE), *argv, *what, *([] if argv == ["status"] else limits)],
                          env=b.environ, capture_output=True, text=True, timeout=60)


def unit(b: Box, name: str) -> dict:
    path = b.sd / "units" / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def spare_files(b: Box) -> list:
    p = contract.Paths("spare", str(b.env_dir), contract.rollout_dir(str(b.state)), str(b.units))
    return [p.unit, p.env, p.unit_next, p.env_next, p.stamp, p.result]


def install_spare(b: Box, running: bool = True) -> None:
    """The spare service as an earlier deploy left it: live and staged files, stamp and result, active and enabled
    (running=False: only staged, as a first install that failed leaves it)."""
    env = f'SPARKCTL_MODEL=spare\nVLLM_ARGS="/models/x --served-model-name spare --host 127.0.0.1 --port {b.port}"\n'
    unit_text = f"[Service]\nEnvironmentFile={b.env_dir}/vllm-spare.env\nExecStart={b.venv}/bin/vllm serve $VLLM_ARGS\n"
    for path, text in zip(spare_files(b), [unit_text, env, unit_text, env, "c0ffee\n", '{"outcome": "ready"}']):
        if running or path.endswith(".next"):
            with open(path, "w") as fh:
                fh.write(text)
    if running:
        (b.sd / "units" / f"{SPARE}.json").write_text(json.dumps({"ActiveState": "active",
                                                                  "UnitFileState": "enabled"}))


def box_with_spare(b: Box, running: bool = True) -> None:
    """The coder (configured) serves with the watchdog watching; the spare (no longer configured) is installed."""
    b.converge("qwen")
    subprocess.run(["systemctl", "enable", "vllm-coder.service"], env=b.environ, check=True)
    (b.sd / "units" / f"{WATCHDOG}.json").write_text(json.dumps({"ActiveState": "active",
                                                                 "UnitFileState": "enabled"}))
    install_spare(b, running)
    (b.sd / "calls.log").unlink(missing_ok=True)


def coder_untouched(b: Box) -> None:
    assert unit(b, "vllm-coder.service")["ActiveState"] == "active"
    assert unit(b, "vllm-coder.service")["UnitFileState"] == "enabled"
    assert (b.env_dir / "vllm-coder.env").exists() and (b.units / "vllm-coder.service").exists()
    assert not (b.drain / "coder.conf").exists() and not (b.drain / "coder.unready.conf").exists()


def result(b: Box) -> dict:
    return json.loads((b.state / "retire" / "stale" / "result.json").read_text())


def test_a_stale_service_leaves_the_routers_drains_stops_and_is_removed_the_rest_serves_on(box):
    box_with_spare(box)
    (box.sd / "running_for").write_text("1.0")  # two requests finish 1 s after the drain begins
    r = stale(box)
    assert r.returncode == 0, r.stdout + r.stderr
    # the watchdog paused (not disabled) first, out of the routers, closed, stopped, removed, the watchdog back
    assert box.calls() == [f"stop {WATCHDOG}", "reload nginx.service", "reload nginx.service", f"disable --now {SPARE}",
                           "daemon-reload", f"start {WATCHDOG}"]
    assert unit(box, SPARE)["ActiveState"] == "inactive" and unit(box, SPARE)["UnitFileState"] == "disabled"
    assert not [p for p in spare_files(box) if (box.root / p).exists()]
    assert "return 503" in (box.drain / "spare.unready.conf").read_text()
    assert "add_header Retry-After 7 always;" in (box.drain / "spare.conf").read_text()
    coder_untouched(box)
    assert unit(box, WATCHDOG) == {"ActiveState": "active", "SubState": "running", "UnitFileState": "enabled"}
    done = result(box)
    assert done["outcome"] == contract.REMOVED and done["services"] == ["spare"] and done["served"] == ["spare"]
    assert done["drained"]["spare"]["idle"] and done["drained"]["spare"]["waited_s"] >= 0.9
    assert done["message"].startswith("out of the routers, drained (0 in flight after 1.")
    assert done["message"].endswith("spare stopped, disabled and removed (no longer configured here)")
    # not a retire: no marker, no textfile, its own transient unit's files
    assert not (box.state / "retire" / "retired.json").exists() and not (box.root / "textfile").exists()


def test_a_second_run_finds_nothing_stale_and_changes_nothing(box):
    box_with_spare(box)
    assert stale(box).returncode == 0
    calls, drain_files = box.calls(), sorted(p.name for p in box.drain.iterdir())
    r = stale(box, txn="s2")
    assert r.returncode == 0 and "nothing stale" in r.stdout and result(box)["outcome"] == contract.NOTHING_STALE
    assert box.calls() == calls and sorted(p.name for p in box.drain.iterdir()) == drain_files
    status = json.loads(stale(box, "status").stdout)
    assert status["stale"] == {} and status["owned"] == [] and not status["running"] and status["retired"] is None


def test_status_names_the_stale_services_and_their_files(box):
    box_with_spare(box)
    status = json.loads(stale(box, "status").stdout)
    assert sorted(status["stale"]) == ["spare"] and len(status["stale"]["spare"]) == 4  # live and staged
    assert status["units"][SPARE] == {"active": True, "enabled": True}
    assert box.calls() == []  # a status changes nothing
    assert json.loads(stale(box, "status", keep=("coder", "spare")).stdout)["stale"] == {}


def test_refused_while_a_rollout_owns_the_stale_service_and_nothing_is_touched(box):
    box_with_spare(box)
    txn = box.state / "rollout" / "vllm-spare.txn"
    txn.mkdir(parents=True)
    (txn / "state.json").write_text(json.dumps({"phase": "draining"}))
    r = stale(box)
    assert r.returncode == contract.RETIRE_CODES[contract.RETIRE_REFUSED]
    assert "a rollout or restart owns spare now" in r.stdout and box.calls() == []
    assert all((box.root / p).exists() for p in spare_files(box)) and not list(box.drain.iterdir())
    assert unit(box, WATCHDOG)["ActiveState"] == "active"


def test_a_service_only_staged_is_removed_without_a_drain(box):
    """A first install that failed leaves only staged files: nothing ran, nothing to drain or wait for."""
    box_with_spare(box, running=False)
    r = stale(box)
    assert r.returncode == 0, r.stdout + r.stderr
    assert box.calls() == [f"stop {WATCHDOG}", "daemon-reload", f"start {WATCHDOG}"]
    assert not [p for p in spare_files(box) if (box.root / p).exists()]
    assert result(box)["served"] == [] and result(box)["message"] == \
        "spare stopped, disabled and removed (no longer configured here)"


def test_a_deploy_that_configures_it_again_brings_it_back(box):
    """The deploy stages it again; its rollout is a first install that lifts the drain and router health files."""
    box_with_spare(box)
    assert stale(box).returncode == 0
    p = contract.Paths("spare", str(box.env_dir), "")
    unit_text = f"[Service]\nEnvironmentFile={p.env}\nExecStart={box.venv}/bin/vllm serve $VLLM_ARGS\n"
    (box.env_dir / "vllm-spare.service.next").write_text(unit_text)
    (box.env_dir / "vllm-spare.env.next").write_text("SPARKCTL_MODEL=spare\nVLLM_ARGS=\"x\"\n")
    args = contract.argv("run", FAST, service="spare", port=box.port, served="spare", kind="chat", txn="back")
    r = subprocess.run([sys.executable, str(ROLLOUT), *args], env=box.environ, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    back = json.loads((box.state / "rollout" / "vllm-spare.result.json").read_text())
    assert back["outcome"] == "ready" and unit(box, SPARE)["ActiveState"] == "active"
    assert not list(box.drain.iterdir())
