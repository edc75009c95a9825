"""The box's acceptance history: its shell commands run for real (a local `sh` stands in for the ssh hop only),
append/read round trips, baselines per configuration and workload, and refusal of malformed lines."""

from __future__ import annotations

import json
import os
import stat

import pytest

from sparkctl.config import groupdata
from sparkctl.config.hosts import HostConn
from sparkctl.errors import SettingError
from sparkctl.measure import history, record
from tests.conftest import typed
from tests.measure.test_acceptance import workload_part


class LocalHost(HostConn):
    """ssh_argv runs the remote command with a local sh: the commands are the box's, only the hop is skipped."""

    def ssh_argv(self, command: str | None = None) -> list[str]:
        return ["sh", "-c", command]


def rec(rate=18.3, *, revision="f" * 40, vllm="0.32.0", workload=("codegen", 1, "abc"), max_tokens=1024,
        box="spark-1", gate=True, tp=None, build=None) -> dict:
    r = {"schema": record.SCHEMA, "date": "2026-11-20T10:00:00Z", "model": {"key": "qwen3.8-27b"},
         "revision": revision, "vllm_version": vllm,
         "box": {"name": box, "simulated": False, **({"tensor_parallel_size": tp} if tp else {})}, "window_s": 10,
         "max_tokens": max_tokens, "ignore_eos": False, "temperature": 0.0,
         "workload": workload_part(*workload),
         "runs": [{"streams": 1, "counter_tokens_per_s": rate}], "prefill": []}
    if build:
        r["vllm_build"] = build
    if gate:
        r["gate"] = {"kind": "acceptance", "window_s": 10, "streams": [1], "prefill_tokens": []}
    return r


@pytest.fixture
def box(tmp_path):
    """(the box, its typed settings): the history lives under a throw-away STATE_DIR."""
    cfg = typed({**groupdata.load(["all", "gx10"]), "STATE_DIR": str(tmp_path / "state")})
    return LocalHost(name="spark-1", address="127.0.0.1"), cfg


def test_history_path_is_under_state_dir_and_the_schema_refuses_escapes(box):
    _host, cfg = box
    assert history.history_path(cfg) == f"{cfg.STATE_DIR}/acceptance/history.jsonl"
    for bad in ("/etc/passwd", "../x.jsonl", "", "acceptance/"):
        with pytest.raises(SettingError, match="ACCEPTANCE_HISTORY_FILE"):
            typed({**cfg.model_dump(), "ACCEPTANCE_HISTORY_FILE": bad})


def test_empty_history_reads_as_nothing(box):
    host, data = box
    assert history.read(host, data) == []


def test_append_read_round_trip_root_only_and_first_run_is_the_baseline(box):
    host, data = box
    first = history.append(host, data, rec(18.3), source="acceptance")
    second = history.append(host, data, rec(18.9), source="acceptance")
    assert first["history"]["baseline"] is True and second["history"]["baseline"] is False
    lines = history.read(host, data)
    assert [x["runs"][0]["counter_tokens_per_s"] for x in lines] == [18.3, 18.9]
    assert lines[0]["gate"]["kind"] == "acceptance"  # the record survives whole, gate part included
    assert lines[0]["history"]["id"] == history.record_id(rec(18.3))
    assert history.baseline_for(lines, rec(17.0))["history"]["id"] == first["history"]["id"]
    path = history.history_path(data)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert len(open(path).read().splitlines()) == 2  # append-only: one line each


def test_a_recorded_full_bench_becomes_the_new_baseline(box):
    host, data = box
    history.append(host, data, rec(18.3), source="acceptance")
    bench = history.append(host, data, rec(20.0, gate=False), source="bench", baseline=True)
    assert history.baseline_for(history.read(host, data), rec(19.0))["history"]["id"] == bench["history"]["id"]


@pytest.mark.parametrize("change", [dict(revision="e" * 40), dict(vllm="0.33.0"), dict(build="0.32.0-0123456789ab"),
                                    dict(box="spark-2"),
                                    dict(workload=("codegen", 2, "abc")), dict(workload=("mine", 1, "edited")),
                                    dict(max_tokens=256), dict(tp=2)])
