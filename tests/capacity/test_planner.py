"""The capacity planner against the production write-up's figures, vLLM's hybrid allocator and a recorded vLLM run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkctl.__main__ import main
from sparkctl.capacity import planner, report
from sparkctl.config import catalog, groupdata
from sparkctl.config.quantities import KIB
from sparkctl.errors import SettingError, SparkctlError
from tests.conftest import changed, typed

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "planner"
QWEN, LAGUNA = "qwen3.8-27b", "laguna-s-2.1"


@pytest.fixture(autouse=True)
def _no_local_hf_cache(tmp_path, monkeypatch):
    """Keep an operator's Hugging Face cache out of the plan: layer facts come from the catalog unless a test says."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    monkeypatch.delenv("GX10_HOSTS", raising=False)


@pytest.fixture(scope="module")
def gx10():
    """(typed settings, resolved catalog) of a real GX10's group data."""
    cfg = typed(groupdata.load(["all", "gx10"]))
    return cfg, catalog.resolve(cfg.CATALOG_OVERRIDES)


@pytest.fixture(scope="module")
def sim():
    cfg = typed(groupdata.load(["all", "gx10", "sim"]))
    return cfg, catalog.resolve(cfg.CATALOG_OVERRIDES)


def qwen_config() -> dict:
    return json.loads((FIXTURES / "qwen3.8-27b-config.json").read_text())


# --- per-token KV and per-sequence state ----------------------------------------------------------------------------


def test_qwen_per_token_kv_counts_only_full_attention_layers(gx10):
    _, cat = gx10
    fp8 = planner.layout_from_catalog(cat[QWEN])
    assert fp8.full_layers == 16
    assert fp8.kv_bytes_per_token == 32 * KIB  # 16 x 2 x 4 x 256 x 1
    bf16 = planner.layout_from_catalog(catalog.resolve({QWEN: {"kv_cache_dtype": "auto"}})[QWEN])
    assert bf16.kv_bytes_per_token == 64 * KIB
    assert 262_144 * bf16.kv_bytes_per_token == 16 * planner.GIB  # one full-length sequence in BF16


def test_config_json_layer_types_match_the_catalog(gx10):
    _, cat = gx10
    from_config = planner.layout_from_config(qwen_config(), cat[QWEN])
    from_catalog = planner.layout_from_catalog(cat[QWEN])
    assert (from_config.full_layers, from_config.state_layers, from_config.draft_layers) == (16, 48, 1)
    assert from_config.kv_bytes_per_token == 32 * KIB
    # GDN state: conv 10,240 x (4 - 1 + 3 speculative) x 2 B + ssm 48 x 128 x 128 x 4 B
    assert from_config.state_bytes_per_layer == 122_880 + 3_145_728 == from_catalog.state_bytes_per_layer
    assert from_config.source == "config.json"


def test_config_json_full_attention_interval_without_layer_types(gx10):
    _, cat = gx10
    cfg = qwen_config()
    del cfg["text_config"]["layer_types"]
    layout = planner.layout_from_config(cfg, cat[QWEN])
    assert (layout.full_layers, layout.state_layers) == (16, 48)


def test_config_json_state_follows_speculative_depth(gx10):
    _, cat = gx10
    no_spec = catalog.resolve({QWEN: {"speculative": None}})[QWEN]
    layout = planner.layout_from_config(qwen_config(), no_spec)
    assert layout.state_bytes_per_layer == 61_440 + 3_145_728  # conv state without speculative slots
    assert layout.draft_layers == 0  # no MTP head in the pool without MTP


