"""Any checkpoint planned from its own files (issue 19): layer facts from its config.json (recorded by `lock refresh`
at the locked commit, or typed from its Hub page until then), weights from the lock's safetensors sizes, resident =
weights + MODEL_RUNTIME_OVERHEAD_GIB, each figure with where it came from, a hand-typed fact overriding a derived
one and saying so; and where each model fits: one box beside the embedders, only two in tensor-parallel, or
nowhere, with the arithmetic (a model too big for one box is refused there, naming the topology that fits)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sparkctl import REPO_ROOT
from sparkctl.__main__ import main
from sparkctl.capacity import facts, kv, planner
from sparkctl.capacity import plan as plan_mod
from sparkctl.check.load import host_config
from sparkctl.check.validate import validate_host
from sparkctl.config import catalog, groupdata, lock
from sparkctl.config.quantities import GIB, KIB
from sparkctl.sim import models
from tests.conftest import FAKE_LOCK

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "planner"
QWEN, LAGUNA, LAGUNA_MAIN, QWEN122 = "qwen3.8-27b", "laguna-s-2.1", "laguna-s-2.1-main", "qwen3.5-122b-a10b-nvfp4"


@pytest.fixture(autouse=True)
def _no_local_hf_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    monkeypatch.delenv("GX10_HOSTS", raising=False)


def gx10(**settings):
    return host_config({**groupdata.load(["all", "gx10"]), **settings})


def sim(**settings):
    """The simulated Spark's settings with the test lock (which records the two data-only stand-ins' config.json,
    built by sparkctl/sim/models.py from their descriptions)."""
    return host_config({**groupdata.load(["all", "gx10", "sim"]), "MODEL_LOCK_FILE": FAKE_LOCK, **settings})


def config_fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


# --- layouts from the shipped models' config.json give the catalog's hand-typed facts -----------------------------


def test_qwens_config_json_gives_the_catalogs_hand_typed_layer_facts():
    spec = catalog.CATALOG[QWEN]
    derived = kv.config_facts(config_fixture("qwen3.8-27b-config.json"), spec)
    typed = kv.typed_facts(spec)
    assert {k: derived[k] for k in typed} == typed  # 16 full of 64, 4 x 256, 48 GDN of 3,268,608 B, 1 MTP layer


def test_lagunas_public_layout_gives_the_shipped_entrys_hand_typed_facts():
    """The main revision's Hub facts (the attention layout of the NVFP4 config.json as mirrored) against the
    shipped revision's hand-typed layer facts: the same 12 full + 36 sliding-window layers of 512, 8 x 128. The
    DFlash draft's 6 layers are the one fact no config.json here gives: both entries type them."""
    main = gx10().catalog[LAGUNA_MAIN]
    derived = kv.config_facts(main.memory.hub_facts.config, main)
    typed = {k: v for k, v in kv.typed_facts(catalog.CATALOG[LAGUNA]).items() if k != "linear_state_bytes_per_layer"}
    assert {k: derived[k] for k in typed if k != "draft_attention_layers"} == \
        {k: v for k, v in typed.items() if k != "draft_attention_layers"}
    assert facts.model_layout(main).source.endswith("hand-typed draft_attention_layers")


