"""The shipped group data against the real config.json facts of every shipped checkpoint and draft (issue 39, item 3):
tests/fixtures/real-config.lock.json is the test lock with those facts typed in from their Hub pages (each entry's
config_source says where from). `check` passes on it; the embedder budget shipped before (Qwen3-Embedding-0.6B's 2 GiB
at a 32,768-token max_model_len) is refused by it, as vLLM would refuse the engine at start."""

from __future__ import annotations

import json

import pytest

from sparkctl import REPO_ROOT
from sparkctl.capacity import admission, facts, planner
from sparkctl.check.validate import validate_host
from sparkctl.config import catalog
from sparkctl.config.quantities import GIB, KIB
from sparkctl.errors import SettingError

REAL_LOCK = REPO_ROOT / "tests" / "fixtures" / "real-config.lock.json"


@pytest.fixture
def real_data(gx10_data):
    return {**gx10_data, "MODEL_LOCK_FILE": str(REAL_LOCK)}


def test_the_test_lock_records_every_shipped_checkpoint_and_draft_with_its_source():
    entries = json.loads(REAL_LOCK.read_text())["checkpoints"]
    repos = {spec.checkpoint.repo for spec in catalog.CATALOG.values()}
    repos |= {spec.draft.repo for spec in catalog.CATALOG.values() if spec.draft is not None}
    for repo in repos:
        config = entries[repo]["config"]
        assert {**config, **config.get("text_config", {})}["num_hidden_layers"] > 0, repo
        assert len(entries[repo]["config_source"]) > 40, repo  # where the figures were read


def test_the_shipped_group_data_passes_check_with_the_real_config_facts(real_data):
    s = validate_host(real_data, "gx10")  # every rule, the admission walk included
    qwen_embed = next(svc for svc in s.embedders if svc.model.key == "qwen3-embedding-0.6b")
    layout = planner.model_layout(qwen_embed.model)
    assert layout.source.startswith("config.json (the lock at")  # derived from the lock, not hand-typed
    assert layout.kv_bytes_per_token == 112 * KIB  # 28 layers x 2 x 8 KV heads x 128 x 2 bytes (BF16)
    cap = planner.kv_capacity(layout, qwen_embed.kv_cache_bytes, qwen_embed.model.max_model_len)
    assert cap.min_kv_bytes == qwen_embed.model.max_model_len * 112 * KIB  # 0.875 GiB at 8,192 tokens
    assert cap.concurrency >= 2  # the shipped budget holds two of the longest requests at once
    assert all(st.admitted for st in admission.walk_settings(s))


def test_the_coders_config_facts_agree_with_their_hand_typed_ones(real_data):
    validate_host(real_data, "gx10")  # attaches the lock's facts to each entry
    from sparkctl.check.load import host_config

    config = host_config(real_data)
    for key in ("qwen3.8-27b", "laguna-s-2.1"):
        _, origin, notes = facts.layer_facts(config.catalog[key])
        assert notes == (), notes  # no hand-typed fact disagrees with the checkpoint's own
        assert any(o.startswith("config.json (the lock at") for o in origin.values())
    laguna_origin = facts.layer_facts(config.catalog["laguna-s-2.1"])[1]
    assert laguna_origin["draft_attention_layers"] == "hand-typed"  # typed 6, the draft's config.json says 6 too
    assert facts._derived_layer_facts(config.catalog["laguna-s-2.1"])[0]["draft_attention_layers"] == 6


def test_the_budget_shipped_before_is_refused_with_the_real_facts(real_data):
    """Qwen3-Embedding-0.6B at its full 32,768 tokens with 2 GiB: one request needs 3.5 GiB (the issue's item 2)."""
    data = {**real_data, "CATALOG_OVERRIDES": {"qwen3-embedding-0.6b": {"max_model_len": 32768}}}
    with pytest.raises(SettingError) as err:
        validate_host(data, "gx10")
    text = str(err.value)
    assert "EMBEDDERS[0].kv_cache_gib" in text and "at least 3.50 GiB" in text and "32,768-token" in text
    fixed = {**data, "EMBEDDERS": [{"model": "qwen3-embedding-0.6b", "kv_cache_gib": 3.5},
                                   {"model": "bge-m3", "kv_cache_gib": 2}]}
    assert validate_host(fixed, "gx10")  # 3.5 GiB holds it, and every start is still admitted


def test_without_the_facts_the_check_cannot_tell_and_falls_back_to_the_floor(gx10_data):
    s = validate_host(gx10_data, "gx10")  # the fake lock records no config.json for the real checkpoints
    assert planner.model_layout(s.embedders[0].model) is None
    assert s.embedders[0].kv_cache_bytes >= s.cfg.EMBEDDER_KV_FLOOR_GIB * GIB
