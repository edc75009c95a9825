"""A stand-in for NVIDIA's CUDA apt repository (ubuntu2404/sbsa), served on 10.250.0.1:8091.

Stub packages with the real names, built with dpkg-deb, in a flat repository signed with a key generated here
(InRelease + Release.gpg), so the deploy's apt runs with signature checking exactly as against the real one:

  cuda-keyring 1.1-1               the stand-in key in /usr/share/keyrings/cuda-archive-keyring.gpg and
                                   /etc/apt/sources.list.d/cuda-ubuntu2404-sbsa.list (signed-by that keyring);
                                   also served at /cuda-keyring_1.1-1_all.deb like NVIDIA's
  nvidia-driver-pinning-580        an apt preferences file holding the driver on the 580 branch
  nvidia-open-580                  /usr/bin/nvidia-smi (the GB10 stand-in)
  cuda-toolkit-13-0                /usr/local/cuda-13.0/bin/nvcc and bin/ptxas (stand-ins: release 13.0, V13.0.88)

Every file they install says that it is a stand-in. Architecture `all`: they install on amd64 and arm64 test hosts.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import sys
import tempfile
from functools import partial
from http.server import SimpleHTTPRequestHandler
from pathlib import Path

from sparkctl.errors import SparkctlError
from sparkctl.sim import config, standins
from sparkctl.sim.util import http_server_class, run, serve

RECIPE_VERSION = "1"
KEY_UID = "sparkctl simulated Spark - STAND-IN NVIDIA CUDA repository <sim@sparkctl.invalid>"
KEYRING_PATH = "/usr/share/keyrings/cuda-archive-keyring.gpg"
LIST_PATH = "/etc/apt/sources.list.d/cuda-ubuntu2404-sbsa.list"
KEYRING_DEB = "cuda-keyring_1.1-1_all.deb"
MAINTAINER = "sparkctl simulated Spark <sim@sparkctl.invalid>"
SOURCE_DATE_EPOCH = "1767225600"  # 2026-01-01: reproducible timestamps inside the .debs


def repo_url() -> str:
    return f"http://{config.HOST_ADDRESS}:{config.NVIDIA_REPO_PORT}/"


def _gpg(*args: str, input: bytes | None = None) -> bytes:
    home = config.NVIDIA_GNUPG_DIR
    p = run(["gpg", "--homedir", home, "--batch", "--yes", "--no-tty", "--quiet", *args], capture=True,
            check=False, input=input.decode() if input is not None else None)
    if p.returncode != 0:
        raise SparkctlError(f"gpg {' '.join(args[:2])} failed: {p.stderr.strip()}")
    return p.stdout.encode() if isinstance(p.stdout, str) else p.stdout


def stop_agent(home: Path) -> None:
    """gpg starts an agent for the signing key that outlives the command; stop it (and any other gpg daemon of
    this home), so signing leaves nothing running."""
    if shutil.which("gpgconf") and Path(home).is_dir():
        run(["gpgconf", "--homedir", home, "--kill", "all"], check=False, timeout=30)


def ensure_key() -> str:
    """The repository signing key (generated once, no passphrase); returns its fingerprint."""
    home = config.NVIDIA_GNUPG_DIR
    home.mkdir(parents=True, exist_ok=True)
    os.chmod(home, 0o700)
    out = _gpg("--with-colons", "--list-secret-keys").decode()
    if "sec:" not in out:
        _gpg("--passphrase", "", "--quick-gen-key", KEY_UID, "ed25519", "sign", "never")
        out = _gpg("--with-colons", "--list-secret-keys").decode()
    return next(line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:"))


def public_keyring() -> bytes:
    """The binary (non-armored) public key, as apt's signed-by= wants it."""
    import subprocess

    p = subprocess.run(["gpg", "--homedir", str(config.NVIDIA_GNUPG_DIR), "--batch", "--export"],
                       capture_output=True)
    if p.returncode != 0 or not p.stdout:
        raise SparkctlError(f"gpg --export failed: {p.stderr.decode(errors='replace')}")
    return p.stdout