def test_the_122b_candidate_is_planned_from_its_config_json_and_reproduces_a_logged_block_size():
    fixture = config_fixture("qwen3.5-122b-a10b-config.json")
    spec = gx10().catalog[QWEN122]
    typed = spec.memory.hub_facts.config["text_config"]  # group data's copy: the fixture's values
    assert {k: fixture["text_config"][k] for k in typed} == typed
    layout = kv.layout_from_config(fixture, spec)
    assert (layout.full_layers, layout.state_layers, layout.kv_heads, layout.head_dim) == (12, 36, 2, 256)
    assert layout.kv_bytes_per_token == 12 * KIB  # 12 x 2 x 2 x 256 x 1 B (FP8)
    # conv (16 x 128 x 2 + 64 x 128) x (4 - 1) x 2 B + ssm 64 x 128 x 128 x 4 B (float32), no speculation
    assert layout.state_bytes_per_layer == 12_288 * 3 * 2 + 4_194_304
    # a Spark's vLLM logged a 2,240-token attention block for this model with BF16 KV and 12 speculative tokens
    # (Entrpi/qwen3.5-122B-A10B-on-spark FINDINGS.md): the allocator's arithmetic gives exactly that
    dflash12 = catalog.resolve(None, {"x": {**groupdata.load(["all", "gx10"])["CATALOG_MODELS"][QWEN122],
                                            "kv_cache_dtype": "auto",
                                            "speculative": {"method": "ngram", "num_speculative_tokens": 12}}})["x"]
    cap = kv.kv_capacity(kv.layout_from_config(fixture, dflash12), 8 * GIB, 262_144, num_speculative_tokens=12)
    assert cap.block_size == 2240
    bf16_state = dict(fixture, text_config={**fixture["text_config"], "mamba_ssm_dtype": "bfloat16"})
    assert kv.kv_capacity(kv.layout_from_config(bf16_state, dflash12), 8 * GIB, 262_144,
                          num_speculative_tokens=12).block_size != 2240  # the float32 state is what the log shows


# --- provenance: the lock's facts, hand-typed ones over them ----------------------------------------------------------


def test_a_data_only_model_is_planned_from_its_own_files_in_the_lock():
    config = sim()
    spec = config.catalog["sim-coder-4l"]
    entry = json.loads(Path(FAKE_LOCK).read_text())["checkpoints"]["sim/tiny-qwen-4l"]
    assert spec.target_facts.sha == entry["sha"] and spec.target_facts.config["num_key_value_heads"] == 4
    plan = planner.plan_model(config.cfg, config.catalog, "sim-coder-4l")
    sha = entry["sha"][:12]
    assert plan.layout.source == f"config.json (the lock at {sha})"
    assert plan.layout.kv_bytes_per_token == 4 * 2 * 4 * 32 * 2  # its own 4 layers of 4 KV heads x 32, BF16
    weights = entry["files"]["model.safetensors"]["size"] / GIB
    assert plan.resident_gib == pytest.approx(weights + 1.5) and plan.resident_source == "derived"
    assert f"the lock at {sha}" in plan.provenance["weights"]
    assert "MODEL_RUNTIME_OVERHEAD_GIB['coder'] 1.5" in plan.provenance["resident"]
    assert plan.provenance["kv"].startswith("estimate") and plan.placement.verdict == plan_mod.ONE_BOX


def test_a_hand_typed_fact_overrides_a_derived_one_and_says_so():
    config = sim(CATALOG_OVERRIDES={**groupdata.load(["all", "gx10", "sim"])["CATALOG_OVERRIDES"],
                                    "sim-coder-4l": {"memory": {"kv_heads": 2, "weights_gib": 3.0}}})
    plan = planner.plan_model(config.cfg, config.catalog, "sim-coder-4l")
    assert plan.layout.kv_heads == 2 and "hand-typed kv_heads" in plan.layout.source
    assert plan.resident_gib == pytest.approx(3.0 + 1.5)
    assert any(n.startswith("hand-typed kv_heads = 2 overrides config.json (the lock at") and n.endswith("'s 4")
               for n in plan.notes), plan.notes
    assert any(n.startswith("hand-typed weights 3.0 GiB override the safetensors") for n in plan.notes)


def test_without_lock_facts_the_candidates_say_their_facts_were_typed_from_the_hub():
    config = gx10()  # the committed lock has no commit resolved: the entries' hub facts are what there is
    plan = planner.plan_model(config.cfg, config.catalog, QWEN122)
    assert plan.layout.source == "config.json (typed from its Hub page)"
    assert plan.resident_source == "derived" and plan.resident_gib == pytest.approx(83.5e9 / GIB + 24.0)
    assert "unmeasured" in plan.provenance["Hub page"] and plan.measured.source is None


# --- where each model fits --------------------------------------------------------------------------------------------