def test_another_configuration_or_workload_has_its_own_baseline(box, change):
    """codegen-v1 with other prompts is no workload at all: refused (tests/measure/test_judge_records.py)."""
    host, data = box
    history.append(host, data, rec(18.3), source="acceptance")
    lines = history.read(host, data)
    other = rec(9.0, **change)
    assert history.baseline_for(lines, other) is None
    assert history.mismatch(lines[0], other)  # and says why
    assert history.append(host, data, other, source="acceptance")["history"]["baseline"] is True


def test_a_record_from_before_the_tensor_parallel_label_is_a_single_box_one(box):
    host, data = box
    first = history.append(host, data, rec(18.3), source="acceptance")  # no tensor_parallel_size: one box
    lines = history.read(host, data)
    assert history.baseline_for(lines, rec(18.0, tp=1))["history"]["id"] == first["history"]["id"]


def test_select_by_box_and_model_and_find_by_id_prefix(box):
    host, data = box
    a = history.append(host, data, rec(18.3), source="acceptance")
    history.append(host, data, rec(18.3, box="spark-2"), source="acceptance")
    lines = history.read(host, data)
    assert len(history.select(lines, box="spark-2")) == 1
    assert history.select(lines, model="laguna-s-2.1") == []
    assert history.find(lines, a["history"]["id"][:6])["box"]["name"] == "spark-1"
    with pytest.raises(record.BenchError, match="matches 0 lines"):
        history.find(lines, "zzzz")


def test_a_malformed_line_is_an_error_naming_it_never_skipped(box):
    host, data = box
    history.append(host, data, rec(18.3), source="acceptance")
    with open(history.history_path(data), "a") as f:
        f.write(json.dumps({"schema": record.SCHEMA, "date": "x"}) + "\n")
    with pytest.raises(record.BenchError, match="line 2"):
        history.read(host, data)


def test_a_failing_remote_command_is_a_clear_error(box):
    _host, data = box

    class Broken(LocalHost):
        def ssh_argv(self, command=None):
            return ["sh", "-c", "echo 'Permission denied' >&2; exit 255"]

    with pytest.raises(record.BenchError, match="exit 255.*Permission denied"):
        history.read(Broken(name="spark-1", address="x"), data)


# ---------------------------------------------------------------------------------------------------- the CLI

@pytest.fixture
def cli_box(box, monkeypatch, tmp_path):
    from sparkctl.measure import cli

    from sparkctl.check.load import host_config

    host, data = box
    monkeypatch.setattr(cli.hosts, "find", lambda name=None: host)
    config = host_config({**groupdata.load(["all", "gx10"]), "STATE_DIR": data.STATE_DIR})
    monkeypatch.setattr(cli, "load", lambda groups=None, host=None: config)  # the box's settings, validated
    return host, data


def test_bench_history_lists_the_box_lines_and_filters_by_model(cli_box, capsys):
    from sparkctl.__main__ import main

    host, data = cli_box
    line = history.append(host, data, rec(18.3), source="acceptance")
    assert main(["bench", "history"]) == 0
    out = capsys.readouterr().out
    assert line["history"]["id"] in out and "gate" in out and "1: 18.3" in out
    assert main(["bench", "history", "--model", "laguna-s-2.1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_bench_compare_against_the_baseline_and_refusing_another_workload(cli_box, tmp_path, capsys):
    from sparkctl.__main__ import main

    host, data = cli_box
    base = history.append(host, data, rec(18.3), source="acceptance")
    mine = record.write_record(rec(15.0), tmp_path / "a.json")
    assert main(["bench", "compare", str(mine), "--baseline"]) == 0
    out = capsys.readouterr().out
    assert "decode tok/s, 1 stream" in out and "1.22x" in out  # 18.3 / 15.0
    assert main(["bench", "compare", str(mine), f"@{base['history']['id'][:8]}"]) == 0
    capsys.readouterr()
    other = record.write_record(rec(15.0, workload=("codegen", 2, "zzz")), tmp_path / "b.json")
    assert main(["bench", "compare", str(other), "--baseline"]) == 2
    err = capsys.readouterr().err
    assert "no baseline" in err and "never lined up" in err and base["history"]["id"] in err
    assert main(["bench", "compare", str(mine)]) == 2  # neither B nor --baseline