def packages() -> list[dict]:
    """name, version, depends, description, files {path: (bytes, mode)}, symlinks, scripts, conffiles."""
    list_text = (f"# STAND-IN of NVIDIA's CUDA repository for the simulated Spark (sparkctl/sim/nvidia_repo.py)\n"
                 f"deb [signed-by={KEYRING_PATH}] {repo_url()} /\n").encode()
    pin_text = (b"# STAND-IN of nvidia-driver-pinning-580 for the simulated Spark (sparkctl/sim/nvidia_repo.py)\n"
                b"Package: nvidia-open-580\nPin: version 580.*\nPin-Priority: 1000\n")
    cuda_version = json.dumps({"_comment": "STAND-IN CUDA toolkit of the simulated Spark",
                               "cuda": {"name": "CUDA SDK", "version": "13.0.2"},
                               "cuda_nvcc": {"name": "CUDA NVCC", "version": "13.0.88"}}, indent=2).encode()
    return [
        {"name": "cuda-keyring", "version": "1.1-1", "depends": "",
         "description": "STAND-IN: NVIDIA CUDA repository keyring (simulated Spark)",
         "files": {KEYRING_PATH: (public_keyring(), 0o644), LIST_PATH: (list_text, 0o644)},
         "conffiles": [LIST_PATH]},
        {"name": "nvidia-driver-pinning-580", "version": "580.95.05-1", "depends": "",
         "description": "STAND-IN: pins the NVIDIA driver to the 580 branch (simulated Spark)",
         "files": {"/etc/apt/preferences.d/nvidia-driver-pinning-580": (pin_text, 0o644)},
         "conffiles": ["/etc/apt/preferences.d/nvidia-driver-pinning-580"]},
        {"name": "nvidia-open-580", "version": "580.95.05-1", "depends": "python3",
         "description": "STAND-IN: NVIDIA open kernel driver 580 (simulated Spark; ships the nvidia-smi stand-in)",
         "files": {"/usr/bin/nvidia-smi": (standins.nvidia_smi(), 0o755)}},
        {"name": "cuda-toolkit-13-0", "version": "13.0.2-1", "depends": "",
         "description": "STAND-IN: CUDA Toolkit 13.0 (simulated Spark; ships nvcc and ptxas stand-ins)",
         "files": {"/usr/local/cuda-13.0/bin/nvcc": (standins.nvcc(), 0o755),
                   "/usr/local/cuda-13.0/bin/ptxas": (standins.ptxas(), 0o755),
                   "/usr/local/cuda-13.0/version.json": (cuda_version, 0o644)},
         "postinst": "#!/bin/sh\n# STAND-IN\nset -e\nif [ \"$1\" = configure ]; then\n"
                     "  update-alternatives --install /usr/local/cuda cuda /usr/local/cuda-13.0 130\nfi\n",
         "prerm": "#!/bin/sh\n# STAND-IN\nset -e\nif [ \"$1\" = remove ]; then\n"
                  "  update-alternatives --remove cuda /usr/local/cuda-13.0\nfi\n"},
    ]


def build_deb(pkg: dict, out_dir: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="sparkctl-deb-") as tmp:
        root = Path(tmp) / "root"
        (root / "DEBIAN").mkdir(parents=True)
        size = 0
        for path, (data, mode) in pkg["files"].items():
            p = root / path.lstrip("/")
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
            os.chmod(p, mode)
            size += len(data)
        control = [f"Package: {pkg['name']}", f"Version: {pkg['version']}", "Architecture: all",
                   f"Maintainer: {MAINTAINER}", f"Installed-Size: {max(1, size // 1024)}",
                   "Section: multiverse/devel", "Priority: optional"]
        if pkg.get("depends"):
            control.append(f"Depends: {pkg['depends']}")
        control.append(f"Description: {pkg['description']}\n Stand-in package built by sparkctl/sim/nvidia_repo.py "
                       "for the simulated Spark; it does nothing a real driver or toolkit does.")
        (root / "DEBIAN/control").write_text("\n".join(control) + "\n")
        if pkg.get("conffiles"):
            (root / "DEBIAN/conffiles").write_text("\n".join(pkg["conffiles"]) + "\n")
        for script in ("postinst", "prerm"):
            if pkg.get(script):
                (root / "DEBIAN" / script).write_text(pkg[script])
                os.chmod(root / "DEBIAN" / script, 0o755)
        for dirpath, dirnames, filenames in os.walk(root):
            for n in dirnames:
                os.chmod(Path(dirpath) / n, 0o755)
            for n in dirnames + filenames + [""]:
                os.utime(Path(dirpath) / n, (int(SOURCE_DATE_EPOCH),) * 2, follow_symlinks=False)
        deb = out_dir / f"{pkg['name']}_{pkg['version']}_all.deb"
        run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", root, deb],
            env={**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH})
        return deb


