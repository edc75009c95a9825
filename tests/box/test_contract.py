"""The box boundary (sparkctl/box/contract.py): the deploy and the box-side rollout cannot disagree about an
argument, a setting's value, a phase, an outcome or a field of the documents they exchange."""

from __future__ import annotations

import fnmatch
import json
import os
import shlex
import stat
import sys
from pathlib import Path

import pytest

from sparkctl import REPO_ROOT
from sparkctl.box import boxio, contract
from sparkctl.config import groupdata
from sparkctl.config.schema import GroupData
from tests.box.test_rollout_box import ROLLOUT, box  # noqa: F401  (the fixture)

sys.path.insert(0, str(ROLLOUT.parent))  # the box scripts import each other by file name, as on the box
import rollout_txn  # noqa: E402


def parse(argv: list[str]):
    return contract.parse(argv)


def test_every_failure_has_its_own_exit_code_and_every_outcome_its_own_name():
    names = [o.name for o in contract.OUTCOMES]
    assert len(names) == len(set(names))
    failures = [o.code for o in contract.OUTCOMES if o.code != 0]
    assert len(failures) == len(set(failures)), sorted(failures)
    assert contract.SUCCEEDED == {contract.READY, contract.UNCHANGED, contract.RESTARTED, contract.AWAITING}
    assert contract.ROLLED_BACK in contract.SERVING and contract.ROLLBACK_FAILED not in contract.SERVING
    assert not contract.SERVING & {o.name for o in contract.OUTCOMES if not o.recorded}  # results only


def test_a_refused_command_line_is_not_taken_for_an_outcome():
    with pytest.raises(SystemExit) as exc:
        parse(["apply", "coder", "--port", "8000"])
    assert exc.value.code == contract.code(contract.USAGE) != contract.code(contract.NOTHING_STAGED)


def test_every_phase_has_one_step_and_every_transition_names_known_phases():
    assert set(rollout_txn.STEPS) == set(contract.PHASES) - {contract.IDLE}
    for before, after in contract.TRANSITIONS.items():
        assert before in contract.PHASES and set(after) <= set(contract.PHASES), before
    assert set(contract.TRANSITIONS) == set(contract.PHASES)
    assert set(contract.FORWARD) | set(rollout_txn.RESUMED) == set(contract.PHASES) - {contract.IDLE}


@pytest.mark.parametrize("before, after", [(contract.IDLE, contract.COMMITTED), (contract.COMMITTED, contract.PREPARED),
                                           (contract.ROLLING_BACK, contract.COMMITTED),
                                           (contract.AWAITING_VERDICT, contract.PREPARED),
                                           (contract.PREPARED, contract.IDLE)])
def test_the_phase_writer_refuses_a_transition_the_table_does_not_allow_and_writes_nothing(tmp_path, before,
                                                                                          after):
    p = rollout_txn.Paths("coder")
    p.state = str(tmp_path / "state.json")
    boxio.write_json(p.state, {"phase": before, "id": "t0"})
    txn = rollout_txn.Txn(p, print)
    with pytest.raises(rollout_txn.c.TransitionRefused, match="may not go from phase"):  # the box's own import
        txn.set_phase(after)
    assert json.loads(Path(p.state).read_text())["phase"] == before


def test_the_parser_takes_exactly_the_arguments_of_the_table():
    ap = contract.parser()
    sub = next(a for a in ap._actions if a.dest == "cmd").choices
    assert set(sub) == set(contract.COMMANDS)
    for command, p in sub.items():
        flags = {s for a in p._actions if a.dest != "help" for s in (a.option_strings or [a.dest])}
        assert flags == {a.flag for a in contract.args_of(command)}, command


def test_every_setting_of_the_table_is_a_setting_of_the_schema_with_its_type():
    data = groupdata.load(["all"])
    for a in contract.ARGS:
        if a.setting:
            assert a.setting in data and GroupData.model_fields[a.setting].annotation is a.type, a.setting


def applies(out: dict, host: str) -> dict[str, list[str]]:
    """service -> the argv after rollout.py of each `rollout.py apply` the deploy sent to the host."""
    from tests.render.test_topologies import cmds
    found = {}
    for c in cmds(out, host):
        if "rollout.py apply" in c:
            words = shlex.split(c)
            found[words[words.index("apply") + 1]] = words[words.index("apply"):]
    return found


