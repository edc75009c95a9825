"""The box-side retire (sparkctl/box/retire_services.py) against the stand-in systemd tools on PATH and the stand-in vLLM
endpoint of the rollout tests: out of the routers, drained, stopped and disabled, recorded; refused while a rollout
owns a service; idempotent; and undone by the deploy's own rollout."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from sparkctl import REPO_ROOT
from sparkctl.box import contract
from tests.box.test_rollout_box import Box, box  # noqa: F401 - the fixture

RETIRE = REPO_ROOT / "sparkctl" / "box" / "retire_services.py"
WATCHDOG = "sparkctl-watchdog.service"


def retire(b: Box, *cmd: str, wait: float = 0, drain: float = 5, serve: bool = True,
           **kw) -> subprocess.CompletedProcess:
    """`retire_services.py run` (or `cmd`) with the coder's options as tasks/retire.py renders them, limits shortened."""
    what = [*(["--serve", f"coder={b.port}"] if serve else []), "--service", "coder", "--quiet", WATCHDOG]
    limits = ["--unready-wait", str(wait), "--drain-timeout", str(drain), "--retry-after", "7", "--interval", "0.1",
              "--textfile-dir", str(b.root / "textfile")]
    argv = list(cmd) or ["run", "--txn", kw.get("txn", "r1")]
    limits = [] if argv == ["status"] else limits
    return subprocess.run([sys.executable, str(RETIRE), *argv, *what, *limits], env=b.environ, capture_output=True,
                          text=True, timeout=60)


def serving_box(b: Box) -> None:
    """The coder runs its committed configuration, enabled at boot, with the watchdog watching it."""
    b.converge("qwen")
    for unit in ("vllm-coder.service", WATCHDOG):
        subprocess.run(["systemctl", "enable", unit], env=b.environ, check=True)
    (b.sd / "units" / f"{WATCHDOG}.json").write_text(json.dumps({"ActiveState": "active",
                                                                 "UnitFileState": "enabled"}))
    (b.sd / "calls.log").unlink()


def result(b: Box) -> dict:
    return json.loads((b.state / "retire" / "result.json").read_text())


def test_retire_leaves_the_routers_drains_then_stops_and_disables_everything(box):
    serving_box(box)
    (box.sd / "running_for").write_text("1.0")  # two requests finish 1 s after the drain begins
    r = retire(box)
    assert r.returncode == 0, r.stdout + r.stderr
    calls = box.calls()
    assert calls == [f"disable --now {WATCHDOG}", "reload nginx.service", "reload nginx.service",
                     "disable --now vllm-coder.service"]  # quiet first; out of the routers, closed; then stopped
    assert not box.serving()["up"]
    assert "return 503" in (box.drain / "coder.unready.conf").read_text()
    assert "add_header Retry-After 7 always;" in (box.drain / "coder.conf").read_text()  # a client sent straight
    done = result(box)
    assert done["outcome"] == contract.RETIRED and done["drained"]["coder"]["idle"]
    assert done["drained"]["coder"]["waited_s"] >= 0.9
    assert done["message"].startswith("out of the routers, drained (0 in flight after 1.")
    assert done["message"].endswith(f"coder stopped and disabled ({WATCHDOG} too)")
    marker = json.loads((box.state / "retire" / "retired.json").read_text())
    assert marker["served"] == ["coder"] and marker["units"] == [WATCHDOG, "vllm-coder.service"]
    assert "sparkctl_box_retired 1" in (box.root / "textfile" / contract.RETIRED_TEXTFILE).read_text()


def test_a_second_retire_changes_nothing_and_says_so(box):
    serving_box(box)
    assert retire(box).returncode == 0
    calls, drain_files = box.calls(), sorted(p.name for p in box.drain.iterdir())
    r = retire(box, txn="r2")
    assert r.returncode == 0 and "already retired" in r.stdout
    assert result(box)["outcome"] == contract.ALREADY_RETIRED
    assert box.calls() == calls and sorted(p.name for p in box.drain.iterdir()) == drain_files
    status = json.loads(retire(box, "status").stdout)
    assert status["retired"]["txn"] == "r1" and status["owned"] == [] and not status["running"]
    assert status["units"] == {WATCHDOG: {"active": False, "enabled": False},
                               "vllm-coder.service": {"active": False, "enabled": False}}


def test_a_unit_started_again_by_hand_is_retired_again(box):
    serving_box(box)
    assert retire(box).returncode == 0
    subprocess.run(["systemctl", "restart", "vllm-coder.service"], env=box.environ, check=True)
    r = retire(box, txn="r2")
    assert r.returncode == 0 and result(box)["outcome"] == contract.RETIRED and not box.serving()["up"]


def test_refused_while_a_rollout_owns_the_service_and_nothing_is_touched(box):
    serving_box(box)
    txn = box.state / "rollout" / "vllm-coder.txn"
    txn.mkdir(parents=True)
    (txn / "state.json").write_text(json.dumps({"phase": "draining"}))
    r = retire(box)
    assert r.returncode == contract.RETIRE_CODES[contract.RETIRE_REFUSED]
    assert "a rollout or restart owns coder" in r.stdout and box.calls() == [] and box.serving()["up"]
    assert not list(box.drain.iterdir()) and not (box.state / "retire" / "retired.json").exists()
    assert json.loads(retire(box, "status").stdout)["owned"] == ["coder"]