def _inputs_digest(fingerprint: str) -> str:
    h = hashlib.sha256(f"{RECIPE_VERSION} {fingerprint} {repo_url()}".encode())
    for blob in (standins.nvidia_smi(), standins.nvcc(), standins.ptxas()):
        h.update(blob)
    return h.hexdigest()


def build(force: bool = False) -> str:
    """Build (or keep) the signed repository under .sim/nvidia-repo; returns "cached" or "built". The signing
    key's gpg agent is stopped afterwards, whatever happened."""
    try:
        return _build(force)
    finally:
        stop_agent(config.NVIDIA_GNUPG_DIR)


def _build(force: bool) -> str:
    fpr = ensure_key()
    d = config.NVIDIA_REPO_DIR
    stamp = d / ".stamp"
    digest = _inputs_digest(fpr)
    if not force and stamp.exists() and stamp.read_text().strip() == digest and (d / "InRelease").exists():
        return "cached"
    tmp = d.with_name(d.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for pkg in packages():
        build_deb(pkg, tmp)
    write_index(tmp)
    (tmp / "README.txt").write_text("STAND-IN NVIDIA CUDA apt repository of the simulated Spark "
                                    "(sparkctl/sim/nvidia_repo.py). Nothing here is NVIDIA software.\n")
    (tmp / ".stamp").write_text(digest + "\n")
    shutil.rmtree(d, ignore_errors=True)
    tmp.rename(d)
    return "built"


def write_index(d: Path) -> None:
    """Packages(.gz) with apt-ftparchive, Release with hashes, then InRelease / Release.gpg signatures."""
    pk = run(["apt-ftparchive", "packages", "."], cwd=d).stdout
    (d / "Packages").write_text(pk)
    with gzip.GzipFile(d / "Packages.gz", "wb", mtime=0) as f:
        f.write(pk.encode())
    opts = ["-o", "APT::FTPArchive::Release::Origin=NVIDIA (stand-in)",
            "-o", "APT::FTPArchive::Release::Label=NVIDIA CUDA (stand-in, simulated Spark)",
            "-o", "APT::FTPArchive::Release::Description=STAND-IN of the CUDA ubuntu2404/sbsa repository"]
    rel = run(["apt-ftparchive", *opts, "release", "."], cwd=d).stdout
    (d / "Release").write_text(rel)
    (d / "InRelease").write_bytes(_gpg("--clearsign", "--digest-algo", "SHA512", "-o", "-", str(d / "Release")))
    (d / "Release.gpg").write_bytes(_gpg("--armor", "--detach-sign", "--digest-algo", "SHA512", "-o", "-",
                                         str(d / "Release")))


def parse_packages(text: str) -> list[dict[str, str]]:
    """Stanzas of a Packages (or control) file as dicts; continuation lines are joined with newlines."""
    out, cur, last = [], {}, None
    for line in text.splitlines():
        if not line.strip():
            if cur:
                out.append(cur)
            cur, last = {}, None
        elif line[0] in " \t" and last:
            cur[last] += "\n" + line.strip()
        else:
            k, _, v = line.partition(":")
            cur[k] = v.strip()
            last = k
    if cur:
        out.append(cur)
    return out


class RepoHandler(SimpleHTTPRequestHandler):
    def log_message(self, fmt, *args):
        sys.stderr.write(f"{self.client_address[0]} {fmt % args}\n")


def make_server(directory: Path, host: str, port: int):
    return http_server_class()((host, port), partial(RepoHandler, directory=str(directory)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=["serve", "build"])
    ap.add_argument("--host", default=config.HOST_ADDRESS)
    ap.add_argument("--port", type=int, default=config.NVIDIA_REPO_PORT)
    a = ap.parse_args(argv)
    if a.command == "build":
        print(build(force=True))
        return 0
    srv = make_server(config.NVIDIA_REPO_DIR, a.host, a.port)
    return serve(srv, f"stand-in NVIDIA repository on {repo_url()} from {config.NVIDIA_REPO_DIR}")


if __name__ == "__main__":
    sys.exit(main())
