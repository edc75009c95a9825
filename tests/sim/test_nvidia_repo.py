"""The stand-in NVIDIA repository: real package names, a correct signed index, stand-in contents."""

import hashlib
import subprocess
import time

import pytest

from sparkctl.sim import config, nvidia_repo, standins, util

from .conftest import have

pytestmark = pytest.mark.skipif(not have("gpg", "gpgv", "dpkg-deb", "apt-ftparchive"),
                                reason="needs gpg, dpkg-deb, apt-ftparchive (sparkctl/sim/host-packages.txt)")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nvrepo")
    mp = pytest.MonkeyPatch()
    mp.setattr(config, "NVIDIA_REPO_DIR", tmp / "repo")
    mp.setattr(config, "NVIDIA_GNUPG_DIR", tmp / "gnupg")
    assert nvidia_repo.build() == "built"
    assert nvidia_repo.build() == "cached"
    yield tmp / "repo"
    mp.undo()


def test_index_lists_the_real_package_names(repo):
    stanzas = nvidia_repo.parse_packages((repo / "Packages").read_text())
    versions = {s["Package"]: s["Version"] for s in stanzas}
    assert versions == {"cuda-keyring": "1.1-1", "nvidia-driver-pinning-580": "580.95.05-1",
                        "nvidia-open-580": "580.95.05-1", "cuda-toolkit-13-0": "13.0.2-1"}
    for s in stanzas:
        deb = repo / s["Filename"]
        assert deb.exists() and int(s["Size"]) == deb.stat().st_size
        assert s["SHA256"] == hashlib.sha256(deb.read_bytes()).hexdigest()
        assert s["Architecture"] == "all" and "STAND-IN" in s["Description"]
    assert (repo / "cuda-keyring_1.1-1_all.deb").exists()  # the URL the deploy downloads


def test_release_hashes_and_signature_verify_with_the_shipped_keyring(repo, tmp_path):
    release = nvidia_repo.parse_packages((repo / "Release").read_text())[0]
    sha = {line.split()[2]: line.split()[0] for line in release["SHA256"].splitlines() if line.strip()}
    assert sha["Packages"] == hashlib.sha256((repo / "Packages").read_bytes()).hexdigest()
    assert sha["Packages.gz"] == hashlib.sha256((repo / "Packages.gz").read_bytes()).hexdigest()
    root = tmp_path / "keyring"
    subprocess.run(["dpkg-deb", "-x", str(repo / "cuda-keyring_1.1-1_all.deb"), str(root)], check=True)
    keyring = root / nvidia_repo.KEYRING_PATH.lstrip("/")
    listing = (root / nvidia_repo.LIST_PATH.lstrip("/")).read_text()
    assert "STAND-IN" in listing
    assert f"deb [signed-by={nvidia_repo.KEYRING_PATH}] http://10.250.0.1:8091/ /" in listing
    ok = subprocess.run(["gpgv", "--keyring", str(keyring), str(repo / "InRelease")], capture_output=True)
    assert ok.returncode == 0, ok.stderr
    tampered = tmp_path / "InRelease"
    tampered.write_text((repo / "InRelease").read_text().replace("Packages", "Packagez", 1))
    assert subprocess.run(["gpgv", "--keyring", str(keyring), str(tampered)], capture_output=True).returncode != 0


@pytest.mark.parametrize("deb,path,content", [
    ("nvidia-open-580_580.95.05-1_all.deb", "usr/bin/nvidia-smi", standins.nvidia_smi),
    ("cuda-toolkit-13-0_13.0.2-1_all.deb", "usr/local/cuda-13.0/bin/nvcc", standins.nvcc),
    ("cuda-toolkit-13-0_13.0.2-1_all.deb", "usr/local/cuda-13.0/bin/ptxas", standins.ptxas),
])
def test_packages_ship_the_standins(repo, tmp_path, deb, path, content):
    subprocess.run(["dpkg-deb", "-x", str(repo / deb), str(tmp_path)], check=True)
    f = tmp_path / path
    assert f.read_bytes() == content() and f.stat().st_mode & 0o111


def gpg_agents(home) -> list[int]:
    return [p for p in util.processes_naming(home) if "gpg-agent" in " ".join(util.cmdline(p))]


def no_agent_within(home, seconds: float = 5) -> bool:
    deadline = time.monotonic() + seconds
    while gpg_agents(home):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_signing_the_repository_leaves_no_gpg_agent_running(tmp_path, monkeypatch):
    home = tmp_path / "gnupg"
    monkeypatch.setattr(config, "NVIDIA_REPO_DIR", tmp_path / "repo")
    monkeypatch.setattr(config, "NVIDIA_GNUPG_DIR", home)
    assert nvidia_repo.build() == "built"  # a new key, then the index signed twice with the real gpg
    assert no_agent_within(home), gpg_agents(home)
    # the check sees an agent when one is left: signing alone leaves one, stop_agent ends it
    (tmp_path / "Release").write_text("x\n")
    nvidia_repo._gpg("--clearsign", "-o", "-", str(tmp_path / "Release"))
    assert gpg_agents(home)
    nvidia_repo.stop_agent(home)
    assert no_agent_within(home), gpg_agents(home)
