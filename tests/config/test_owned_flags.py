"""The flags the deploy owns (sparkctl/config/owned_flags.py): the table covers every flag the deploy itself puts on
vLLM's command line, in every topology; every spelling vLLM 0.32's parser accepts is recognised; nothing a catalog
entry legitimately passes is."""

from __future__ import annotations

import dataclasses

import pytest

from sparkctl.check.validate import validate_host
from sparkctl.config import catalog
from sparkctl.config.owned_flags import BY_LONG, check_counted_flags, check_owned_flags, owner_of, switch_of
from sparkctl.errors import SettingError
from sparkctl.render import units


def _deploys_own_flags(settings) -> set[str]:
    """The flags vllm_args emits for each service with no free-form list at all (no catalog extra_args, no
    VLLM_COMMON_ARGS): what the deploy derives itself, topology flags included."""
    cfg = settings.cfg.model_copy(update={"VLLM_COMMON_ARGS": []})
    flags = set()
    for svc in settings.services:
        bare = dataclasses.replace(svc, model=svc.model.model_copy(update={"extra_args": ()}))
        flags |= {a for a in units.vllm_args(bare, cfg) if a.startswith("-")}
    return flags


@pytest.mark.parametrize("topology", [{}, {"SPARK_TOPOLOGY": "tensor-parallel"},
                                      {"SPARK_TOPOLOGY": "tensor-parallel", "TP_BACKEND": "ray"}],
                         ids=["single", "tensor-parallel native", "tensor-parallel ray"])
def test_every_flag_the_deploy_derives_is_owned(topology, gx10_data):
    hosts = ["spark-1", "spark-2"] if topology else ["gx10"]
    for host in hosts:
        for model in gx10_data["CODER_KV_CACHE_GIB"]:  # every coder a flip may select
            s = validate_host({**gx10_data, **topology, "CODING_MODEL": model}, host, hosts=hosts,
                              read_secrets=False)
            derived = _deploys_own_flags(s)
            assert derived or not s.services, "vllm_args emitted no flag"  # a Ray worker runs no vLLM service
            assert {f for f in derived if owner_of(f) is None} == set(), f"{host}, {model}: not in OWNED_FLAGS"


def test_no_catalog_entry_passes_an_owned_flag():
    for key, spec in catalog.CATALOG.items():
        check_owned_flags(f"the catalog entry {key!r}'s extra_args", spec.extra_args)


SPELLINGS = [
    ("--host", "--host"), ("--host=0.0.0.0", "--host"), ("--hos", "--host"),
    ("--served_model_name", "--served-model-name"),
    ("--max_model_len=5", "--max-model-len"), ("--max-model", "--max-model-len"), ("--max-num-s", "--max-num-seqs"),
    ("--kv-cache-memory", "--kv-cache-memory-bytes"), ("--speculative-config.method", "--speculative-config"),
    ("--speculative_config.num_speculative_tokens=9", "--speculative-config"), ("-sc", "--speculative-config"),
    ("-sc.method", "--speculative-config"), ("-s", "--speculative-config"), ("-tp", "--tensor-parallel-size"),
    ("-tp=2", "--tensor-parallel-size"), ("-t", "--tensor-parallel-size"), ("-n2", "--nnodes"), ("-r=1", "--node-rank"),
    ("-dp", "--data-parallel-size"), ("--model=x", "--model"), ("--config", "--config"), ("--uds", "--uds"),
    ("--headless", "--headless"), ("--gpu-memory-utilization", "--gpu-memory-utilization"),
    ("--gpu_memory_utilization=0.5", "--gpu-memory-utilization"),
    # not owned: vLLM's other flags, values, argparse's end of options, a negative number
    ("--enforce-eager", None), ("--model-impl", None), ("--kv-cache-dtype-skip-layers", None),
    ("--config-format", None), ("--limit-mm-per-prompt", None), ("--runner", None), ("-dpn", None), ("-O3", None),
    ("-q", None), ("--", None), ("-", None), ("-1", None), ("qwen3", None), ('{"image":4}', None),
    ("--enable-prefix-caching", None),
]


@pytest.mark.parametrize("token,flag", SPELLINGS, ids=[t for t, _ in SPELLINGS])
def test_every_spelling_vllm_accepts_is_recognised(token, flag):
    owned = owner_of(token)
    assert (owned.flag if owned else None) == flag


def test_the_refusal_names_the_setting_the_flag_and_where_it_is_set():
    with pytest.raises(SettingError) as e:
        check_owned_flags("VLLM_COMMON_ARGS", ["--enforce-eager", "--max_num_seqs=64"])
    text = str(e.value)
    assert text.startswith("VLLM_COMMON_ARGS[1] = '--max_num_seqs=64' is not valid")
    assert "how vLLM spells --max-num-seqs" in text and "set it through CODER_MAX_NUM_SEQS" in text
    assert set(BY_LONG) >= {"--host", "--port", "--max-model-len", "--kv-cache-memory-bytes"}


@pytest.mark.parametrize("args, refused", [
    (["--block-size", "0"], "--block-size 0"), (["--block-size=0"], "--block-size=0"),
    (["--block_size", "-16"], "--block_size -16"), (["--enforce-eager", "--block-size"], "--block-size"),
    (["--block-size", "sixteen"], "--block-size sixteen"), (["--block-size", "16"], None),
    (["--block-size=1"], None), (["--enforce-eager"], None)])
def test_a_block_size_is_a_whole_number_of_tokens_from_1(args, refused):
    """vLLM's CacheConfig refuses a block size of 0 when the engine starts (block_size gt=0), on the box: the
    check refuses it first, naming the argument."""
    if refused is None:
        check_counted_flags("VLLM_COMMON_ARGS", args)
        return
    with pytest.raises(SettingError) as e:
        check_counted_flags("VLLM_COMMON_ARGS", args)
    assert e.value.value == refused and "whole number of tokens from 1" in str(e.value)


@pytest.mark.parametrize("args, said", [
    ([], None), (["--no-enable-chunked-prefill"], False), (["--no_enable_chunked_prefill"], False),
    (["--enable-chunked-prefill"], True), (["--no-enable-chunked-prefill", "--enable-chunked-prefill"], True),
    (["--enable-chunked-prefill", "--no-enable-chunked-prefill"], False), (["--enable-prefix-caching"], None)])
def test_a_boolean_flag_is_read_as_vllm_reads_it_the_last_one_winning(args, said):
    assert switch_of(args, "--enable-chunked-prefill") is said