def test_what_the_deploy_sends_parses_on_the_box_to_exactly_the_settings_and_facts(tmp_path):
    """The real deploy (@fake, a tensor-parallel pair: the head's coder waits for its verdict, the worker follows
    its head) renders its calls; the box's own parser reads every setting back as its group-data value."""
    from tests.standins.gx10_inventory import _data as fake_overrides
    from tests.render.test_topologies import run_pair

    out = run_pair(tmp_path, "tensor-parallel")
    data = {**groupdata.load(["all", "gx10"]), **fake_overrides}
    head, worker = applies(out, "spark-1"), applies(out, "spark-2")
    assert set(head) == {"coder", "embed-qwen3", "embed-bge-m3"} and set(worker) == {"coder"}
    for service, argv in [*head.items(), *[(f"worker {s}", a) for s, a in worker.items()]]:
        ns = parse(argv)
        for a in contract.args_of("apply"):
            if a.setting:
                assert getattr(ns, a.dest) == data[a.setting], (service, a.flag)
        assert ns.port and ns.served and ns.kind in contract.KINDS
    assert head["coder"] and parse(head["coder"]).verdict_timeout == data["ACCEPTANCE_VERDICT_TIMEOUT_S"]
    assert parse(head["coder"]).verdict_default == "rollback" and parse(head["coder"]).peer_status_cmd is None
    w = parse(worker["coder"])
    assert w.kind == "none" and w.peer_status_cmd and w.peer_timeout > 0 and w.verdict_timeout is None
    assert parse(head["embed-qwen3"]).verdict_timeout is None


def test_the_transient_units_command_line_is_the_same_call():
    settings = {name: groupdata.load(["all"])[name] for name in contract.SETTINGS}
    apply = parse(contract.argv("apply", settings, service="coder", port=8000, served="coder", kind="chat",
                                verdict_timeout=30, verdict_default="commit"))
    run = parse(contract.forward("apply", vars(apply), txn="t1"))
    assert {**vars(apply), "cmd": "run"} == {k: v for k, v in vars(run).items() if k not in ("txn", "restart_only",
                                                                                           "reason")}
    restart = parse(contract.argv("restart", settings, service="coder", port=8000, served="coder", kind="chat",
                                  reason="watchdog", wait=True))
    run = parse(contract.forward("restart", vars(restart), txn="t2", restart_only=True))
    assert run.restart_only and run.txn == "t2" and run.reason == "watchdog"
    assert all(getattr(run, a.dest) == getattr(restart, a.dest) for a in contract.args_of("restart")
               if a.dest != "wait")


def test_argv_refuses_a_call_the_box_would_refuse():
    settings = {name: groupdata.load(["all"])[name] for name in contract.SETTINGS}
    facts = {"service": "coder", "port": 8000, "served": "coder", "kind": "chat"}
    with pytest.raises(ValueError, match="HEALTH_READY_TIMEOUT_S"):
        contract.argv("apply", {**settings, "HEALTH_READY_TIMEOUT_S": "30m"}, **facts)
    with pytest.raises(ValueError, match="--verdict-timeout needs --verdict-default"):
        contract.argv("apply", settings, **facts, verdict_timeout=30)
    with pytest.raises(ValueError, match="--port"):
        contract.argv("apply", settings, **{**facts, "port": None})
    with pytest.raises(ValueError, match="not one of chat, embed, none"):
        contract.argv("restart", settings, **{**facts, "kind": "headless"})
    with pytest.raises(ValueError, match="--kind none needs --peer-status-cmd"):  # a worker never restarts alone
        contract.argv("restart", settings, **{**facts, "kind": "none"})
    with pytest.raises(KeyError):
        contract.argv("apply", {k: v for k, v in settings.items() if k != "DRAIN_TIMEOUT_S"}, **facts)