def test_it_waits_for_the_routers_only_when_the_box_served(box):
    serving_box(box)
    t0 = time.monotonic()
    r = retire(box, wait=1.0)
    assert r.returncode == 0 and time.monotonic() - t0 >= 1.0
    assert "waiting 1 s (ROUTER_OUT_WAIT_S) for the routers" in r.stdout
    for p in box.drain.iterdir():
        p.unlink()
    (box.state / "retire" / "retired.json").unlink()  # stopped already, but not recorded as retired
    t0 = time.monotonic()
    r = retire(box, wait=5.0, txn="r2")
    assert r.returncode == 0 and time.monotonic() - t0 < 5.0 and "ROUTER_OUT_WAIT_S" not in r.stdout
    assert (box.drain / "coder.unready.conf").exists()  # out of the routers all the same


def test_a_drain_that_times_out_is_said_and_the_box_still_stops(box):
    serving_box(box)
    (box.sd / "running_for").write_text("60")
    r = retire(box, drain=0.5)
    assert r.returncode == 0 and not box.serving()["up"]
    assert "not drained: 2 request(s) cut at DRAIN_TIMEOUT_S (0.5 s)" in result(box)["message"]


def test_a_headless_worker_only_stops_its_units(box):
    serving_box(box)
    r = retire(box, serve=False)
    assert r.returncode == 0
    assert box.calls() == [f"disable --now {WATCHDOG}", "disable --now vllm-coder.service"]  # no nginx, no drain
    assert result(box)["message"] == f"coder stopped and disabled ({WATCHDOG} too)"


def test_apply_runs_it_in_the_transient_unit_and_follow_reads_it_to_its_result(box):
    serving_box(box)
    started = json.loads(retire(box, "apply").stdout)
    assert not started["attached"] and "systemd-run sparkctl-retire.service" in box.calls()
    offset, text = 0, ""
    for _ in range(100):
        r = subprocess.run([sys.executable, str(RETIRE), "follow", "--txn", started["txn"], "--offset", str(offset)],
                           env=box.environ, capture_output=True, text=True, timeout=30)
        lines = r.stdout.splitlines()
        st = json.loads(lines[-1][3:])
        text += "\n".join(lines[:-1])
        offset = st["offset"]
        if st["done"]:
            break
        time.sleep(0.1)
    assert st["done"] and st["result"]["outcome"] == contract.RETIRED, text
    assert "coder stopped and disabled" in text


def test_the_deploys_next_rollout_brings_a_retired_box_back(box):
    """What deploy.py runs on the box: its rollout finds the committed configuration stopped, lifts the drain and
    the router health failure, and restarts it (the services step then enables the unit again)."""
    serving_box(box)
    assert retire(box).returncode == 0
    box.stage("qwen")  # the deploy stages the same configuration again
    r = box.run(txn="redeploy")
    assert r.returncode == 0, r.stdout
    assert box.result()["outcome"] == "restarted" and box.serving() == {"up": True, "model": "qwen"}
    assert not list(box.drain.iterdir())


@pytest.mark.parametrize("bad", [["--serve", "coder"], ["--serve", "=8000"]])
def test_a_bad_served_model_option_is_refused(box, bad):
    r = subprocess.run([sys.executable, str(RETIRE), "status", *bad], env=box.environ, capture_output=True, text=True)
    assert r.returncode == 2 and "is not SERVED=PORT" in r.stderr


def test_a_restart_the_watchdog_began_as_it_stopped_is_left_alone(box, monkeypatch):
    """Between the first look and the watchdog's stop, its restart of a wedged engine may begin: the retire then
    starts the watchdog again and touches nothing else."""
    import importlib.util

    serving_box(box)
    for key in ("PATH", "FAKE_SD"):
        monkeypatch.setenv(key, box.environ[key])
    spec = importlib.util.spec_from_file_location("box_retire", RETIRE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "STATE_DIR", str(box.state))
    monkeypatch.setattr(mod, "DRAIN_DIR", str(box.drain))
    (box.state / "retire").mkdir()
    looks = iter([[], ["coder"]])
    monkeypatch.setattr(mod, "owned", lambda services: next(looks))
    a = mod.parser().parse_args(["run", "--txn", "r1", "--serve", f"coder={box.port}", "--service", "coder",
                                 "--quiet", WATCHDOG, "--unready-wait", "0", "--drain-timeout", "5", "--retry-after",
                                 "7", "--interval", "0.1", "--textfile-dir", str(box.root / "textfile")])
    said = []
    assert mod.execute(a, said.append) == contract.RETIRE_CODES[contract.RETIRE_REFUSED]
    assert box.calls() == [f"disable --now {WATCHDOG}", f"enable --now {WATCHDOG}"] and box.serving()["up"]
    assert not list(box.drain.iterdir()) and "a restart of coder began as the retire started" in said[-1]
