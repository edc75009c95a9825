"""Every file verified by content: the lock refuses an entry without a digest the box can check, naming
the lock file, the checkpoint and the file, before the host is touched (`sparkctl check` and the @fake deploy);
`lock refresh` records a digest for every file the stand-in hub lists (the simulated Spark's lock writer) and
writes nothing when an endpoint lists a file without one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from sparkctl import REPO_ROOT
from sparkctl.config import catalog, lock
from sparkctl.lock.refresh import refresh_lock
from sparkctl.errors import SettingError, SparkctlError
from sparkctl.sim import models
from tests.check.test_bad_input import Case, _fake_run, _lock
from tests.check.test_bad_input import test_check_refuses_with_a_clear_message as check_refuses
from tests.conftest import FAKE_LOCK

QWEN = "unsloth/Qwen3.8-27B-NVFP4"


def entry_without(*keys: str):
    """A lock mutation: config.json of the Qwen checkpoint keeps its size but loses these digest fields."""
    def mutate(e: dict) -> None:
        for k in keys:
            e["files"]["config.json"][k] = None
    return mutate


UNDIGESTED = Case("lock entry without a digest", ["sim-dir/models.lock.json", QWEN, "config.json", "sha256",
                                                  "blob_id", "lock refresh"],
                  prepare=_lock(entry_without("sha256", "blob_id")))


def qwen_entry() -> tuple[dict, catalog.Checkpoint]:
    data = json.loads(Path(FAKE_LOCK).read_text())
    cp = next(c for c in lock.checkpoints_of(catalog.resolve()) if c.repo == QWEN)
    return data, cp


def test_an_entry_without_a_digest_is_refused_naming_the_lock_the_checkpoint_and_the_file():
    data, cp = qwen_entry()
    assert lock.locked(data, cp, Path(FAKE_LOCK)).files  # the test lock as it is: every file has a digest
    entry_without("sha256", "blob_id")(data["checkpoints"][QWEN])
    with pytest.raises(SettingError) as err:
        lock.locked(data, cp, Path(FAKE_LOCK))
    text = str(err.value)
    assert f"MODEL_LOCK_FILE tests/fixtures/fake.lock.json[{QWEN!r}].files['config.json']" in text
    assert '"sha256" (64 hex) or "blob_id" (40-hex git blob id)' in text and "lock refresh" in text
    data["checkpoints"][QWEN]["files"]["config.json"]["sha256"] = "abc"  # a digest the box could never match
    with pytest.raises(SettingError, match="config.json"):
        lock.locked(data, cp, Path(FAKE_LOCK))


def test_either_digest_alone_is_enough():
    data, cp = qwen_entry()
    files = data["checkpoints"][QWEN]["files"]
    lfs = next(p for p, m in files.items() if m.get("sha256"))
    files[lfs]["blob_id"] = None  # an LFS file: its sha256
    small = next(p for p, m in files.items() if not m.get("sha256"))
    assert files[small]["blob_id"]  # a file kept in git: its blob id
    assert lock.locked(data, cp, Path(FAKE_LOCK)).files == files


def test_check_refuses_a_lock_entry_without_a_digest(tmp_path, monkeypatch, capsys):
    check_refuses(UNDIGESTED, tmp_path, monkeypatch, capsys)


def test_the_deploy_refuses_it_before_any_command(tmp_path):
    out = _fake_run(UNDIGESTED, tmp_path)
    assert out["commands"] == [] and out["error"], out["log"][-2000:]
    for w in UNDIGESTED.words:
        assert w in out["log"], w


RESOLVE = """
import json, sys
from huggingface_hub import HfApi
from sparkctl.config import catalog, lock
from sparkctl.lock.refresh import refresh_lock
cp = catalog.Checkpoint(repo="acme/tiny", revision="main")
print(json.dumps(lock.resolve(HfApi(endpoint=sys.argv[1]), cp, sys.argv[1])))
"""


def test_lock_refresh_records_a_digest_for_every_file_the_stand_in_hub_lists(hub_server, hf_env):
    """What `sparkctl lock refresh` (and `sim up`) records for a stand-in checkpoint: small files with their git
    blob id, LFS-sized ones with their sha256 too; the entry passes the lock's own check."""
    root, url, _ = hub_server
    models.commit_files(root / "acme" / "tiny", {"config.json": b'{"v": 1}', "tokenizer.json": b"{}",
                                                 "model.safetensors": bytes(range(256)) * 12_000}, "v1")
    r = subprocess.run([sys.executable, "-c", RESOLVE, url], env=hf_env(url), cwd=REPO_ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    entry = json.loads(r.stdout)
    assert sorted(entry["files"]) == ["config.json", "model.safetensors", "tokenizer.json"]
    assert lock.files_without_digest(entry["files"]) == []
    assert entry["files"]["model.safetensors"]["sha256"] and entry["files"]["config.json"]["blob_id"]
    cp = catalog.Checkpoint(repo="acme/tiny", revision="main")
    assert lock.locked({"checkpoints": {"acme/tiny": entry}}, cp, Path("x.lock.json")).sha == entry["sha"]


def test_lock_refresh_refuses_an_endpoint_that_lists_a_file_without_a_digest():
    """An endpoint answering without file metadata: refused with the files named, instead of a lock the deploy
    would refuse later."""
    sibling = SimpleNamespace(rfilename="config.json", size=8, blob_id=None, lfs=None)
    api = SimpleNamespace(model_info=lambda repo, revision, files_metadata: SimpleNamespace(sha="a" * 40,
                                                                                         siblings=[sibling]))
    cp = catalog.Checkpoint(repo="acme/tiny", revision="main")
    with pytest.raises(SparkctlError, match=r"https://mirror\.invalid lists 1 file\(s\) of acme/tiny@a{40} without "
                                            r"a sha256 or git blob id \(config\.json\); nothing was written"):
        lock.resolve(api, cp, "https://mirror.invalid")


def test_lock_refresh_names_an_unreachable_hub_and_the_groups_that_reach_one(tmp_path):
    """`lock refresh` on a machine that does not reach the endpoint (following "Adding a model" on the simulated
    Spark with the real box's groups): a clear error naming the endpoint and --groups, no traceback, nothing
    written; in process and through the real CLI."""
    shipped = (REPO_ROOT / "models.lock.json").read_bytes()
    closed = "http://127.0.0.1:9"  # the discard port: nothing listens there
    r = subprocess.run([sys.executable, "-m", "sparkctl", "lock", "refresh", "--endpoint", closed], cwd=REPO_ROOT,
                       capture_output=True, text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "0"})
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    for words in (f"cannot reach the Hub at {closed}", "group data all,gx10", "--groups all,gx10,sim",
                  "nothing was written"):
        assert words in r.stderr, r.stderr
    with pytest.raises(SparkctlError, match=f"cannot reach the Hub at {closed}"):
        refresh_lock(["all", "gx10"], closed)
    assert (REPO_ROOT / "models.lock.json").read_bytes() == shipped
