"""Bad input is refused before the host is touched, with a message naming the setting, the value and what is
valid. Table-driven: each case mutates a valid configuration in one way."""

from __future__ import annotations

import json
import os

import pytest

from sparkctl.check import validate_host as validate
from sparkctl.errors import SparkctlError
from tasks.preflight import check_facts

GIB = 2**30


def _set(key, value):
    def mutate(d, tmp):
        d[key] = value
    return mutate


def _lock_sha(value):
    def mutate(d, tmp):
        lock = json.load(open(d["MODEL_LOCK_FILE"]))
        lock["checkpoints"]["unsloth/Qwen3.8-27B-NVFP4"]["sha"] = value
        p = tmp / "lock.json"
        p.write_text(json.dumps(lock))
        d["MODEL_LOCK_FILE"] = str(p)
    return mutate


def _token(text):
    def mutate(d, tmp):
        p = tmp / "tok"
        p.write_text(text)
        os.environ["SPARK_API_TOKEN_FILE"] = str(p)
    return mutate


def _no_token(d, tmp):
    os.environ["SPARK_API_TOKEN_FILE"] = str(tmp / "does-not-exist")


def _unreadable_tls(d, tmp):
    d["TLS_CERT_FILE"] = str(tmp / "nope.pem")
    d["TLS_KEY_FILE"] = str(tmp / "nope.key")


def _embedder(d, tmp):
    d["EMBEDDERS"] = [{"model": "qwen3.8-27b", "kv_cache_gib": 2}, d["EMBEDDERS"][1]]


CASES = [
    # (id, mutation, words the message must contain)
    ("unknown CODING_MODEL", _set("CODING_MODEL", "llama-9000"), ["CODING_MODEL", "llama-9000", "qwen3.8-27b"]),
    ("malformed revision sha", _lock_sha("main"), ["sha", "'main'", "40-hex", "lock refresh"]),
    ("unresolved revision", _lock_sha(None), ["sha", "None", "40-hex"]),
    ("KV budget does not fit", _set("CODER_KV_CACHE_GIB", {"qwen3.8-27b": 90}), ["CODER_KV_CACHE_GIB", "90"]),
    ("zero port", _set("CODER_PORT", 0), ["CODER_PORT", "0", "1 to 65535"]),
    ("negative port", _set("PROXY_PORT", -443), ["PROXY_PORT", "-443", "1 to 65535"]),
    ("duplicate ports", _set("EMBEDDER_PORTS", [8001, 8000]), ["EMBEDDER_PORTS[1]", "8000", "CODER_PORT"]),
    ("port count", _set("EMBEDDER_PORTS", [8001]), ["EMBEDDER_PORTS", "2 ports"]),
    ("missing token file", _no_token, ["SPARK_API_TOKEN_FILE", "does-not-exist", "readable file"]),
    ("empty token", _token("  \n"), ["SPARK_API_TOKEN_FILE", "non-empty"]),
    ("unknown topology", _set("SPARK_TOPOLOGY", "mesh"), ["SPARK_TOPOLOGY", "mesh", "replicas", "tensor-parallel"]),
    ("unreadable TLS files", _unreadable_tls, ["TLS_CERT_FILE", "nope.pem", "readable PEM"]),
    ("coder used as embedder", _embedder, ["EMBEDDERS[0].model", "qwen3.8-27b", "bge-m3"]),
    ("KV budget not a number", _set("CODER_KV_CACHE_GIB", {"qwen3.8-27b": "lots"}), ["CODER_KV_CACHE_GIB", "lots"]),
    ("catalog override typo", _set("CATALOG_OVERRIDES", {"qwen3.8-27b": {"max_len": 5}}),
     ["CATALOG_OVERRIDES", "max_len", "max_model_len"]),
]


@pytest.mark.parametrize("case_id,mutate,words", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_with_a_clear_message(case_id, mutate, words, gx10_data, tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_API_TOKEN_FILE", os.environ["SPARK_API_TOKEN_FILE"])  # restored after the case
    mutate(gx10_data, tmp_path)
    with pytest.raises(SparkctlError) as exc:
        validate(gx10_data, "gx10")
    for w in words:
        assert w in str(exc.value), f"{w!r} missing from: {exc.value}"


def test_the_valid_configuration_passes(gx10_data):
    s = validate(gx10_data, "gx10")
    assert s.coder.model.key == "qwen3.8-27b" and s.warnings == []


def test_short_proxy_timeout_is_a_warning_naming_the_floor(gx10_data):
    gx10_data["PROXY_READ_TIMEOUT_S"] = 600
    s = validate(gx10_data, "gx10")
    assert any("PROXY_READ_TIMEOUT_S = 600" in w and "7200" in w for w in s.warnings)


FACTS_OK = dict(arch="aarch64", os_release={"id": "ubuntu", "version_id": "24.04"},
                gpu={"name": "NVIDIA GB10", "compute_cap": "12.1", "driver_version": "580.95.05"}, is_dgx=True,
                disk_free=500 * GIB, pending_bytes=100 * GIB)

FACT_CASES = [
    ("host not arm64", {"arch": "x86_64"}, ["x86_64", "EXPECTED_ARCH"]),
    ("not Ubuntu 24.04", {"os_release": {"id": "ubuntu", "version_id": "22.04"}}, ["ubuntu 22.04", "EXPECTED_OS"]),
    ("no GB10", {"gpu": {"name": "NVIDIA H100", "compute_cap": "9.0", "driver_version": "580.1"}},
     ["H100", "REQUIRED_GPU"]),
    ("DGX OS without driver", {"gpu": None}, ["dgx-release", "nvidia-smi"]),
    ("disk too small", {"disk_free": 50 * GIB}, ["50.0 GiB free", "100.0 GiB", "DISK_HEADROOM_GIB"]),
]


@pytest.mark.parametrize("case_id,change,words", FACT_CASES, ids=[c[0] for c in FACT_CASES])
def test_preflight_facts_refuse_a_box_that_is_not_a_gx10(case_id, change, words, gx10_data):
    s = validate(gx10_data, "gx10")
    assert check_facts(s, **FACTS_OK) == []
    problems = check_facts(s, **{**FACTS_OK, **change})
    assert len(problems) == 1
    for w in words:
        assert w in problems[0], problems[0]
