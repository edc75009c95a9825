"""Models as data: one pydantic model validates the built-in catalog entries, group data's CATALOG_MODELS
and CATALOG_OVERRIDES alike; every mistake is refused before the host is touched, naming the entry and the field it
is in (never another setting), with the closest names for a typo."""

from __future__ import annotations

import copy

import pytest

from sparkctl.check.load import host_config
from sparkctl.config import catalog, catalog_entries, groupdata
from sparkctl.errors import SettingError

# a new coding model written as an operator would, in group_data/gx10.py
NEW = {
    "role": "coder",
    "title": "an operator's new checkpoint",
    "checkpoint": {"repo": "acme/coder-30b", "revision": "v1"},
    "max_model_len": 131072,
    "kv_cache_dtype": "fp8",
    "speculative": {"method": "mtp", "num_speculative_tokens": 2},
    "extra_args": ["--reasoning-parser", "qwen3"],
    "memory": {"weights_gib": 18.0, "bytes_read_per_step_gb": 19.0},
}


def with_new(**changes) -> dict:
    entry = copy.deepcopy(NEW)
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = entry
        for p in parents:
            node = node[p]
        node[leaf] = value
    return {"acme-coder": entry}


def gx10(**settings) -> dict:
    return {**groupdata.load(["all", "gx10"]), **settings}


def test_a_group_data_model_is_an_entry_of_the_same_model_as_the_built_in_ones():
    resolved = catalog.resolve(None, {"acme-coder": NEW})
    spec = resolved["acme-coder"]
    assert type(spec) is type(resolved["qwen3.8-27b"]) is catalog.ModelSpec
    assert spec.role == catalog.CODER and spec.checkpoint.revision == "v1" and spec.extra_args[1] == "qwen3"
    assert spec.memory.resident_gib is None  # not typed: derived from the checkpoint's files
    # the built-in entries are written in exactly the shape CATALOG_MODELS takes
    for key, raw in catalog_entries.BUILTIN.items():
        assert catalog.resolve(None, {f"{key}-copy": raw})[f"{key}-copy"].model_dump(exclude={"key"}) == \
            catalog.CATALOG[key].model_dump(exclude={"key"})


def test_a_group_data_model_can_be_selected_and_given_a_kv_budget():
    config = host_config(gx10(CATALOG_MODELS={"acme-coder": NEW}, CODING_MODEL="acme-coder",
                              CODER_KV_CACHE_GIB={"qwen3.8-27b": 36, "acme-coder": 20}))
    assert config.coding_model.key == "acme-coder"


MISTAKES = [  # (what is wrong, CATALOG_MODELS, words the refusal must contain)
    ("unknown field", with_new(max_len=5), ["CATALOG_MODELS['acme-coder']", "'max_len'", "Did you mean "
                                            "'max_model_len'"]),
    ("unknown memory fact", with_new(memory__resident_gb=40), ["CATALOG_MODELS['acme-coder']['memory']",
                                                               "'resident_gb'", "Did you mean 'resident_gib'"]),
    ("wrong type", with_new(max_model_len="128k"), ["CATALOG_MODELS['acme-coder']['max_model_len']", "'128k'",
                                                    "int"]),
    ("negative resident memory", with_new(memory__resident_gib=-40.0),
     ["CATALOG_MODELS['acme-coder']['memory']['resident_gib']", "-40.0", ">= 0"]),
    ("zero context", with_new(max_model_len=0), ["CATALOG_MODELS['acme-coder']['max_model_len']", "> 0"]),
    ("unknown role", with_new(role="codr"), ["CATALOG_MODELS['acme-coder']['role']", "'codr'", "coder",
                                             "embedder"]),
    ("missing checkpoint", {"acme-coder": {k: v for k, v in NEW.items() if k != "checkpoint"}},
     ["CATALOG_MODELS['acme-coder']['checkpoint']", "<not set>"]),
    ("checkpoint not org/name", with_new(checkpoint__repo="coder-30b"),
     ["CATALOG_MODELS['acme-coder']['checkpoint']['repo']", "org/name"]),
    ("a key of a built-in model", {"qwen3.8-27b": NEW}, ["CATALOG_MODELS key 'qwen3.8-27b'", "built-in",
                                                         "CATALOG_OVERRIDES"]),
    ("a key that cannot name a unit", {"Acme Coder": NEW}, ["CATALOG_MODELS key 'Acme Coder'", "lowercase"]),
    ("a flag the deploy owns", with_new(extra_args=["--max_model_len=4096"]),
     ["CATALOG_MODELS['acme-coder']['extra_args']", "--max-model-len", "the catalog entry's max_model_len"]),
    ("the listen address", with_new(extra_args=["--host", "0.0.0.0"]), ["['extra_args']", "--host",
                                                                        "LISTEN_ADDRESS"]),
    ("a draft path in the speculative config", with_new(speculative={"method": "dflash", "model": "/x",
                                                                     "num_speculative_tokens": 7}),
     ["CATALOG_MODELS['acme-coder']['speculative']['model']", "'draft'"]),
    ("no speculative tokens", with_new(speculative={"method": "mtp"}),
     ["['speculative']['num_speculative_tokens']", "whole number >= 1"]),
    ("an embedder without a served name", with_new(role="embedder"), ["['served_name']", "OpenAI model id"]),
]


