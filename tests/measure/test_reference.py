"""The reference order of the speed gate (issue 20): every change is judged against something measured and the verdict
names it. Same configuration: its baseline; a new vLLM version, build or revision: the previous configuration's
baseline with its own limits; a model's first flip: the catalog's published figures with their wider tolerance and
the roofline beside them; nothing at all: the roofline and the KV plan only. Another workload or stream count is
never lined up. Judged through quick.judge_record, the function the deploy and `bench judge` both call."""

from __future__ import annotations

import json

import pytest

from sparkctl.check.load import host_config
from sparkctl.config import groupdata
from sparkctl.measure import history, labels, quick, reference
from tests.measure.test_acceptance import quick_record

ALL = groupdata.load(["all", "gx10"])
QWEN_REPO = "unsloth/Qwen3.8-27B-NVFP4"


def rec(decode=(18.3, 73.0), prefill=2088.0, *, vllm="0.32.0", build="0.32.0-aaaaaaaaaaaa", revision="f" * 40,
        repo=QWEN_REPO, workload=("codegen", 1, "abc"), ignore_eos=False, tp=None, box="spark-1") -> dict:
    r = quick_record(decode=decode, prefill=prefill, workload=workload)
    r.update(vllm_version=vllm, vllm_build=build, revision=revision, ignore_eos=ignore_eos)
    r["model"] = {"key": "qwen3.8-27b", "repo": repo}
    r["box"] = {"name": box, "simulated": False, **({"tensor_parallel_size": tp} if tp else {})}
    return r


def line(r: dict, baseline: bool = True, reference_tag: dict | None = None) -> dict:
    return history.make_line(r, baseline=baseline, source="acceptance", reference=reference_tag)


def judge(r: dict, lines: list[dict], **settings):
    return quick.judge_record(r, host_config({**ALL, **settings}), lines)


# ---------------------------------------------------------------------------------------------------- 1: baseline

def test_the_same_configurations_baseline_comes_first():
    old, base = line(rec(vllm="0.31.0", build="0.31.0-bbbbbbbbbbbb")), line(rec())
    v = judge(rec(decode=(17.9, 72.0)), [old, base])
    assert v.reference.kind == "baseline" and v.baseline_id == base["history"]["id"]
    assert v.reason().startswith(f"acceptance passed against baseline {base['history']['id']} (decode at 1 stream")


# ---------------------------------------------------------------------------------------------------- 2: previous

def test_an_upgrade_78_percent_slower_fails_against_the_previous_versions_baseline():
    base = line(rec())
    upgrade = rec(decode=(4.0, 16.0), vllm="0.33.0", build="0.33.0-cccccccccccc")
    v = judge(upgrade, [base])
    assert v.reference.kind == "previous" and v.decision == "rollback"
    name = f"the previous vLLM 0.32.0 baseline {base['history']['id']}"
    assert v.reference.name == name and v.reason().startswith(f"acceptance failed (against {name}): ")
    d1 = next(c for c in v.failures if c.figure == "decode tok/s, 1 stream")
    assert (d1.measured, d1.expected, d1.against, d1.baseline_id) == (4.0, 18.3, "previous baseline",
                                                                      base["history"]["id"])
    assert d1.delta_pct == pytest.approx(-78.1, abs=0.1)
    assert d1.threshold == pytest.approx(18.3 * (1 - ALL["ACCEPTANCE_PREVIOUS_DECODE_MAX_REGRESSION"]))


def test_an_upgrade_5_percent_slower_passes_and_says_against_what():
    base = line(rec())
    v = judge(rec(decode=(18.3 * 0.95, 73.0 * 0.95), prefill=2088 * 0.95, vllm="0.33.0", build="0.33.0-c"), [base])
    assert v.passed, v.reason()
    assert v.reason().startswith(f"acceptance passed against the previous vLLM 0.32.0 baseline {base['history']['id']}")
    assert "this run becomes its configuration's baseline" in v.reason()


def test_the_previous_configuration_has_its_own_limits():
    base = line(rec())
    slower = rec(decode=(12.8, 51.1), prefill=1462.0, vllm="0.33.0", build="0.33.0-c")  # -30 %
    assert not judge(slower, [base]).passed
    v = judge(slower, [base], ACCEPTANCE_PREVIOUS_DECODE_MAX_REGRESSION=0.35,
              ACCEPTANCE_PREVIOUS_PREFILL_MAX_REGRESSION=0.35)
    assert v.passed, v.reason()
    assert not judge(rec(decode=(12.8, 51.1), prefill=1462.0), [base],  # the same figures on the same configuration
                     ACCEPTANCE_PREVIOUS_DECODE_MAX_REGRESSION=0.35, ACCEPTANCE_PREVIOUS_PREFILL_MAX_REGRESSION=0.35).passed


def test_a_rebuilt_venv_of_the_same_version_is_judged_against_the_previous_build():
    base = line(rec())
    v = judge(rec(decode=(4.0, 16.0), build="0.32.0-dddddddddddd"), [base])
    assert v.reference.kind == "previous" and not v.passed
    assert v.reference.name == f"the previous vLLM build 0.32.0-aaaaaaaaaaaa baseline {base['history']['id']}"