def test_laguna_main_fits_only_across_two_boxes_with_the_arithmetic():
    config = gx10()
    plan = planner.plan_model(config.cfg, config.catalog, LAGUNA_MAIN)
    where = plan.placement
    assert where.verdict == plan_mod.TWO_BOXES and not plan.fits
    # one box: 106.0 beside the OS reserve and embedders - (92.9 GiB of weights + 24 runtime) = -10.9
    assert "106.0 GiB beside the OS reserve and embedders - resident 116.9 (weights 92.9 + runtime 24.0)" \
        in where.one_box and "does not fit" in where.one_box
    # two: each box holds half the weights (46.4) + the whole runtime, and half of every token's KV heads
    assert "resident 70.4 (weights 46.4 + runtime 24.0) = 35.6 GiB for KV" in where.two_boxes
    assert "fits" in where.two_boxes and "all-reduce over the CX7 link is not in the roofline" in where.two_boxes
    tp = planner.plan_model(config.cfg, config.catalog, LAGUNA_MAIN, sparks=2, topology="tensor-parallel")
    assert tp.fits and tp.resident_gib == pytest.approx(70.4, abs=0.05) and tp.tp == 2


def test_the_122b_candidate_fits_one_box_and_the_shipped_ones_too():
    config = gx10()
    plan = planner.plan_box(config.cfg, config.catalog)
    verdicts = {m.name: m.placement.verdict for m in plan.models}
    assert verdicts == {QWEN: "one box", LAGUNA: "one box", LAGUNA_MAIN: plan_mod.TWO_BOXES,
                        QWEN122: "one box"}


def test_a_model_too_big_for_one_box_is_refused_there_naming_the_topology_and_accepted_on_two(token_file, tmp_path):
    data = {**groupdata.load(["all", "gx10", "sim"]), "MODEL_LOCK_FILE": FAKE_LOCK, "SECRETS_DIR": str(tmp_path),
            "CODING_MODEL": "sim-too-big", "CODER_KV_CACHE_GIB": {"qwen3.8-27b": 0.0625, "laguna-s-2.1": 0.0625,
                                                                  "sim-too-big": 0.0625}}
    with pytest.raises(planner.PlanError) as err:
        validate_host(data, "spark-1", hosts=["spark-1"])  # the deploy's whole check, one box
    msg = str(err.value)
    for needle in ("sim-too-big resident (weights + runtime)", "-15.5 GiB",
                   "14.4 GiB beside the OS reserve and embedders - resident 15.5 (weights 14.0 + runtime 1.5)",
                   "It fits across two boxes in tensor-parallel", "resident 8.5 (weights 7.0 + runtime 1.5)",
                   'SPARK_TOPOLOGY = "tensor-parallel"'):
        assert needle in msg, needle
    two = validate_host({**data, "SPARK_TOPOLOGY": "tensor-parallel"}, "spark-1", hosts=["spark-1", "spark-2"])
    assert two.coder.model.key == "sim-too-big" and two.role.name == "head"
    assert {c.repo for c in two.checkpoints} >= {"sim/tiny-too-big"}  # kept: it has a KV budget


def test_a_catalog_model_without_a_budget_is_planned_not_downloaded(token_file, tmp_path):
    data = {**groupdata.load(["all", "gx10"]), "MODEL_LOCK_FILE": FAKE_LOCK, "SECRETS_DIR": str(tmp_path)}
    s = validate_host(data, "gx10", hosts=["gx10"])  # the candidates are in no lock here: not needed
    assert {c.repo for c in s.checkpoints} == {"unsloth/Qwen3.8-27B-NVFP4", "poolside/Laguna-S-2.1-NVFP4",
                                               "poolside/Laguna-S-2.1-DFlash-NVFP4", "Qwen/Qwen3-Embedding-0.6B",
                                               "BAAI/bge-m3"}


# --- the plan command -------------------------------------------------------------------------------------------------


def test_plan_prints_a_provenance_column_and_where_each_model_fits(capsys):
    assert main(["plan", "--groups", "all,gx10"]) == 0
    out = capsys.readouterr().out
    for needle in ("provenance", "resident: measured", "layers: hand-typed", "resident: derived",
                   "layers: config.json", "(Hub page)", "2 boxes TP", "laguna-s-2.1-main: does not fit one box",
                   "laguna-s-2.1-main: per box over 2 (tensor-parallel", "laguna-s-2.1-main: provenance: Hub page"):
        assert needle in out, needle


