"""The acceptance gate on the converged simulated Spark (docs/acceptance.md). A coder rollout that passed health waits on the
box for its verdict (phase "awaiting-verdict", sparkctl/box/rollout_verdict.py; drained for clients, open to the
probe's key); the deploy (within the coder's rollout step, since it served before) runs the quick acceptance
through the proxy and sends `rollout.py verdict coder --tx TX commit|rollback`, then follows the box to its
result. The speed comparisons are off in the sim's data (two boxes on 2 shared cores) and on here (SPEED).

* A flip whose draft cannot match (the tiny laguna with sim/tiny-unrelated-draft: same tokenizer, an lm_head that
  proposes the next token id) passes health, fails on the catalog's acceptance floor, and is rolled back (the
  matching draft's flip passes in tests/e2e/test_rollout.py, which records the acceptance it measured: what the
  simulated Spark's floor in group_data/sim.py is set from).
* The gate's own noise: five accepted runs of one configuration, the spread of each figure printed
  (ACCEPTANCE_*_MAX_REGRESSION in group_data/sim.py are set from it), each judged against the first.
* A coder slowed while it is judged (a duty cycle of SIGSTOP/SIGCONT: this sandbox cannot enforce CPUQuota=) fails
  the decode/prefill comparison against a baseline recorded just before (`quiet_baseline`); the same configuration
  without it passes. The env marker (VLLM_EXTRA_ENV, a setting) makes the deploy roll the coder out, so that it is
  judged; the coder keeps the last marker until a plain deploy (`converged_spark`) puts it back.
* An upgrade (a rebuilt venv: another vLLM build of the same version, with no baseline of its own) slowed the same way
  is rolled back against the previous build's baseline (`quiet_baseline`), and the coder keeps serving that build;
  the same upgrade unslowed is committed against it and becomes its build's baseline. Every vLLM service then runs
  the new venv until a plain deploy (`converged_spark`) puts the group data's build back.

Each test starts from the pair as the group data says (`converged_spark`). The box remembers a candidate that failed
and does not try it again unless asked: the failing deploys ask (RETRY_FAILED), so the tests can run again.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import statistics
import time

import pytest

from sparkctl.check.load import host_config
from sparkctl.config import catalog, groupdata
from sparkctl.config.lock import cache_dirname
from sparkctl.lock.refresh import refresh_lock
from sparkctl.measure import acceptance, history, labels, quick
from tests.conftest import typed
from tests.e2e.conftest import GROUPS, pyinfra, record, sim_exec

pytestmark = pytest.mark.scenario("acceptance")

HOST = "spark-1"
# a stand-in draft whose proposals the target never accepts (sparkctl/sim/models.py): random tied-embedding models
# all predict "the input token again" and so agree with each other, whatever their weights
UNRELATED = "sim/tiny-unrelated-draft"
RETRY_FAILED = "ROLLOUT_RETRY_FAILED=True"
# A real slowdown of the coder while it is judged. CPUQuota= would be the natural one, but this sandbox's cgroups
# have no cpu controller (measured: a CPUQuota=25% busy loop used 100 % of a core), so the test host runs its own
# duty cycle instead: the coder's processes stopped 0.3 s of every 0.4 s (SIGSTOP/SIGCONT) while its transaction
# waits for the verdict; several times slower, far beyond any threshold.
THROTTLE = "sparkctl-e2e-throttle"
THROTTLE_DUTY = "25 %"
THROTTLE_LOOP = ("while :; do if grep -q '\"awaiting-verdict\"' /var/lib/sparkctl/rollout/vllm-coder.txn/state.json "
                 "2>/dev/null; then systemctl kill -s STOP vllm-coder.service; sleep 0.3; "
                 "systemctl kill -s CONT vllm-coder.service; fi; sleep 0.1; done")


def served_root(spark) -> str:
    with spark.client() as c:
        r = c.get(spark.base_url("coder") + "/models", headers={"Authorization": f"Bearer {spark.token}"})
    return r.json()["data"][0]["root"]


def deploy(*data: str):
    args = ["-y", "--limit", HOST]
    for d in data:
        args += ["--data", d]
    return pyinfra(*args, "inventory.py", "deploy.py")


# the speed comparisons, off in the sim's own data (two boxes on 2 shared cores), on for this controlled sequence
SPEED_DATA = {"ACCEPTANCE_DECODE_ENABLED": True, "ACCEPTANCE_PREFILL_ENABLED": True}
SPEED = tuple(f"{k}={v}" for k, v in SPEED_DATA.items())  # the same, as the deploy's --data


def marker(value: str) -> str:
    """An env change the service reads: it forces a coder rollout without changing what it serves."""
    return "VLLM_EXTRA_ENV=" + json.dumps({"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "SPARKCTL_E2E_MARKER": value})


@contextlib.contextmanager
def throttled():
    """The coder's duty cycle (THROTTLE_LOOP) on HOST meanwhile; its processes left running afterwards."""
    sim_exec(HOST, f"systemd-run --unit={THROTTLE} --collect sh -c {shlex.quote(THROTTLE_LOOP)}")
    try:
        yield
    finally:
        sim_exec(HOST, f"systemctl stop {THROTTLE}; systemctl kill -s CONT vllm-coder.service || true")


