"""deploy.py's stale step (tasks/stale.py) against pyinfra's @fake connector (tests/standins/gx10_inventory.py
scripts what the box has installed and its retire_services.py --stale run): a service installed but no longer configured is
handed to the box's run before the proxy and the services step; nothing stale, nothing but the fact runs."""

from __future__ import annotations

import pytest

from tests.deploy.test_deploy_fake import changes, dgx, run_fake  # noqa: F401 - dgx: the fixture

STEP = "Stale services | Services no longer configured here: out of the routers, drained, stopped, removed"


def deploy(tmp, state: str) -> dict:
    mp = pytest.MonkeyPatch()
    mp.setenv("FAKE_STALE", state)
    try:
        return run_fake("dgx", tmp)
    finally:
        mp.undo()


def stale_calls(out: dict) -> list[str]:
    """The box's retire script run (its upload's own stat calls aside)."""
    return [c for c in out["commands"] if "retire_services.py apply" in c or "retire_services.py follow" in c]


@pytest.fixture(scope="module")
def spare(tmp_path_factory):
    return deploy(tmp_path_factory.mktemp("spare"), "spare")


def test_a_service_no_longer_configured_goes_to_the_boxs_stale_run(spare):
    apply = next(c for c in stale_calls(spare) if "retire_services.py apply" in c)
    # the box keeps every configured service, pauses the watchdog, gets the existing settings' limits
    for part in ("apply --stale --keep coder --keep embed-qwen3 --keep embed-bge-m3",
                 "--quiet sparkctl-watchdog.service", "--unready-wait 20", "--drain-timeout 1800", "--retry-after 30", "SPARKCTL_ENV_DIR=/etc/sparkctl"):
        assert part in apply, (part, apply)
    assert "--serve" not in apply and "--service" not in apply  # the box's own files name what goes
    assert any("retire_services.py follow --stale --txn fake-stale" in c for c in stale_calls(spare))
    assert "embed-old stopped, disabled and removed (no longer configured here)" in spare["log"]
    assert "no longer configured here, to be removed: embed-old" in spare["log"]


def test_it_runs_before_the_proxy_and_the_services(spare):
    ops = spare["ops"]
    first = {step: next(i for i, o in enumerate(ops) if o.startswith(step)) for step in ("TLS proxy", "vLLM services")}
    assert ops.index(STEP) < min(first.values())
    commands = spare["commands"]
    apply = next(i for i, c in enumerate(commands) if "retire_services.py apply --stale" in c)
    assert apply < next(i for i, c in enumerate(commands) if "nginx -t" in c)
    assert apply < next(i for i, c in enumerate(commands) if "rollout.py apply" in c)
    # the box script it runs is uploaded by the vLLM step, before it
    assert next(i for i, o in enumerate(ops) if o == "vLLM | Upload retire_services.py") < ops.index(STEP)


def test_nothing_stale_runs_nothing_but_the_fact(dgx):
    assert STEP in dgx["ops"]
    assert stale_calls(dgx) == []
    looks = [c for c in dgx["commands"] if "vllm-*.env.next; do" in c]
    assert len(looks) == 1 and "/etc/systemd/system/vllm-*.service /etc/sparkctl/vllm-*.env" in looks[0]
    assert "to be removed" not in dgx["log"]


def test_refused_when_a_rollout_owns_the_stale_service(tmp_path):
    out = deploy(tmp_path, "owned")
    assert out["failed_hosts"] == ["@fake/gx10"]
    assert "a rollout or restart owns embed-old now" in out["log"]
    assert not any("rollout.py apply" in c for c in out["commands"])  # the box stops there


def test_a_box_that_becomes_a_tensor_parallel_worker_has_its_embedders_removed(tmp_path):
    """Both boxes ran the coder and both embedders; made a pair, the worker runs only its headless engine."""
    mp = pytest.MonkeyPatch()
    mp.setenv("FAKE_STALE", "embedders")
    mp.setenv("FAKE_HOSTS", "2")
    try:
        out = run_fake("dgx", tmp_path, "--data", "SPARK_TOPOLOGY=tensor-parallel")
    finally:
        mp.undo()
    worker = [c for c in out["by_host"]["@fake/spark-2"] if "retire_services.py apply --stale" in c]
    assert len(worker) == 1 and "--stale --keep coder --quiet" in worker[0], worker  # only the engine is kept
    assert not any("retire_services.py apply" in c for c in out["by_host"]["@fake/spark-1"])  # the head keeps them all