def test_a_line_written_before_builds_were_recorded_is_readable_and_counts_as_another_build():
    old = rec()
    del old["vllm_build"]
    (parsed,) = history.parse(history.serialize(line(old)))
    v = judge(rec(decode=(4.0, 16.0)), [parsed])
    assert v.reference.kind == "previous" and not v.passed
    assert "vLLM build 0.32.0 (build not recorded)" in v.reference.name


def test_a_new_checkpoint_revision_is_judged_against_the_previous_revision():
    base = line(rec())
    v = judge(rec(decode=(4.0, 16.0), revision="e" * 40), [base])
    assert v.reference.name == f"the previous revision ffffffff baseline {base['history']['id']}" and not v.passed


def test_the_previous_configuration_is_the_newest_and_its_baseline_not_its_last_run():
    v31 = line(rec(decode=(30.0, 90.0), vllm="0.31.0", build="0.31.0-b"))
    v32 = line(rec())
    v32_later = line(rec(decode=(16.0, 64.0)), baseline=False)  # accepted 12.6 % slower: within the limit
    v = judge(rec(decode=(15.6, 62.0), vllm="0.33.0", build="0.33.0-c"), [v31, v32, v32_later])
    assert v.baseline_id == v32["history"]["id"]  # 0.32.0's yardstick, not 0.31.0's nor its slower last run
    assert not v.passed  # 4 streams -15.1 % from 0.32.0's baseline, -3.1 % from its last run: no creeping yardstick
    assert {c.figure for c in v.failures if c.against == "previous baseline"} == {"decode tok/s, 4 streams"}
    # and 0.31.0's 30 tok/s is this box's anchor: 15.6 is 48 % below it, beyond the cumulative limit
    assert {c.against for c in v.failures} == {"previous baseline", "anchor"}


@pytest.mark.parametrize("other", [dict(box="spark-2"), dict(tp=2), dict(workload=("codegen", 2, "abc")),
                                   dict(ignore_eos=True)])
def test_another_box_topology_or_workload_is_never_a_previous_configuration(other):
    theirs = line(rec(**other))
    v = judge(rec(decode=(4.0, 16.0), vllm="0.33.0", build="0.33.0-c"), [theirs])
    assert v.reference.kind == "published" and v.baseline_id is None


# ---------------------------------------------------------------------------------------------------- 3: published

def test_a_first_flip_is_judged_against_the_catalogs_published_figures_with_their_tolerance():
    v = judge(rec(decode=(14.0, 60.0), prefill=1700.0), [])  # -23 %, -18 %, -19 %: inside the published 30 %
    assert v.passed, v.reason()
    ref = v.reference
    assert (ref.kind, ref.name, ref.id) == ("published", "the catalog's published figures for qwen3.8-27b", None)
    assert ref.decode == {1: 18.3, 2: 40.0, 4: 73.0, 8: 122.0} and ref.prefill == {12288: 2088.0}
    assert "model-decision-writeup.md" in ref.provenance
    assert any("judged against the catalog's published figures" in n and "model-decision-writeup.md" in n
               for n in v.notes)
    by = {c.figure: c for c in v.checks}
    assert by["decode tok/s, 1 stream"].threshold == pytest.approx(18.3 * (1 - 0.3))
    assert by["decode tok/s, 1 stream"].against == "published"
    assert by["decode vs roofline, 1 stream"].note == "32.8 % of roofline"  # the planner's roofline beside it
    slow = judge(rec(decode=(12.0, 60.0)), [])  # -34 %
    assert [c.figure for c in slow.failures] == ["decode tok/s, 1 stream"]
    assert not judge(rec(decode=(14.0, 60.0)), [], ACCEPTANCE_PUBLISHED_DECODE_MAX_REGRESSION=0.15).passed


def test_laguna_first_flip_uses_its_own_published_figures():
    r = rec(decode=(45.0, 95.0), prefill=3500.0, repo="poolside/Laguna-S-2.1-NVFP4")
    r["model"]["key"] = "laguna-s-2.1"
    r["runs"][0]["spec_decode"] = {"acceptance_rate": 0.58, "tokens_per_step": 5.06}
    v = judge(r, [])
    assert v.passed, v.reason()
    assert v.reference.decode[4] == 96.0 and v.reference.prefill[12288] == 3550.0


@pytest.mark.parametrize("key", ["qwen3.8-27b", "laguna-s-2.1"])
def test_the_published_figures_agree_with_the_catalog_and_clear_the_roofline_floor(key):
    spec = quick.coder_spec(host_config(ALL), key)
    pub = reference.published_of(spec)
    assert pub.decode[1] == spec.memory.measured_decode_tokens_per_s and pub.checkpoint == spec.checkpoint.repo
    roofline, _ = labels.roofline_single_stream(host_config({**ALL, "CODING_MODEL": key}))
    pct = {n: tok / (n * roofline) for n, tok in pub.decode.items()}
    # the floor with nothing measured must never fail a box that performs like the production one
    assert min(pct.values()) > ALL["ACCEPTANCE_ROOFLINE_FLOOR_FRACTION"], pct
    assert max(pct.values()) < 1.0  # and the roofline is an upper bound of every published figure


