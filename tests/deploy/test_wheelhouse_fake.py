"""The vLLM step's wheels against pyinfra's @fake connector (tasks/vllm.py): with the control machine's wheelhouse
cache for the set, the box gets a copy and installs from it alone, every hash checked; an AIRGAPPED box nothing on
this machine can serve, and a box without the disk for the copy, are refused before any command changes it; with no
cache and no index here, a box that is not air-gapped installs from the index itself, and the deploy says so."""

from __future__ import annotations

import json

import pytest

from sparkctl.check import wheelhouse
from sparkctl.check.load import load
from tests.deploy.test_deploy_fake import changes, run_fake

GX10 = ["all", "gx10"]


def _changes(out: dict) -> list[str]:
    """changes(), without two reads it does not know: the preflight's DeviceGroups fact (/proc/devices after loading
    the modules) and the Sha256Sums fact of a partial copy."""
    return [c for c in changes(out) if not c.endswith(("/proc/devices", "-exec sha256sum {} + || true"))]


def stand_in_cache(root, size: int | None = None) -> wheelhouse.Wheelhouse:
    """A complete cache of the real GX10's set with stand-in wheels (the fake box never opens them)."""
    cfg = load(GX10).cfg
    partial = root / f"{wheelhouse.key(cfg)}{wheelhouse.PARTIAL}"
    partial.mkdir(parents=True)
    pins = []
    for name, version in (("vllm", "0.32.0"), ("torch", "2.13.0"), ("pip", "26.3")):
        wheel = partial / f"{name}-{version}-py3-none-any.whl"
        wheel.write_bytes(f"{name} {version}".encode())
        pins.append(wheelhouse.Pin(name, version, wheel.name, wheelhouse.sha256_of(wheel),
                                   size or wheel.stat().st_size))
    return wheelhouse.complete(cfg, partial, tuple(pins), {"version": "1", "install": []})


@pytest.fixture(scope="module")
def copied(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheels")
    wh = stand_in_cache(tmp / "cache")
    return wh, run_fake("dgx", tmp, "--data", f"WHEELHOUSE_CACHE={tmp / 'cache'}")


def test_the_box_installs_from_its_copy_of_the_wheelhouse_alone(copied):
    wh, out = copied
    box = f"/opt/sparkctl/wheelhouse/{wh.key}"
    assert any(o.startswith(f"vLLM | Copy the wheelhouse {wh.key} to {box} (3 of 3 wheels") for o in out["ops"]), \
        out["ops"]
    cmds = changes(out)
    check = next(i for i, c in enumerate(cmds) if "sha256sum --quiet --strict -c SHA256SUMS" in c)
    assert cmds[check].startswith(f"cd {box}.partial && ")
    assert cmds[check + 1] == f"touch {box}.partial/.complete && rm -rf {box} && mv {box}.partial {box}"
    installs = [c for c in cmds if "pip install" in c]
    assert installs == [f"{venv}/bin/python -m pip install --no-input --progress-bar off --no-index --find-links {box} "
                        f"--require-hashes -r {box}/{f}" for venv in [installs[0].split("/bin/python")[0]]
                        for f in (wheelhouse.PIP, wheelhouse.WHEELS)], installs
    assert check < cmds.index(installs[0])  # checked before pip reads it
    assert not any("vllm==0.32.0" in c for c in cmds)  # nothing from the index


def test_an_airgapped_box_with_nothing_here_to_serve_it_is_refused_before_any_change(tmp_path):
    out = run_fake("dgx", tmp_path, "--data", "AIRGAPPED=True", "--data", f"WHEELHOUSE_CACHE={tmp_path / 'none'}")
    assert _changes(out) == [], _changes(out)
    assert "AIRGAPPED = True is not valid" in out["log"] and "has no route to the package index" in out["log"]
    assert "nothing here provides vllm==0.32.0" in out["log"]


def test_too_little_disk_for_the_copy_is_refused_before_it(tmp_path):
    stand_in_cache(tmp_path / "cache", size=10 ** 12)  # 3 TB of wheels against the fake box's 900 GB free
    out = run_fake("dgx", tmp_path, "--data", f"WHEELHOUSE_CACHE={tmp_path / 'cache'}")
    assert _changes(out) == [], _changes(out)
    assert "GiB free under SPARKCTL_HOME=/opt/sparkctl, but the wheelhouse of VLLM_PIP_REQUIREMENT='vllm==0.32.0' " \
           "needs 2793.97 GiB there" in out["log"]


def test_with_no_wheelhouse_and_no_index_here_the_box_installs_from_the_index_and_says_so(tmp_path):
    out = run_fake("dgx", tmp_path, "--data", f"WHEELHOUSE_CACHE={tmp_path / 'none'}")
    assert "no wheelhouse for vllm==0.32.0 on this machine (no wheelhouse cache under WHEELHOUSE_CACHE=" in out["log"]
    assert "the box's own pip installs it from the index" in out["log"]
    installs = [c for c in changes(out) if "pip install" in c]
    assert installs[-1].endswith(" vllm==0.32.0") and not any("--require-hashes" in c for c in installs)
    assert json.dumps(out["ops"]).count("Copy the wheelhouse") == 0