def test_sliding_window_layers_from_config(gx10):
    _, cat = gx10
    cfg = {"num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
           "layer_types": (["sliding_attention"] * 3 + ["full_attention"]) * 12, "sliding_window": 4096,
           "torch_dtype": "bfloat16"}
    no_draft = catalog.resolve({LAGUNA: {"speculative": None}})[LAGUNA]  # the window's arithmetic alone
    layout = planner.layout_from_config(cfg, no_draft)
    assert (layout.full_layers, layout.window_layers, layout.window_tokens, layout.draft_layers) == (12, 36, 4096, 0)
    assert layout.kv_bytes_per_token == 24 * KIB  # the write-up's 24 KiB/token for Laguna (FP8)
    cap = planner.kv_capacity(layout, 12 * planner.GIB, 262_144, max_num_batched_tokens=16_384)
    # 12 full + 36 sliding: 4 groups of 12; a request holds 16,384 full blocks + 3 x (ceil(20,479/16) + 1)
    assert cap.group_size == 12 and cap.groups == {"full": 1, "window": 3}
    assert cap.blocks_per_request == 16_384 + 3 * (1_280 + 1)
    assert cap.num_blocks == 32_768
    assert cap.concurrency == pytest.approx(32_768 / 20_227)
    # with DFlash the draft's layers join the full-attention ones (from the catalog: the draft is its own checkpoint)
    assert planner.layout_from_config(cfg, cat[LAGUNA]).draft_layers == 6


def test_config_json_without_layer_counts_is_refused(gx10):
    _, cat = gx10
    with pytest.raises(SettingError, match="num_hidden_layers"):
        planner.layout_from_config({"model_type": "x"}, cat[QWEN])


# --- the production write-up's checks --------------------------------------------------------------------------------


def test_box_leaves_106_gib_for_the_coding_model(gx10):
    data, cat = gx10
    box = planner.box_from_data(data, cat)
    assert box.usable_gib == 121.6 and box.os_reserve_gib == 6.0
    assert box.embedders_gib == pytest.approx(9.6)  # 2 x (2.8 resident + 2 KV)
    assert box.os_reserve_gib + box.embedders_gib == pytest.approx(121.6 - 44 - 62)  # what production implies
    assert box.available_gib == pytest.approx(106.0)


def test_qwen_at_44_gib_leaves_62_free_and_laguna_at_98_leaves_8(gx10):
    data, cat = gx10
    plan = planner.plan_box(data, cat)
    qwen, laguna = plan.model(QWEN), plan.model(LAGUNA)
    assert qwen.resident_gib == 44.0 and qwen.resident_source == "measured"
    assert qwen.free_gib == pytest.approx(62.0, abs=0.5)
    # Laguna's ~98 GiB was measured with its 12 GiB KV allocated; what is left after that KV is the ~8 GiB
    assert laguna.footprint_gib == pytest.approx(98.0, abs=0.5)
    assert laguna.headroom_gib == pytest.approx(8.0, abs=0.5)
    assert laguna.free_gib == pytest.approx(20.0)
    assert qwen.fits and laguna.fits


def test_qwen_36_gib_estimate_reproduces_the_measured_3_9(gx10):
    data, cat = gx10
    qwen = planner.plan_box(data, cat, coding_model=QWEN).model(QWEN)
    measured = 1_014_892
    assert qwen.kv_gib == 36
    assert qwen.kv_tokens_measured == measured and qwen.source == "measured"
    assert qwen.concurrent_requests_measured == pytest.approx(measured / 262_144)  # 3.87, "3.9"
    assert qwen.concurrent_requests_estimate == pytest.approx(3.9, rel=0.10)
    # the pool vLLM builds: 1,600-token blocks, 16 + 1 MTP attention layers (3 GDN groups padded to 17),
    # 693 blocks; a request holds 164 attention blocks + 3 GDN groups x (2 + 3 speculative)
    cap = qwen.capacity
    assert (cap.block_size, cap.group_size, cap.num_blocks, cap.blocks_per_request) == (1600, 17, 693, 179)
    assert cap.tokens == measured  # exactly what vLLM logged
    assert cap.token_slots == 693 * 1600
    assert qwen.problems == ()