def test_plan_two_boxes_tensor_parallel_shows_the_per_box_figures(capsys):
    assert main(["plan", "--groups", "all,gx10", "--json", "--sparks", "2", "--topology", "tensor-parallel",
                 "--model", LAGUNA_MAIN]) == 0
    entry = json.loads(capsys.readouterr().out)["models"][0]
    assert entry["fits"] and entry["boxes"] == 2 and entry["resident_gib"] == pytest.approx(70.4, abs=0.05)
    assert entry["kv_setting"] == plan_mod.NO_BUDGET and entry["headroom_gib"] < 0.1
    assert entry["placement"]["verdict"] == plan_mod.TWO_BOXES
    assert set(entry["provenance"]) >= {"resident", "weights", "layers", "kv", "roofline"}


# --- lock refresh records the facts ---------------------------------------------------------------------------------

RESOLVE = """
import json, sys
from huggingface_hub import HfApi
from sparkctl.config import catalog, lock
cp = catalog.Checkpoint(repo="sim/tiny-qwen-4l", revision="main")
print(json.dumps(lock.resolve(HfApi(endpoint=sys.argv[1]), cp, sys.argv[1])))
"""


def test_lock_refresh_records_the_config_json_facts_at_the_locked_commit(hub_server, hf_env):
    root, url, _ = hub_server
    files = models.build(models.descriptions()["sim/tiny-qwen-4l"], models.bpe_tokenizer())
    sha = models.commit_files(root / "sim" / "tiny-qwen-4l", files, "v1")
    models.commit_files(root / "sim" / "tiny-qwen-4l", {**files, "config.json": b'{"num_hidden_layers": 99}'},
                        "a later commit on another branch", parent=sha, branch="next")
    r = subprocess.run([sys.executable, "-c", RESOLVE, url], env=hf_env(url), cwd=REPO_ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    entry = json.loads(r.stdout)
    assert entry["sha"] == sha and entry["config"] == lock.planner_config(json.loads(files["config.json"]))
    assert entry["config"]["num_hidden_layers"] == 4 and "_comment" not in entry["config"]  # CONFIG_KEYS only
    cp = catalog.Checkpoint(repo="sim/tiny-qwen-4l", revision="main")
    assert lock.locked({"checkpoints": {cp.repo: entry}}, cp, Path("x.lock.json")).config == entry["config"]


def test_the_runtime_overhead_is_what_its_comment_says():
    """MODEL_RUNTIME_OVERHEAD_GIB['coder'] = Qwen's measured 44 GiB resident minus its ~20 GiB of weights; Laguna's
    86 - 64 agrees within 2 GiB (group_data/gx10.py)."""
    config = gx10()
    qwen, laguna = (config.catalog[k].memory for k in (QWEN, LAGUNA))
    assert qwen.resident_source == "measured"
    assert config.cfg.MODEL_RUNTIME_OVERHEAD_GIB.coder == qwen.resident_gib - qwen.weights_gib
    assert abs(config.cfg.MODEL_RUNTIME_OVERHEAD_GIB.coder - (laguna.resident_gib - laguna.weights_gib)) <= 2


def test_check_refuses_laguna_main_on_one_box_naming_tensor_parallel():
    config = gx10(CODER_KV_CACHE_GIB={QWEN: 36, LAGUNA: 12, LAGUNA_MAIN: 12})
    with pytest.raises(planner.PlanError, match=r"It fits across two boxes in tensor-parallel \(per box over 2"):
        planner.check_fits(config.cfg, config.catalog, LAGUNA_MAIN)
    two = gx10(CODER_KV_CACHE_GIB={QWEN: 36, LAGUNA: 12, LAGUNA_MAIN: 12}, SPARK_TOPOLOGY="tensor-parallel")
    plan = planner.check_fits(two.cfg, two.catalog, LAGUNA_MAIN)
    assert plan.fits and plan.headroom_gib == pytest.approx(35.6 - 12, abs=0.1)