def coder_exec_start() -> str:
    return sim_exec(HOST, "grep -h ^ExecStart= /etc/systemd/system/vllm-coder.service")


def test_a_draft_that_cannot_match_fails_on_the_floor_and_is_rolled_back(converged_spark):
    """The matching draft's flip is judged, and passes, in tests/e2e/test_rollout.py (its acceptance is printed
    there); here the same flip with a draft that never matches."""
    data = groupdata.load(GROUPS)
    overrides = json.loads(json.dumps(data["CATALOG_OVERRIDES"]))
    overrides["laguna-s-2.1"]["draft"] = {"repo": UNRELATED, "revision": "main"}  # proposes the next token id
    refresh_lock(GROUPS, extra=[catalog.Checkpoint(repo=UNRELATED, revision="main")])
    try:
        t0 = time.monotonic()
        run = deploy("CODING_MODEL=laguna-s-2.1", "CATALOG_OVERRIDES=" + json.dumps(overrides), RETRY_FAILED)
        record("flip to laguna with a draft that cannot match -> acceptance rollback", time.monotonic() - t0)
    finally:
        refresh_lock(GROUPS)
    assert run.rc != 0, "a failed acceptance must fail the deploy"
    assert "spec-decode acceptance, 1 stream(s)" in run.output and "catalog floor" in run.output, run.failure()
    assert "rolled back" in run.output, run.failure()
    assert "SPARKCTL_MODEL=qwen3.8-27b" in sim_exec(HOST, "cat /etc/sparkctl/vllm-coder.env")
    assert cache_dirname("sim/tiny-qwen") in served_root(converged_spark)  # serving the previous model again


def spread(values: list[float]) -> dict:
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    worst = max(abs(v - mean) for v in values)
    return {"mean": mean, "min": min(values), "max": max(values), "stdev": sd,
            "cv_pct": 100 * sd / mean if mean else 0.0, "worst_below_mean_pct": 100 * (mean - min(values)) / mean
            if mean else 0.0, "worst_pct": 100 * worst / mean if mean else 0.0}


@pytest.mark.e2e_extended(cost_s=90)  # a calibration (the sim's thresholds are set from it), not a behaviour: ~1.5 min here
def test_five_accepted_runs_give_the_gate_noise(converged_spark):
    config = host_config({**converged_spark.data, **SPEED_DATA})
    runs = []
    for i in range(5):
        t0 = time.monotonic()
        v = quick.acceptance_of(converged_spark.host, config, lines=[])  # judged alone: the figures, not a baseline
        record(f"quick acceptance run {i + 1}/5", time.monotonic() - t0)
        assert v.passed, v.reason()
        runs.append(v.record)
    figures: dict[str, list[float]] = {}
    for rec in runs:
        for r in rec["runs"]:
            figures.setdefault(f"decode tok/s, {r['streams']} streams", []).append(r["counter_tokens_per_s"])
            sd = r.get("spec_decode") or {}
            if sd.get("acceptance_rate") is not None:
                figures.setdefault(f"acceptance, {r['streams']} streams", []).append(sd["acceptance_rate"])
        for p in rec["prefill"]:
            figures.setdefault(f"prefill tok/s, {p['target_tokens']}", []).append(p["tokens_per_s"])
    print("ACCEPTANCE NOISE (five quick runs, one configuration)")
    print(f"{'figure':32} {'mean':>9} {'min':>9} {'max':>9} {'stdev':>8} {'cv %':>6} {'min below mean %':>17}")
    for name, values in figures.items():
        s = spread(values)
        print(f"{name:32} {s['mean']:9.2f} {s['min']:9.2f} {s['max']:9.2f} {s['stdev']:8.3f} {s['cv_pct']:6.1f} "
              f"{s['worst_below_mean_pct']:17.1f}")
    # every later run, judged against the first as its baseline with the configured thresholds, must pass: the
    # thresholds sit above the gate's own noise
    t = acceptance.Thresholds.from_settings(config.cfg)
    base = history.make_line(runs[0], baseline=True, source="acceptance")
    for rec in runs[1:]:
        v = acceptance.judge(rec, t, baseline=base)
        assert v.passed, f"noise alone fails the gate: {v.reason()}"