@pytest.mark.parametrize("other,why", [
    (dict(repo="sim/tiny-qwen"), "measured on unsloth/Qwen3.8-27B-NVFP4, this run serves sim/tiny-qwen"),
    (dict(tp=2), "measured on one box, this run on a tensor-parallel pair of 2"),
    (dict(ignore_eos=True), "measured with ignore_eos False (this run: True)"),
    (dict(workload=("codegen", 2, "abc")), "measured with workload 'codegen-v1' (this run: 'codegen-v2')")])
def test_published_figures_of_another_checkpoint_topology_or_workload_are_refused(other, why):
    v = judge(rec(decode=(1.0, 2.0), **other), [])
    assert v.reference.kind == "none"
    assert any(why in n for n in v.notes), v.notes
    assert not any(c.against == "published" for c in v.checks)


def test_a_stream_count_the_reference_lacks_is_not_compared_and_the_verdict_says_so():
    r = rec(decode=(18.3, 30.0))
    r["runs"][1]["streams"] = 3
    v = judge(r, [])
    assert [c.figure for c in v.checks if c.against == "published"] == ["decode tok/s, 1 stream",
                                                                        "prefill tok/s, 12288 tokens"]
    assert any("3 streams" in n and "never lined up with another stream count" in n for n in v.notes)
    base = rec()
    base["runs"] = base["runs"][:1]
    # the baseline measured 1 stream only: it hands 4 streams to the next reference that has them, the published
    v = judge(rec(decode=(18.3, 1.0)), [line(base)])
    assert not v.passed and any("4 streams" in n and "judged against the next reference" in n for n in v.notes)
    (c,) = [c for c in v.failures if c.against == "published"]
    assert (c.figure, c.measured, c.expected) == ("decode tok/s, 4 streams", 1.0, 73.0)


# ---------------------------------------------------------------------------------------------------- 4: none

def test_nothing_measured_says_roofline_and_kv_plan_only_never_a_silent_pass():
    v = judge(rec(repo="someone/else"), [])
    assert v.passed and v.reference.kind == "none"
    assert v.reason().startswith("acceptance passed against the roofline and the KV plan only (decode at 1 stream")
    assert [n for n in v.notes if n.startswith("passed over")] == [
        "passed over: baseline: this box has none of this configuration and workload yet",
        "passed over: previous: this box accepted no run of this model, workload and topology under another vLLM "
        "build or revision",
        "passed over: published: qwen3.8-27b's published figures were measured on unsloth/Qwen3.8-27B-NVFP4, this "
        "run serves someone/else"]
    assert {c.against for c in v.checks if c.judged} >= {"roofline", "plan"}


def test_the_simulated_sparks_first_flip_is_judged_on_the_roofline_and_kv_plan_only():
    sim = groupdata.load(["all", "gx10", "sim"])
    r = rec(decode=(900.0, 1500.0), repo="sim/tiny-qwen", ignore_eos=True)
    v = quick.judge_record(r, host_config({**sim, "ACCEPTANCE_DECODE_ENABLED": True}), [])
    assert v.reference.kind == "none" and v.passed
    assert any("roofline floor is off" in n for n in v.notes)  # a GB10's roofline means nothing on 2 CPU cores


def test_with_both_speed_comparisons_off_no_reference_is_claimed():
    base = line(rec())
    v = judge(rec(decode=(1.0, 2.0)), [base], ACCEPTANCE_DECODE_ENABLED=False, ACCEPTANCE_PREFILL_ENABLED=False)
    assert v.passed and v.reference.kind == "off" and v.baseline_id is None
    assert v.reason().startswith("acceptance passed against its floors and the KV plan only, decode and prefill "
                                 "comparisons off")
    assert "becomes" not in v.reason() and not any(c.judged for c in v.checks if c.against == "roofline")
    only_prefill = judge(rec(decode=(1.0, 2.0)), [base], ACCEPTANCE_DECODE_ENABLED=False)
    assert only_prefill.reference.kind == "baseline" and only_prefill.passed  # decode is not compared


# ---------------------------------------------------------------------------------------------------- labels

def test_the_build_label_is_the_versioned_venv_and_changes_with_a_constraint():
    sim = groupdata.load(["all", "gx10", "sim"])
    build = labels.build_labels(host_config(sim))["vllm_build"]
    assert build.startswith("0.32.0-") and len(build) == len("0.32.0-") + 12
    rebuilt = {**sim, "VLLM_PIP_CONSTRAINTS": sim["VLLM_PIP_CONSTRAINTS"] + ["numpy<2.3"]}
    other = labels.build_labels(host_config(rebuilt))["vllm_build"]
    assert other != build and other.startswith("0.32.0-")


def test_the_verdict_dict_carries_the_reference_and_is_json():
    d = judge(rec(), []).to_dict()
    assert json.loads(json.dumps(d))["reference"]["decode"]["1"] == 18.3
    assert d["reference"]["kind"] == "published" and d["baseline_id"] is None