def test_qwen_at_48_gib_holds_five(gx10):
    data, cat = gx10
    qwen = planner.plan_box(data, cat, coding_model=QWEN, kv_gib=48).model(QWEN)
    assert int(qwen.concurrent_requests) == 5
    assert qwen.source == "estimate" and qwen.kv_tokens_measured is None  # no measurement at 48 GiB
    assert qwen.fits and qwen.headroom_gib == pytest.approx(14.0)


def test_laguna_estimate_with_its_draft_and_window_meets_the_measured_1_2(gx10):
    data, cat = gx10
    laguna = planner.plan_model(data, cat, LAGUNA)
    cap = laguna.capacity
    # 12 full-attention layers + the DFlash draft's 6 (full KV kept) = 18 in one group; 36 sliding layers of 512 in
    # 2 groups of 18. Blocks of 16 tokens x 2 KiB (8 KV heads x 128, FP8) x 18 layers: 12 GiB // 576 KiB = 21,845.
    # A 262K request: 16,384 full blocks + 2 groups x (ceil((512 - 1 + 16,384 batched) / 16) + 1) = 18,498 blocks
    assert (cap.block_size, cap.group_size, cap.groups) == (16, 18, {"full": 1, "window": 2})
    assert (cap.num_blocks, cap.blocks_per_request) == (12 * planner.GIB // (16 * 2 * KIB * 18), 16_384 + 2 * 1_057)
    assert laguna.concurrent_requests_estimate == pytest.approx(21_845 / 18_498)  # 1.18
    # the write-up's measurement, with its source, beside the estimate (it gives no token count)
    assert laguna.concurrent_requests_measured == 1.2 and laguna.source == "measured"
    assert laguna.kv_tokens_measured is None and laguna.kv_tokens_source == "estimate"
    assert "1.2 full-context requests" in laguna.measured.source
    assert laguna.estimate_agreement == "independent" and laguna.problems == ()
    # the draft's KV explains most of the gap to the old 2.00: without it, 12 + 36 sliding in 4 groups of 12
    assert laguna.engine_concurrency_without_draft == pytest.approx(32_768 / (16_384 + 3 * 1_057))  # 1.68
    assert any("DFlash draft's 6 layers" in n and "an assumption" in n for n in laguna.notes)


def test_laguna_without_draft_or_window_is_the_old_upper_bound_and_disagrees(gx10):
    data, _ = gx10
    cat = catalog.resolve({LAGUNA: {"memory": {"sliding_window": 0, "draft_attention_layers": 0}}})
    laguna = planner.plan_model(data, cat, LAGUNA)
    assert laguna.concurrent_requests_estimate == pytest.approx(12 / (24 * KIB * 262_144 / planner.GIB))  # 2.00
    assert any("upper bound" in n for n in laguna.notes)
    assert any("2.00 concurrent requests is 67% from the measured 1.2" in p and "PLAN_MEASURED_TOLERANCE, 25%" in p
               for p in laguna.problems)
    assert laguna.fits  # a disagreement is reported, not refused


def test_calibrated_figures_are_labelled_not_independent(gx10):
    data, cat = gx10
    out = planner.plan_json(planner.plan_box(data, cat))
    assert {e["resident_source"] for e in out["box"]["embedders"]} == {"calibrated"}
    qwen, laguna = out["models"]
    assert qwen["estimate_agreement"] == "calibrated" and list(qwen["calibrated"]) == ["draft_attention_layers"]
    assert qwen["draft_layers"] == 1 and qwen["engine_concurrent_requests_without_draft_estimate"] == 4.12
    assert laguna["estimate_agreement"] == "independent" and laguna["calibrated"] == {}
    assert (laguna["concurrent_requests_measured"], laguna["kv_tokens_source"]) == (1.2, "estimate")
    assert "Finding 3" in laguna["measured_source"] and "1,014,892" in qwen["measured_source"]


def test_measured_figure_is_shown_beside_the_estimate(gx10):
    data, cat = gx10
    entry = planner.plan_json(planner.plan_box(data, cat, coding_model=QWEN))["models"][0]
    assert entry["kv_tokens_measured"] == 1_014_892 and entry["kv_tokens_estimate"] == 1_014_892
    assert entry["concurrent_requests_measured"] == 3.87 and entry["concurrent_requests_estimate"] == 3.87


def test_estimate_far_from_a_measurement_is_flagged(gx10):
    data, _ = gx10
    cat = catalog.resolve({QWEN: {"memory": {"measured_kv_tokens": {36: 600_000}}}})
    qwen = planner.plan_model(data, cat, QWEN)
    assert qwen.kv_tokens == 600_000 and qwen.source == "measured"
    assert any("1,014,892" in p and "600,000" in p for p in qwen.problems)


def test_laguna_with_36_gib_beside_both_embedders_is_refused(gx10):
    data, cat = gx10
    bad = changed(data, CODER_KV_CACHE_GIB={**data.CODER_KV_CACHE_GIB, LAGUNA: 36})
    with pytest.raises(planner.PlanError) as err:
        planner.check_fits(bad, cat, LAGUNA)
    msg = str(err.value)
    assert isinstance(err.value, SparkctlError)
    for needle in ("121.6", "-6.0", "qwen3-embedding-0.6b", "bge-m3", "-4.8", "-86.0", "-36.0", "-16.0",
                   "137.6 GiB needed vs 121.6 GiB usable", "Largest KV budget that fits: 14.9 GiB",
                   "CODER_KV_CACHE_GIB['laguna-s-2.1'] in group_data/gx10.py", "EMBEDDERS", "OS_RESERVE_GIB"):
        assert needle in msg, needle


def test_shipped_configuration_passes_preflight(gx10):
    data, cat = gx10
    plan = planner.check_fits(data, cat, data.CODING_MODEL)
    assert plan.name == QWEN and plan.kv_gib == 36 and plan.fits
    assert planner.check_fits(data, cat, LAGUNA).kv_gib == 12


def test_a_kv_budget_below_one_request_is_refused(gx10):
    data, cat = gx10
    # 4 GiB // 576 KiB = 7,281 blocks of the 18,498 a request needs; 18,498 x 576 KiB = 10.16 GiB holds one
    with pytest.raises(planner.PlanError, match=r"holds 0\.39 requests.*smallest budget that holds one is 10\.2 GiB"):
        planner.check_fits(data, cat, LAGUNA, kv_gib=4)


def test_missing_kv_budget_names_the_setting(gx10):
    data, cat = gx10
    with pytest.raises(SettingError, match=r"CODER_KV_CACHE_GIB\['qwen3.8-27b'\]"):  # the configured coder: the schema
        changed(data, CODER_KV_CACHE_GIB={})
    with pytest.raises(SettingError, match=r"CODER_KV_CACHE_GIB\['laguna-s-2.1'\]"):  # another one the plan is asked for
        planner.check_fits(changed(data, CODER_KV_CACHE_GIB={QWEN: 36}), cat, LAGUNA)


def test_prefix_caching_off_frees_one_state_block_per_gdn_group(gx10):
    data, cat = gx10
    off = changed(data, VLLM_COMMON_ARGS=["--no-enable-prefix-caching"])
    qwen = planner.plan_model(off, cat, QWEN)
    assert qwen.capacity.blocks_per_request == 164 + 3 * 4


def test_without_mtp_the_pool_has_no_padding_layers(gx10):
    data, _ = gx10
    cat = catalog.resolve({QWEN: {"speculative": None}})
    cap = planner.plan_model(data, cat, QWEN).capacity
    assert cap.group_size == 16 and cap.num_blocks == 737  # 36 GiB // (1,600 x 2 KiB) // 16


def test_roofline_decode(gx10):
    data, cat = gx10
    qwen = planner.plan_model(data, cat, QWEN)
    # 273 GB/s over the 16 GB of weights a step reads, 2.5 tokens a step (MTP)
    assert qwen.roofline_tokens_per_s == pytest.approx(273 / 16.0 * 2.5)
    # at full context each step also reads one 262K sequence's KV (16 + 1 MTP layers x 2 x 4 heads x 256 x 1 B per
    # token) and its GDN state (48 layers x 3,268,608 B)
    kv_read = 17 * 2 * 4 * 256 * 262_144 + 48 * (3_145_728 + 122_880)
    assert qwen.roofline_full_context_tokens_per_s == pytest.approx(273e9 / (16e9 + kv_read) * 2.5)
    assert qwen.measured_decode_tokens_per_s == 18.3  # the bench probe in production, from the catalog


# --- several Sparks --------------------------------------------------------------------------------------------------


def test_two_replicas_double_capacity(gx10):
    data, cat = gx10
    one = planner.plan_box(data, cat, coding_model=QWEN).model(QWEN)
    two = planner.plan_box(data, cat, coding_model=QWEN, sparks=2, topology="replicas").model(QWEN)
    assert two.kv_tokens == 2 * one.kv_tokens and two.source == "measured"
    assert two.concurrent_requests == pytest.approx(2 * one.concurrent_requests)
    assert two.free_gib == one.free_gib  # per box
    assert report.model_json(two)["concurrent_requests"] == 7.74  # the pair's total


def test_tensor_parallel_halves_weights_and_pools_kv(gx10):
    data, cat = gx10
    one = planner.plan_model(data, cat, QWEN)
    tp = planner.plan_model(data, cat, QWEN, sparks=2, topology="tensor-parallel")
    assert tp.resident_gib == pytest.approx(44 - 20 / 2) and tp.resident_source == "estimate"
    assert tp.engines == 1 and tp.boxes == 2 and tp.source == "estimate"
    assert tp.concurrent_requests == pytest.approx(2 * one.concurrent_requests_estimate, rel=0.01)
    assert tp.roofline_tokens_per_s == pytest.approx(2 * one.roofline_tokens_per_s)


def test_split_gives_laguna_its_whole_box_for_kv(gx10):
    data, cat = gx10
    plan = planner.plan_box(data, cat, sparks=2, topology="split")
    laguna = plan.model(LAGUNA)
    assert laguna.kv_gib == pytest.approx(20.0) and laguna.headroom_gib == pytest.approx(0.0)
    assert laguna.engines == 1 and laguna.fits
    assert laguna.concurrent_requests == pytest.approx(20 * planner.GIB // (16 * 2 * KIB * 18) / 18_498)  # 1.97


def test_topology_needs_two_sparks(gx10):
    data, cat = gx10
    with pytest.raises(SettingError, match="sparks"):
        planner.plan_box(data, cat, sparks=1, topology="split")
    with pytest.raises(SettingError, match="SPARK_TOPOLOGY"):
        planner.plan_box(data, cat, sparks=2, topology="ring")


# --- the simulated Spark ----------------------------------------------------------------------------------------------


def test_sim_plan_matches_what_vllm_cpu_reported(sim):
    data, cat = sim
    plan = planner.plan_box(data, cat)
    assert [m.name for m in plan.models] == [QWEN, LAGUNA]
    assert all(m.fits for m in plan.models)
    qwen = plan.model(QWEN)
    assert qwen.kv_gib == 0.0625 and qwen.layout.draft_layers == 0  # ngram on the sim: no MTP layer
    # recorded: vLLM 0.32 CPU, tiny 2-layer Llama, 64M of KV: "CPU KV cache size: 131,072 tokens ... 32.00x"
    assert qwen.capacity.tokens == 131_072 and qwen.capacity.concurrency == 32.0
    from_config = planner.plan_model(data, cat, QWEN,
                                     config=json.loads((FIXTURES / "tiny-llama-config.json").read_text()))
    assert from_config.capacity.tokens == 131_072
    # a stand-in checkpoint never inherits production figures (measured on another checkpoint)
    assert qwen.measured_decode_tokens_per_s is None
    assert plan.model(LAGUNA).concurrent_requests_measured is None and plan.model(LAGUNA).measured.source is None
    planner.check_fits(data, cat, data.CODING_MODEL)


# --- JSON and the command line ----------------------------------------------------------------------------------------

REQUIRED = {"name", "resident_gib", "free_gib", "kv_gib", "kv_tokens", "max_context", "concurrent_requests", "fits",
            "roofline_tokens_per_s", "source"}


def test_json_schema(gx10):
    data, cat = gx10
    out = json.loads(json.dumps(planner.plan_json(planner.plan_box(data, cat))))
    assert set(out) == {"schema", "box", "models"} and out["schema"] == "sparkctl.plan/1"
    assert out["box"]["usable_gib"] == 121.6 and out["box"]["available_gib"] == 106.0
    for entry in out["models"]:
        assert REQUIRED <= set(entry)
        assert isinstance(entry["fits"], bool) and entry["source"] in ("estimate", "measured")
    qwen, laguna = out["models"]
    assert (qwen["name"], qwen["free_gib"], qwen["kv_tokens"], qwen["source"]) == (QWEN, 62.0, 1_014_892, "measured")
    assert (laguna["name"], laguna["free_gib"], laguna["headroom_gib"], laguna["source"]) == (LAGUNA, 20.0, 8.0,
                                                                                            "measured")
    assert (laguna["kv_tokens"], laguna["kv_tokens_source"]) == (laguna["kv_tokens_estimate"], "estimate")


def test_plan_command_json(capsys):
    assert main(["plan", "--groups", "all,gx10", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # the built-in two, then the write-up's next candidates (group_data/gx10.py CATALOG_MODELS, in the catalog only)
    assert [m["name"] for m in out["models"]] == [QWEN, LAGUNA, "laguna-s-2.1-main", "qwen3.5-122b-a10b-nvfp4"]
    assert out["models"][0]["concurrent_requests"] == 3.87


def test_plan_command_what_ifs(capsys):
    assert main(["plan", "--groups", "all,gx10", "--json", "--sparks", "2", "--topology", "replicas",
                 "--model", QWEN, "--kv", "48"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["box"]["sparks"] == 2 and len(out["models"]) == 1
    assert 10 <= out["models"][0]["concurrent_requests"] < 11  # "double the concurrent 262K capacity to ten"
    assert main(["plan", "--groups", "all,gx10", "--json", "--model", LAGUNA, "--kv", "36"]) == 0
    assert json.loads(capsys.readouterr().out)["models"][0]["fits"] is False


def test_plan_command_table(capsys):
    assert main(["plan", "--groups", "all,gx10"]) == 0
    out = capsys.readouterr().out
    for needle in ("121.6 GiB usable", "2.8 calibrated + 2.0 KV", "qwen3.8-27b", "1,014,892 est",
                   "1,014,892 measured", "3.87 measured", "(est calibrated)", "62.0", "laguna-s-2.1", "1.18 est",
                   "1.2 measured", "Its 12 GiB KV budget holds 1.2 full-context requests",
                   "calibrated, not independent: draft_attention_layers"):
        assert needle in out, needle


def test_plan_command_refuses_bad_arguments(capsys):
    assert main(["plan", "--groups", "all,gx10", "--model", "nope"]) == 2
    assert "--model" in capsys.readouterr().err


def test_plan_reads_a_cached_config_json(tmp_path, monkeypatch, capsys):
    snap = tmp_path / "hub" / "models--unsloth--Qwen3.8-27B-NVFP4" / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    (snap / "config.json").write_text((FIXTURES / "qwen3.8-27b-config.json").read_text())
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert main(["plan", "--groups", "all,gx10", "--json", "--model", QWEN]) == 0
    entry = json.loads(capsys.readouterr().out)["models"][0]
    assert entry["layout_source"].startswith("config.json:") and entry["engine_kv_tokens_estimate"] == 1_014_892
    assert main(["plan", "--groups", "all,gx10", "--json", "--model", QWEN, "--no-local-config"]) == 0
    assert json.loads(capsys.readouterr().out)["models"][0]["layout_source"] == "catalog"
