"""The page cache before an engine starts (issue 39, items 4 and 6): on the GB10's unified memory the cached pages of
the checkpoint files are the engines' pool. The simulated Spark's strict stand-in (sparkctl/sim/standins/gb10-memory)
counts them, and what the starting service holds itself, as a GB10 does; the unit evicts them before every start
(sparkctl/box/page_cache.py, PAGE_CACHE_EVICTION), so vLLM's snapshot is taken after it."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import shlex

import pytest

from sparkctl import REPO_ROOT
from sparkctl.box import page_cache
from sparkctl.capacity import admission
from sparkctl.check.validate import validate_host
from sparkctl.config import groupdata
from sparkctl.render.units import render_unit
from tests.conftest import FAKE_LOCK

STANDIN = REPO_ROOT / "sparkctl" / "sim" / "standins" / "gb10-memory"


def load_standin():
    loader = importlib.machinery.SourceFileLoader("gb10_memory", str(STANDIN))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("gb10_memory", loader))
    loader.exec_module(module)
    return module


def vllm_request_memory(snapshot, config):
    """vLLM's request_memory as the stand-in calls it (the planner's copy: tests/e2e/test_admission.py holds the
    copy to the simulated Spark's vLLM)."""
    requested, refusal = admission.request_memory_copy(snapshot.free_memory, snapshot.total_memory,
                                                       config.gpu_memory_utilization)
    if refusal:
        raise ValueError(refusal)
    return requested


@pytest.fixture
def sim_settings(token_file, tmp_path):
    data = {**groupdata.load(["all", "gx10", "sim"]), "MODEL_LOCK_FILE": FAKE_LOCK, "SECRETS_DIR": str(tmp_path)}
    return validate_host(data, "spark-1", hosts=["spark-1"])


def _coder_flip_start(s, standin, cached_gib):
    """The coder's start beside the embedders on the simulated pool, as the unit's ExecStartPre=+ judges it."""
    cfg = s.cfg
    coder = s.coder
    held = {svc.name: admission.engine_of(svc, cfg, i).footprint_gib for i, svc in enumerate(s.embedders)}
    return standin.admit(coder.name, vllm_request_memory, admission.service_utilization(coder, cfg),
                         cfg.BOX_USABLE_MEMORY_GIB, cfg.OS_RESERVE_GIB, held, cfg.VLLM_STARTING_ENGINE_GIB,
                         cached_gib)


def test_a_start_is_refused_with_the_checkpoints_cached_and_admitted_once_evicted(sim_settings):
    standin = load_standin()
    s = sim_settings
    cfg = s.cfg
    code, message = _coder_flip_start(s, standin, cached_gib=0.0)  # after the eviction: nothing cached
    assert code == 0 and message.startswith("gb10-memory: coder admitted"), message
    # without it: the checkpoints a flip left in the page cache (a GB10's flipped-away coder: tens of GiB; here a
    # stand-in figure of the same share of the simulated pool) fill the pool vLLM's snapshot reads
    slack = admission.walk_settings(s)[0]
    cached = slack.free_gib - slack.required_gib + 0.5
    code, message = _coder_flip_start(s, standin, cached_gib=cached)
    assert code == 1 and "is less than desired GPU memory utilization" in message, message
    assert f"checkpoints' page cache {cached:.2f}" in message and f"its own {cfg.VLLM_STARTING_ENGINE_GIB:g}" in message


def test_the_standin_counts_what_the_starting_service_holds_itself(sim_settings):
    standin = load_standin()
    s = sim_settings
    first = admission.walk_settings(s)[0]  # the coder's first install: nothing else runs
    room = first.free_gib + s.cfg.VLLM_STARTING_ENGINE_GIB - first.required_gib  # spare before its own share
    args = (s.coder.name, vllm_request_memory, first.utilization, s.cfg.BOX_USABLE_MEMORY_GIB, s.cfg.OS_RESERVE_GIB,
            {})
    assert standin.admit(*args, s.cfg.VLLM_STARTING_ENGINE_GIB, 0.0)[0] == 0
    code, message = standin.admit(*args, room + 0.1, 0.0)  # a service holding more than that at the snapshot
    assert code == 1 and f"its own {room + 0.1:g} before the snapshot" in message, message


def test_the_standin_reads_a_files_cached_pages_and_the_eviction_drops_them(tmp_path):
    standin = load_standin()
    hub = tmp_path / "hub"
    blob = hub / "models--org--name" / "blobs" / "abc"
    blob.parent.mkdir(parents=True)
    blob.write_bytes(os.urandom(4 << 20))  # 4 MiB, written through the page cache
    (hub / "models--org--name" / "snapshots" / "sha").mkdir(parents=True)
    (hub / "models--org--name" / "snapshots" / "sha" / "model.safetensors").symlink_to(blob)
    with open(blob, "rb") as f:
        os.fsync(f.fileno())  # clean pages: DONTNEED drops only those
        f.read()
    cached = standin.checkpoint_cache_gib(str(hub))
    if cached == 0:
        pytest.skip("this filesystem keeps no page cache for the file (nothing to count)")
    assert cached == pytest.approx(4 / 1024, rel=0.01)  # the blob once, not again through its snapshot link
    assert page_cache.checkpoint_files(str(hub)) == [str(blob)]
    assert page_cache.main(["--mode", "checkpoints", "--hub", str(hub), "--service", "coder"]) == 0
    assert standin.checkpoint_cache_gib(str(hub)) < cached / 4  # evicted (a page or two may be read back)


def test_the_unit_evicts_before_the_standin_judges_the_start(sim_settings):
    unit = render_unit(sim_settings.coder, sim_settings.cfg)
    pre = [line.split("+", 1)[1] for line in unit.splitlines() if line.startswith("ExecStartPre=+")]
    assert "page_cache.py" in pre[0] and "gb10-memory" in pre[1]  # eviction first: the snapshot is after it
    words = shlex.split(pre[0])
    cfg = sim_settings.cfg
    assert words[words.index("--mode") + 1] == cfg.PAGE_CACHE_EVICTION == "checkpoints"
    assert words[words.index("--hub") + 1] == f"{cfg.MODEL_STORE}/hub"
    standin = shlex.split(pre[1])
    assert standin[standin.index("--starting-gib") + 1] == f"{cfg.VLLM_STARTING_ENGINE_GIB:g}"
    assert standin[standin.index("--page-cache-dir") + 1] == f"{cfg.MODEL_STORE}/hub"


def test_the_gx10_unit_evicts_and_off_renders_nothing(gx10_data):
    s = validate_host(gx10_data, "gx10")
    unit = render_unit(s.coder, s.cfg)
    assert "page_cache.py --mode checkpoints" in unit and "gb10-memory" not in unit  # vLLM reads the real pool
    off = validate_host({**gx10_data, "PAGE_CACHE_EVICTION": "off"}, "gx10")
    assert "page_cache.py" not in render_unit(off.coder, off.cfg)
    drop = validate_host({**gx10_data, "PAGE_CACHE_EVICTION": "drop-caches"}, "gx10")
    assert "--mode drop-caches" in render_unit(drop.coder, drop.cfg)


def test_drop_caches_syncs_and_writes_3(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr(page_cache.os, "sync", lambda: synced.append(True))
    proc = tmp_path / "drop_caches"
    page_cache.drop_caches(str(proc))
    assert synced and proc.read_text() == "3\n"