def test_the_documents_have_exactly_the_contracts_fields(box):  # noqa: F811
    box.stage("qwen")
    assert box.run().returncode == 0
    box.break_model("broken")
    box.stage("broken")
    assert box.run(txn="t2").returncode == contract.code(contract.ROLLED_BACK)
    st = box.status()
    assert tuple(st) == contract.STATUS_FIELDS
    assert tuple(st["failed"]) == contract.FAILED_FIELDS and tuple(st["last"]) == contract.LAST_FIELDS
    result = box.result()
    assert set(contract.RESULT_REQUIRED) <= set(result) <= set(contract.RESULT_FIELDS)
    assert result["rc"] == contract.code(result["outcome"])
    line = box.cli("follow", "coder", "--txn", "t2").stdout.splitlines()[-1]
    assert tuple(json.loads(line[3:])) == contract.FOLLOW_FIELDS


def test_one_atomic_write_creates_every_file_with_its_own_mode(tmp_path):
    old = os.umask(0o077)  # a umask never widens nor narrows what is written
    try:
        boxio.write_atomic(str(tmp_path / "facts.prom"), "x 1\n", 0o644)
    finally:
        os.umask(old)
    old = os.umask(0)
    try:
        boxio.write_atomic(str(tmp_path / "key.conf"), "secret", 0o600)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "facts.prom").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(tmp_path / "key.conf").st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["facts.prom", "key.conf"]  # no temporary file left
    # a symlink planted at the temporary name is never followed: nothing is written through it
    target = tmp_path / "elsewhere"
    (tmp_path / f".key.conf.{os.getpid()}.tmp").symlink_to(target)
    with pytest.raises(OSError):
        boxio.write_atomic(str(tmp_path / "key.conf"), "new", 0o600)
    assert not target.exists() and (tmp_path / "key.conf").read_text() == "secret"


def test_the_control_side_reads_outcomes_by_name_never_by_exit_code():
    for path in (REPO_ROOT / "tasks").glob("*.py"):
        text = path.read_text()
        assert '.get("rc")' not in text and '["rc"]' not in text, path


def test_the_docs_list_every_outcome_with_its_exit_code():
    rows = {}
    for line in (REPO_ROOT / "docs" / "what-happens-when.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`") and cells[1].isdigit():
            rows[cells[0].strip("`")] = (int(cells[1]), cells[2] == "yes")
    assert rows == {o.name: (o.code, o.recorded) for o in contract.OUTCOMES}


FILES = ("env", "env_next", "unit", "unit_next", "stamp", "txn", "result", "log", "failed", "current", "restarting",
         "state")


@pytest.mark.parametrize("service", ["coder", "embed-qwen3"])
def test_every_file_of_a_service_is_found_by_its_glob_and_named_back(service):
    """box_textfile.py, `sparkctl status` and the venv pruning find a service's files by the glob of service "*"
    and read the service's name back from the path: the same layout the transaction writes."""
    one = contract.Paths(service, "/etc/sparkctl", contract.rollout_dir("/var/lib/sparkctl"))
    every = contract.Paths("*", "/etc/sparkctl", contract.rollout_dir("/var/lib/sparkctl"))
    pairs = [(getattr(one, f), getattr(every, f)) for f in FILES] + \
        [(one.snapshot[k], every.snapshot[k]) for k in one.snapshot]
    for path, pattern in pairs:
        assert fnmatch.fnmatchcase(path, pattern) and contract.service_of(path, pattern) == service, (path, pattern)
    assert len({p for p, _ in pairs}) == len(pairs)  # no two files of a service share a path
    assert not fnmatch.fnmatchcase(one.env_next, every.env) and not fnmatch.fnmatchcase(one.unit_next, every.unit)


def test_the_transaction_keeps_its_files_where_the_contract_says(monkeypatch):
    monkeypatch.setattr(rollout_txn, "ENV_DIR", "/srv/env")
    monkeypatch.setattr(rollout_txn, "STATE_DIR", "/srv/state")
    assert vars(rollout_txn.Paths("coder")) == vars(contract.Paths("coder", "/srv/env", "/srv/state/rollout"))


@pytest.mark.parametrize("passed, mode, decided", [(True, "fail", "commit"), (False, "fail", "rollback"),
                                                   (True, "warn", "commit"), (False, "warn", "commit")])
def test_the_acceptance_decision_keeps_in_warn_mode_and_rolls_a_failure_back_otherwise(passed, mode, decided):
    assert contract.decision(passed, mode) == decided