@pytest.fixture
def quiet_baseline(converged_spark) -> dict:
    """spark-1's coder rolled out on the marker("baseline") configuration (judged with SPEED), and a baseline of it
    in the box's acceptance history measured now, with the other box idle (group_data/sim.py: the two boxes share
    2 cores), as a full `bench --record-baseline` would set it. Returns that history line."""
    config = host_config({**groupdata.load(GROUPS), **SPEED_DATA})
    run = deploy(marker("baseline"), *SPEED)
    assert run.rc == 0, run.failure()
    quiet = quick.acceptance_of(converged_spark.host, config, lines=[])
    assert quiet.passed, quiet.reason()
    return history.append(converged_spark.host, config.cfg, quiet.record, source="acceptance", baseline=True)


# four coder rollouts (~8.5 min here); tests/measure/test_acceptance.py judges a slowdown against a fake vLLM
@pytest.mark.e2e_extended(cost_s=510)
def test_a_throttled_coder_fails_the_speed_comparison_and_the_same_config_without_it_passes(quiet_baseline):
    base = quiet_baseline
    with throttled():
        t0 = time.monotonic()
        run = deploy(marker("slow"), *SPEED, RETRY_FAILED)
        record(f"coder throttled to {THROTTLE_DUTY} while judged -> acceptance rollback", time.monotonic() - t0)
    assert run.rc != 0, "a slowed coder must fail acceptance"
    assert "decode tok/s" in run.output and base["history"]["id"] in run.output, run.failure()
    assert "rolled back" in run.output, run.failure()
    run = deploy(marker("fast"), *SPEED)  # the same configuration, not throttled
    assert run.rc == 0, run.failure()
    assert "acceptance passed against baseline " + base["history"]["id"] in run.output, run.failure()


def upgraded_constraints(data: dict) -> list[str]:
    """An upgrade the simulated Spark installs offline: the sim's constraints and pip at PIP_VERSION, which every venv
    installs first, from the wheelhouse that pins it, so pip resolves the same wheels into a new venv. It is another
    vLLM build of the same version (render.units.vllm_venv hashes the constraints; labels.build_labels is its
    name), as a rebuilt image is. The comment, which pip ignores, is this run's time: a build no earlier run on a
    kept pair (SPARKCTL_E2E_REUSE) left a baseline of, so the previous build's baseline judges it on every run."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    return [*data["VLLM_PIP_CONSTRAINTS"], f"pip=={data['PIP_VERSION']}  # e2e upgrade {stamp}"]


@pytest.mark.e2e_extended(cost_s=840)  # a venv build and three coder rollouts of its own (~14 min here): outside CI's budget
def test_an_upgrade_slowed_while_judged_is_rolled_back_against_the_previous_build_and_unslowed_is_committed(
        quiet_baseline, converged_spark):
    base, data = quiet_baseline, converged_spark.data
    constraints = upgraded_constraints(data)
    previous = labels.build_labels(host_config(data))["vllm_build"]
    build = labels.build_labels(host_config({**data, "VLLM_PIP_CONSTRAINTS": constraints}))["vllm_build"]
    assert base["vllm_build"] == previous != build  # the baseline is of the running build; the upgrade has none
    against = f"the previous vLLM build {previous} baseline {base['history']['id']}"
    # only the build differs from the baseline's configuration; RETRY_FAILED: the second run retries the same
    # candidate, which the box remembers as failed
    upgrade = ("VLLM_PIP_CONSTRAINTS=" + json.dumps(constraints), marker("baseline"), *SPEED, RETRY_FAILED)
    with throttled():
        t0 = time.monotonic()
        run = deploy(*upgrade)
        record(f"upgrade (new venv) throttled to {THROTTLE_DUTY} while judged -> rollback", time.monotonic() - t0)
    assert run.rc != 0, "a slowed upgrade must fail acceptance"
    verdict = [line for line in run.output.splitlines() if "rolled back: acceptance failed" in line]
    assert verdict and f"(against {against})" in verdict[-1], run.failure()
    assert f"[previous baseline {base['history']['id']}]" in verdict[-1], run.failure()  # a speed figure failed it
    assert f"/venvs/{previous}/bin/vllm" in coder_exec_start()  # the coder runs the previous build again
    assert cache_dirname("sim/tiny-qwen") in served_root(converged_spark)

    t0 = time.monotonic()
    run = deploy(*upgrade)  # the same upgrade, not throttled
    record("the same upgrade, not throttled -> committed against the previous build", time.monotonic() - t0)
    assert run.rc == 0, run.failure()
    assert f"acceptance passed against {against}" in run.output, run.failure()
    assert f"/venvs/{build}/bin/vllm" in coder_exec_start()
    line = history.read(converged_spark.host, typed(data))[-1]
    assert line["vllm_build"] == build and line["history"]["baseline"], line["history"]  # its build's baseline now
    assert line["history"]["reference"] == {"kind": "previous", "name": against, "id": base["history"]["id"]}
