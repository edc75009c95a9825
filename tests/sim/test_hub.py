"""The stand-in hub against the real huggingface_hub client (in subprocesses: it reads HF_ENDPOINT at import)."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import httpx

from sparkctl.sim import models

BIG = 3_000_000  # >= the LFS threshold: served like a Hub LFS file


def make_repo(root, files, message="v1", parent=None):
    return models.commit_files(root / "acme" / "tiny", files, message, parent=parent)


def client(code: str, env: dict, timeout: float = 60) -> dict:
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def payload(n: int, seed: int = 0) -> bytes:
    import numpy as np

    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def test_info_snapshot_errors(hub_server, hf_env, tmp_path):
    root, url, _ = hub_server
    big = payload(BIG)
    sha1 = make_repo(root, {"config.json": b'{"v": 1}', "model.safetensors": big, "sub/tok.json": b"{}"})
    code = f"""
import json, os
from huggingface_hub import HfApi, snapshot_download, hf_hub_download
from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError, RemoteEntryNotFoundError
api = HfApi()
out = {{}}
info = api.model_info("acme/tiny", revision="main", files_metadata=True)
out["sha"] = info.sha
out["sizes"] = {{s.rfilename: s.size for s in info.siblings}}
out["lfs"] = {{s.rfilename: s.lfs.sha256 for s in info.siblings if s.lfs}}
out["default_sha"] = api.model_info("acme/tiny").sha
p = snapshot_download("acme/tiny", revision="main", cache_dir={str(tmp_path / 'c')!r})
out["files"] = sorted(os.path.relpath(os.path.join(d, f), p) for d, _, fs in os.walk(p) for f in fs)
out["big_sha256"] = __import__("hashlib").sha256(open(os.path.join(p, "model.safetensors"), "rb").read()).hexdigest()
errs = []
for f in (lambda: api.model_info("acme/nope"), lambda: api.model_info("acme/tiny", revision="nope"),
          lambda: hf_hub_download("acme/tiny", "nope.json", cache_dir={str(tmp_path / 'c')!r})):
    try:
        f()
    except Exception as e:
        errs.append(type(e).__name__)
out["errors"] = errs
out["refs"] = [b.name for b in api.list_repo_refs("acme/tiny").branches]
print(json.dumps(out))
"""
    out = client(code, hf_env(url))
    assert out["sha"] == out["default_sha"] == sha1
    assert out["sizes"] == {"config.json": 8, "model.safetensors": BIG, "sub/tok.json": 2}
    assert out["lfs"] == {"model.safetensors": hashlib.sha256(big).hexdigest()}
    assert out["files"] == ["config.json", "model.safetensors", "sub/tok.json"]
    assert out["big_sha256"] == hashlib.sha256(big).hexdigest()
    assert out["errors"] == ["RepositoryNotFoundError", "RevisionNotFoundError", "RemoteEntryNotFoundError"]
    assert out["refs"] == ["main"]

    # a new commit moves the branch: the client sees it at once
    sha2 = make_repo(root, {"config.json": b'{"v": 2}', "model.safetensors": big}, "v2", parent=sha1)
    out = client('import json; from huggingface_hub import HfApi; print(json.dumps({"sha": HfApi().model_info('
                 '"acme/tiny", revision="main").sha}))', hf_env(url))
    assert out["sha"] == sha2 != sha1


def test_resolve_headers_and_ranges(hub_server):
    root, url, _ = hub_server
    big, small = payload(BIG, 1), b"0123456789abcdef"
    sha = make_repo(root, {"model.safetensors": big, "small.txt": small})
    with httpx.Client(base_url=url, trust_env=False) as c:
        h = c.head("/acme/tiny/resolve/main/model.safetensors").headers
        assert h["x-repo-commit"] == sha
        assert h["x-linked-etag"] == f'"{hashlib.sha256(big).hexdigest()}"' and h["x-linked-size"] == str(BIG)
        h = c.head("/acme/tiny/resolve/main/small.txt").headers
        assert h["etag"].strip('"') == models._git(root / "acme/tiny", "rev-parse", f"{sha}:small.txt")
        r = c.get("/acme/tiny/resolve/main/small.txt", headers={"Range": "bytes=4-7"})
        assert (r.status_code, r.content, r.headers["content-range"]) == (206, b"4567", "bytes 4-7/16")
        r = c.get("/acme/tiny/resolve/main/small.txt", headers={"Range": "bytes=-3"})
        assert (r.status_code, r.content) == (206, b"def")
        r = c.get(f"/acme/tiny/resolve/{sha}/model.safetensors", headers={"Range": f"bytes={BIG - 10}-"})
        assert (r.status_code, r.content) == (206, big[-10:])
        assert c.get("/acme/tiny/resolve/main/small.txt", headers={"Range": "bytes=99-"}).status_code == 416
        r = c.head("/acme/tiny/resolve/main/missing.bin")
        assert (r.status_code, r.headers["x-error-code"], r.headers["x-repo-commit"]) == (404, "EntryNotFound", sha)
        assert c.get("/api/models/acme/none").headers["x-error-code"] == "RepoNotFound"
        assert c.get("/api/models/acme/tiny/revision/v9").headers["x-error-code"] == "RevisionNotFound"
        tree = c.get("/api/models/acme/tiny/tree/main", params={"recursive": "true"}).json()
        assert {e["path"]: "lfs" in e for e in tree} == {"model.safetensors": True, "small.txt": False}


def _incomplete(root):
    return [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".incomplete")]


def test_throttle_lets_a_test_kill_a_download_mid_file(hub_server, hf_env, tmp_path):
    root, url, throttle = hub_server
    big = payload(16_000_000, 2)
    make_repo(root, {"model.safetensors": big, "config.json": b"{}"})
    # huggingface_hub writes 10 MiB chunks: at 4 MB/s the first lands after ~2.6 s, the whole body after 4 s
    throttle.write_text("4000000\n")
    cache = tmp_path / "cache"
    code = ("import sys; from huggingface_hub import snapshot_download; "
            "print(snapshot_download('acme/tiny', revision='main', cache_dir=sys.argv[1]))")
    p = subprocess.Popen([sys.executable, "-c", code, str(cache)], env=hf_env(url), stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 30
    while not any(os.path.getsize(f) > 0 for f in _incomplete(cache)):
        assert p.poll() is None and time.monotonic() < deadline, "no partial download appeared"
        time.sleep(0.05)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert not list(cache.glob("models--acme--tiny/snapshots/*/model.safetensors"))  # never a partial at the path
    throttle.unlink()
    out = subprocess.run([sys.executable, "-c", code, str(cache)], env=hf_env(url), capture_output=True, text=True,
                         timeout=60, check=True).stdout.strip().splitlines()[-1]
    with open(os.path.join(out, "model.safetensors"), "rb") as f:
        assert hashlib.sha256(f.read()).digest() == hashlib.sha256(big).digest()
