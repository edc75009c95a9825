"""A tensor-parallel pair's link judged before its swap (issue 39 item 7; tasks/rollout.py link_before_swap, the pure
parts in sparkctl/render/link.py): both boxes run their rank of sparkctl/box/link_probe.py at once (one greenlet
each, as pyinfra runs one op on every host), each waits for the other's result, both are judged against
LINK_MIN_BUSBW_GBPS. Below it, the pair's rollout ops start nothing on either box (no `rollout.py apply`: both
services untouched) and the refusal, with the measured figure and the setting, goes to the health step's report."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field

import gevent
import pytest

import tasks.rollout as glue
from sparkctl.box import link_probe
from sparkctl.render import link
from tests.render.test_topologies import PAIR, settings_pair

SERVICE = "coder"
FLOOR = 15.0  # LINK_MIN_BUSBW_GBPS on a GX10 (group_data/all.py)


def probe_line(rank: int, busbw: float) -> str:
    return json.dumps({"rank": rank, "world": 2, "backend": "nccl", "device": "cuda:0", "bytes": 1 << 30, "iters": 20,
                       "warmup": 5, "seconds": 0.1, "algbw_gbps": busbw, "busbw_gbps": busbw})


@dataclass
class Output:
    stdout_lines: list[str]
    stderr_lines: list[str] = field(default_factory=list)


@dataclass
class Box:
    """A box as the glue sees it: its name, its log, and what its shell answers (every command is recorded)."""

    name: str
    answer: str
    commands: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    def run_shell_command(self, command, **_kw):
        self.commands.append(str(command))
        gevent.sleep(0.01 * (1 + len(self.commands)))  # the ranks finish at different moments
        return True, Output([self.answer])

    def log(self, text: str) -> None:
        self.lines.append(text)

    def log_styled(self, text: str, **_kw) -> None:
        self.lines.append(text)


class Gate:
    def __init__(self):
        self.recorded = {}

    def record(self, box: str, ok: bool) -> None:
        self.recorded[box] = ok


def swap(monkeypatch, answers: dict[str, str]) -> tuple[glue.RolloutLedger, dict[str, Box], list[str]]:
    """The probe op on both boxes at once, then the worker's transaction start and the head's rollout (each would
    run `rollout.py apply`: recorded in `applied`)."""
    monkeypatch.setattr(glue, "connector_args", lambda host: {})
    applied: list[str] = []
    monkeypatch.setattr(glue, "_apply", lambda host, kw, service, cmd: applied.append(host.name) or {"txn": "t"})
    monkeypatch.setattr(glue, "_follow", lambda state, host, service, *a, **k: applied.append(host.name) or True)
    ledger = glue.RolloutLedger()
    ledger.gates[SERVICE] = Gate()
    pair = tuple(PAIR)
    boxes = {b: Box(b, answers[b]) for b in pair}
    checks = {b: glue.LinkCheck(pair, SERVICE, f"probe rank {pair.index(b)}", 5.0, FLOOR) for b in pair}
    ledger.links.setdefault(pair, {})
    greenlets = [gevent.spawn(glue._probe_link, None, boxes[b], ledger, checks[b]) for b in pair]
    gevent.joinall(greenlets, timeout=10, raise_error=True)
    assert all(g.value is True for g in greenlets)  # a refusal fails no op: the box is untouched
    glue._start(None, boxes[pair[1]], ledger, SERVICE, "apply")
    glue._follow_in_wave(None, boxes[pair[0]], ledger, SERVICE, "apply", None, 0.01)
    return ledger, boxes, applied


def test_a_link_below_the_floor_leaves_both_boxes_untouched_and_says_why(monkeypatch):
    head, worker = PAIR
    ledger, boxes, applied = swap(monkeypatch, {head: probe_line(0, 5.2), worker: probe_line(1, 5.1)})
    assert applied == []  # no rollout.py apply on either box: nothing drained, stopped or installed
    assert [c for b in boxes.values() for c in b.commands] == ["probe rank 0", "probe rank 1"]
    why = ledger.link_refused[(tuple(PAIR), SERVICE)]
    assert f"{head}: busbw 5.20 GB/s (below the floor)" in why and "LINK_MIN_BUSBW_GBPS = 15 GB/s" in why
    for box in PAIR:  # the health step fails each box after everything else, with the figure and the setting
        line = ledger.known_failed[box][0]
        assert "link was judged before its swap and refused" in line and "busbw 5.1" in line
        assert "LINK_MIN_BUSBW_GBPS = 15 GB/s" in line and "nothing was stopped" in line
    assert ledger.gates[SERVICE].recorded == {head: False}  # a unit that did not roll out, for the wave's budget
    assert glue._join(None, boxes[worker], ledger, SERVICE, None, 0.01) is True  # the worker follows nothing
    # the head's other services (its embedders) are not the pair's: their rollouts go on
    ledger.gates["embed-bge-m3"] = Gate()
    glue._follow_in_wave(None, boxes[head], ledger, "embed-bge-m3", "apply", None, 0.01)
    assert applied == [head] and len(ledger.known_failed[head]) == 1


def test_a_link_at_the_floor_lets_the_swap_go(monkeypatch):
    head, worker = PAIR
    ledger, boxes, applied = swap(monkeypatch, {head: probe_line(0, 22.4), worker: probe_line(1, 22.3)})
    assert applied == [worker, head] and not ledger.link_refused and not ledger.known_failed
    assert any("busbw 22.40 GB/s" in x and "LINK_MIN_BUSBW_GBPS = 15 GB/s" in x for x in boxes[head].lines)


def test_a_rank_that_fails_refuses_the_swap(monkeypatch):
    head, worker = PAIR
    broken = json.dumps({"rank": 1, "error": "DistStoreError: timed out waiting for the rendezvous"})
    ledger, _, applied = swap(monkeypatch, {head: probe_line(0, 22.4), worker: broken})
    assert applied == [] and "the probe failed (DistStoreError" in ledger.link_refused[(tuple(PAIR), SERVICE)]


def test_judge_pair_names_each_rank_and_the_setting():
    ok, why = link.judge_pair({"a": json.loads(probe_line(0, 3.0))}, ("a", "b"), 0.0)
    assert not ok and "b: the probe failed (no result)" in why and "no floor (LINK_MIN_BUSBW_GBPS = 0)" in why
    ok, why = link.judge_pair({"a": json.loads(probe_line(0, 3.0)), "b": json.loads(probe_line(1, 3.0))}, ("a", "b"),
                              0.0)
    assert ok and "an all-reduce of 1,073,741,824 bytes x 20 (nccl)" in why


@pytest.mark.parametrize("groups", [("all", "gx10"), ("all", "gx10", "sim")])
def test_each_boxs_probe_is_a_command_line_the_probe_accepts(gx10_data, groups):
    from sparkctl.config import groupdata
    data = {**gx10_data, **{k: v for k, v in groupdata.load(list(groups)).items() if k.startswith(("LINK_",
                                                                                                   "REHEARSE_LINK"))}}
    s = settings_pair(data, "tensor-parallel")
    for rank, box in enumerate(PAIR):
        cfg, role = s[box].cfg, s[box].role
        check = glue.link_check(cfg, role, box, SERVICE)
        argv = shlex.split(str(check.command))
        assert argv[:2] == ["timeout", f"{cfg.REHEARSE_LINK_TIMEOUT_S:g}"] and check.pair == tuple(PAIR)
        script = argv.index(f"{cfg.SPARKCTL_HOME}/bin/link_probe.py")
        a = link_probe.parse(argv[script + 1:])  # the probe's own parser
        assert (a.rank, a.world, a.port, a.bytes, a.backend) == (rank, 2, cfg.REHEARSE_LINK_PORT,
                                                                cfg.LINK_PROBE_BYTES, cfg.LINK_PROBE_BACKEND)
        assert a.master == s[PAIR[0]].role.address  # the head's CX7 address
        assert check.floor_gbps == cfg.LINK_MIN_BUSBW_GBPS