@pytest.mark.parametrize("what,models,words", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_each_kind_of_mistake_in_a_group_data_model_is_refused_naming_the_field(what, models, words):
    with pytest.raises(SettingError) as err:
        host_config(gx10(CATALOG_MODELS=models))  # what the check layer (and so the deploy's preflight) builds
    for w in words:
        assert w in str(err.value), (w, str(err.value))


def test_an_entry_is_refused_before_the_setting_that_names_it():
    """CODING_MODEL naming a broken entry: the entry's own field is blamed, not CODING_MODEL."""
    with pytest.raises(SettingError, match=r"CATALOG_MODELS\['acme-coder'\]\['role'\]"):
        host_config(gx10(CATALOG_MODELS=with_new(role="codr"), CODING_MODEL="acme-coder",
                         CODER_KV_CACHE_GIB={"acme-coder": 20}))


OVERRIDE_MISTAKES = [
    ("negative resident of a built-in", {"laguna-s-2.1": {"memory": {"resident_gib": -50}}},
     "CATALOG_OVERRIDES['laguna-s-2.1']['memory']['resident_gib']"),
    ("a flag the deploy owns", {"qwen3.8-27b": {"extra_args": ["--kv-cache-memory-bytes", "9"]}},
     "CATALOG_OVERRIDES['qwen3.8-27b']['extra_args']"),
    ("a role change", {"bge-m3": {"role": "coder"}}, "CATALOG_OVERRIDES['bge-m3']"),
    ("a kernel vLLM does not have", {"laguna-s-2.1": {"moe_backend": "marlin_fp4"}},
     "CATALOG_OVERRIDES['laguna-s-2.1']['moe_backend']"),
    ("a tuple of the wrong items", {"qwen3.8-27b": {"memory": {"measured_acceptance_per_position": [0.5, 2]}}},
     "CATALOG_OVERRIDES['qwen3.8-27b']['memory']['measured_acceptance_per_position'][1]"),
    ("an override of a group-data model", {"acme-coder": {"memory": {"weights_gib": "big"}}},
     "CATALOG_OVERRIDES['acme-coder']['memory']['weights_gib']"),
]


@pytest.mark.parametrize("what,overrides,setting", OVERRIDE_MISTAKES, ids=[m[0] for m in OVERRIDE_MISTAKES])
def test_a_bad_override_is_blamed_on_the_override(what, overrides, setting):
    with pytest.raises(SettingError) as err:
        host_config(gx10(CATALOG_OVERRIDES=overrides, CATALOG_MODELS={"acme-coder": NEW}))
    assert str(err.value).startswith(setting), str(err.value)


def test_a_negative_resident_can_no_longer_make_laguna_with_36_gib_of_kv_fit():
    """The issue's example: CATALOG_OVERRIDES resident_gib = -50 made 86 - 50 + 36 "fit"; it is refused now, by the
    schema of the override, before the plan could be fooled."""
    with pytest.raises(SettingError, match=r"\['resident_gib'\] = -50 is not valid"):
        host_config(gx10(CATALOG_OVERRIDES={"laguna-s-2.1": {"memory": {"resident_gib": -50}}},
                         CODING_MODEL="laguna-s-2.1", CODER_KV_CACHE_GIB={"qwen3.8-27b": 36, "laguna-s-2.1": 36}))


def test_overrides_still_merge_into_nested_facts():
    spec = catalog.resolve({"qwen3.8-27b": {"memory": {"kv_heads": 8}, "checkpoint": {"revision": "v2"}}})[
        "qwen3.8-27b"]
    assert spec.memory.kv_heads == 8 and spec.memory.resident_gib == 44.0  # the rest of the facts kept
    assert spec.checkpoint.repo == "unsloth/Qwen3.8-27B-NVFP4" and spec.checkpoint.revision == "v2"


def test_a_catalog_entry_setting_an_owned_flag_is_refused_in_every_spelling():
    for args in (["--port", "1"], ["--port=1"], ["--max_num_seqs", "3"], ["-tp", "2"], ["--headless"]):
        with pytest.raises(SettingError, match=r"CATALOG_OVERRIDES\['qwen3.8-27b'\]\['extra_args'\]"):
            catalog.resolve({"qwen3.8-27b": {"extra_args": ["--reasoning-parser", "qwen3", *args]}})
    catalog.resolve({"qwen3.8-27b": {"extra_args": ["--reasoning-parser", "qwen3"]}})  # a flag vLLM leaves to us


def test_the_shipped_group_data_has_the_write_ups_next_candidates_in_the_catalog_only():
    config = host_config(gx10())
    for key in ("laguna-s-2.1-main", "qwen3.5-122b-a10b-nvfp4"):
        spec = config.catalog[key]
        assert spec.role == catalog.CODER and key not in config.cfg.CODER_KV_CACHE_GIB  # listed, not selected
        m = spec.memory
        assert not (m.measured_kv_tokens or m.measured_concurrency or m.measured_decode_tokens_per_s
                    or m.published_decode_tokens_per_s or m.measured_acceptance_rate), "marked unmeasured"
        assert m.hub_facts is not None and m.hub_facts.source and m.hub_facts.config
    assert config.catalog["laguna-s-2.1-main"].memory.hub_facts.weights_bytes == 99_700_000_000
    assert config.catalog["qwen3.5-122b-a10b-nvfp4"].memory.hub_facts.weights_bytes == 83_500_000_000


def test_a_group_data_model_goes_through_the_whole_deploy(tmp_path):
    """The @fake deploy with a model that exists only as --data: its checkpoint is downloaded and verified against
    the lock beside the others, and the coder is rolled out with it (no code knows its name)."""
    import json

    from tests.deploy.test_deploy_fake import run_fake

    entry = {"role": "coder", "checkpoint": {"repo": "sim/tiny-qwen-4l", "revision": "main"}, "max_model_len": 65536}
    out = run_fake("dgx", tmp_path, "--data", "CATALOG_MODELS=" + json.dumps({"acme-coder": entry}),
                   "--data", "CODING_MODEL=acme-coder",
                   "--data", "CODER_KV_CACHE_GIB=" + json.dumps({"qwen3.8-27b": 36, "laguna-s-2.1": 12,
                                                                 "acme-coder": 12}))
    fetches = [c for c in out["commands"] if "fetch_checkpoint.py" in c and "--listing" in c]
    assert len(fetches) == 6 and any("sim--tiny-qwen-4l@" in c for c in fetches), out["log"][-3000:]
    assert any("rollout.py apply coder" in c for c in out["commands"]), out["log"][-3000:]


def test_figures_keyed_by_a_number_take_the_keys_json_writes_as_text():
    """JSON (a --data value) has text keys only: {"36": 1014892} is the KV budget 36 GiB; a key that is no number is
    refused naming the field and what its keys are, in words (not pydantic's type text)."""
    memory = {"measured_kv_tokens": {"36": 1_014_892, "12.5": 400_000}, "published_decode_tokens_per_s": {"4": 80.0}}
    spec = catalog.resolve({"qwen3.8-27b": {"memory": memory}})["qwen3.8-27b"]
    assert spec.memory.measured_kv_tokens == {36: 1_014_892, 12.5: 400_000}
    assert spec.memory.published_decode_tokens_per_s == {4: 80.0}
    for key in ("big", "nan", "inf"):
        with pytest.raises(SettingError) as e:
            catalog.resolve({"qwen3.8-27b": {"memory": {"measured_kv_tokens": {key: 1}}}})
        assert e.value.setting == f"CATALOG_OVERRIDES['qwen3.8-27b']['memory']['measured_kv_tokens'][{key!r}]"
        assert "dict[float, int]: a mapping of KV budgets in GiB" in str(e.value) and "FieldInfo" not in str(e.value)
