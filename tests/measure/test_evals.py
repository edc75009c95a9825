"""Paired pass/fail comparison and the exact McNemar test (check value 28/14/5/3 -> p = 0.7265625)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkctl.__main__ import main
from sparkctl.measure import evals

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "bench"
A = FIX / "evals-a_eval_results.json"  # BigCodeBench's own format
B = FIX / "evals-b.jsonl"  # plain JSON lines


def test_check_value():
    assert evals.mcnemar_exact(5, 3) == 0.7265625  # 2 * (1 + 8 + 28 + 56) / 256, the published 0.73
    assert round(evals.mcnemar_exact(5, 3), 2) == 0.73


@pytest.mark.parametrize("b, c, p", [(3, 5, 0.7265625), (8, 0, 2 / 256), (7, 1, 18 / 256), (0, 0, 1.0),
                                     (4, 4, 1.0), (1, 0, 1.0)])
def test_mcnemar_exact_values(b, c, p):
    assert evals.mcnemar_exact(b, c) == pytest.approx(p)


def test_compare_fixture_files():
    a, b = evals.load_results(A), evals.load_results(B)
    assert len(a) == len(b) == 50
    assert sum(a.values()) == 33 and sum(b.values()) == 31  # timeouts count as failures
    c = evals.compare(a, b)
    assert c.to_dict() == {"both_pass": 28, "both_fail": 14, "only_a": 5, "only_b": 3, "n": 50,
                           "p_value": 0.7265625}
    assert evals.unpaired_note(c) is None


def test_problems_in_one_file_only_are_reported_and_left_out(tmp_path):
    a = {"t1": True, "t2": False, "t3": True, "extra-a": True}
    b = {"t1": True, "t2": True, "t3": False, "extra-b1": False, "extra-b2": True}
    c = evals.compare(a, b)
    assert c.n == 3 and (c.both_pass, c.only_a, c.only_b) == (1, 1, 1)
    assert c.only_in_a == ("extra-a",) and c.only_in_b == ("extra-b1", "extra-b2")
    note = evals.unpaired_note(c, "qwen", "laguna")
    assert "1 problem(s) only in qwen" in note and "2 problem(s) only in laguna" in note and "left out" in note


def test_bigcodebench_multiple_samples_refused(tmp_path):
    p = tmp_path / "x_eval_results.json"
    p.write_text(json.dumps({"eval": {"BigCodeBench/0": [{"status": "pass"}, {"status": "fail"}]}}))
    with pytest.raises(evals.EvalsError, match="exactly one"):
        evals.load_results(p)


@pytest.mark.parametrize("text, match", [
    ('{"task_id": "a", "passed": true}\n{"task_id": "a", "passed": false}\n', "appears twice"),
    ('{"task_id": "a", "passed": "yes"}\n', "expected"),
    ("not json\n", "not JSON"),
    ('{"results": {}}', "without an \"eval\" object"),
    ("[1, 2]", "a JSON list"),
    ("\n\n", "no problems"),
])
def test_bad_files(tmp_path, text, match):
    p = tmp_path / "r.jsonl"
    p.write_text(text)
    with pytest.raises(evals.EvalsError, match=match):
        evals.load_results(p)


def test_single_line_jsonl(tmp_path):
    p = tmp_path / "one.jsonl"
    p.write_text('{"task_id": "BigCodeBench/7", "passed": true}')
    assert evals.load_results(p) == {"BigCodeBench/7": True}


def test_cli_json(capsys):
    assert main(["evals", "compare", str(A), str(B), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"both_pass": 28, "both_fail": 14, "only_a": 5, "only_b": 3, "n": 50, "p_value": 0.7265625}


def test_cli_json_reports_unpaired_on_stderr(tmp_path, capsys):
    extra = tmp_path / "b.jsonl"
    extra.write_text(B.read_text() + '{"task_id": "BigCodeBench/99", "passed": true}\n')
    assert main(["evals", "compare", str(A), str(extra), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["n"] == 50
    assert "BigCodeBench/99" in captured.err and "left out" in captured.err


def test_cli_table(capsys):
    assert main(["evals", "compare", str(A), str(B), "--names", "qwen,laguna"]) == 0
    out = capsys.readouterr().out
    assert "qwen vs laguna: 50 paired problems" in out and "0.7266" in out


def test_cli_errors_are_operator_messages(tmp_path, capsys):
    assert main(["evals", "compare", str(A), str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl" in capsys.readouterr().err
