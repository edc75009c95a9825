"""The box-side download (sparkctl/box/fetch_checkpoint.py) with the real huggingface_hub against the stand-in
hub: it downloads a locked commit, verifies it by content, marks it; a rerun downloads nothing; a checkpoint that
does not match the lock's listing (a missing file, another size, or a same-size file with other bytes) is refused
and never marked."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sparkctl import REPO_ROOT
from sparkctl.config.lock import cache_dirname, marker_path

SCRIPT = REPO_ROOT / "sparkctl" / "box" / "fetch_checkpoint.py"
LISTING = """
import json, sys
from huggingface_hub import HfApi
from sparkctl.config.lock import _listing
info = HfApi().model_info(sys.argv[1], revision="main", files_metadata=True)
print(json.dumps({"repo": sys.argv[1], "revision": "main", "sha": info.sha, "files": _listing(info, ["*"])}))
"""


def git(cwd, *args):
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t.invalid", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t.invalid")
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(hub_server):
    root, url, _throttle = hub_server
    path = root / "acme" / "tiny"
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (path / "model.safetensors").write_bytes(os.urandom(1_500_000))  # above the LFS threshold: sha256-named blob
    git(path, "add", "-A")
    git(path, "commit", "-qm", "v1")
    return url, path


def run(args, env, **kw):
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=120, **kw)


def listing(url, env, tmp_path) -> tuple[dict, str]:
    r = run(["-c", LISTING, "acme/tiny"], env, cwd=REPO_ROOT)
    assert r.returncode == 0, r.stderr
    lock = json.loads(r.stdout)
    path = tmp_path / "listing.json"
    path.write_text(json.dumps(lock))
    return lock, str(path)


def marker(tmp_path, sha):
    return Path(marker_path(str(tmp_path), "acme/tiny", sha))  # MODEL_STORE = tmp_path, as the deploy computes it


def snapshot(tmp_path, sha):
    return tmp_path / "hub" / cache_dirname("acme/tiny") / "snapshots" / sha


def fetch(url, env, tmp_path, listing_path):
    sha = json.loads(Path(listing_path).read_text())["sha"]
    return run([str(SCRIPT), "--listing", listing_path, "--cache-dir", str(tmp_path / "hub"),
                "--marker", str(marker(tmp_path, sha))], env)


def verify_only(env, tmp_path, listing_path):
    sha = json.loads(Path(listing_path).read_text())["sha"]
    return run([str(SCRIPT), "--verify-only", "--listing", listing_path, "--snapshot", str(snapshot(tmp_path, sha)),
                "--marker", str(marker(tmp_path, sha))], env)


def corrupt_in_place(path: Path) -> None:
    """Flip one byte of the blob behind `path`, keeping its size (what a bad disk or a bad copy leaves)."""
    blob = path.resolve()
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))



def test_download_verify_mark_and_rerun_downloads_nothing(repo, hf_env, tmp_path):
    url, _path = repo
    env = hf_env(url)
    lock, lpath = listing(url, env, tmp_path)
    assert lock["files"]["model.safetensors"]["sha256"]  # presented as an LFS file
    r = fetch(url, env, tmp_path, lpath)
    assert r.returncode == 0, r.stderr
    assert json.loads(marker(tmp_path, lock["sha"]).read_text())["files"] == 2
    assert (snapshot(tmp_path, lock["sha"]) / "model.safetensors").stat().st_size == 1_500_000
    blobs = sorted(p.name for p in (tmp_path / "hub" / "models--acme--tiny" / "blobs").iterdir())
    r2 = fetch(url, env, tmp_path, lpath)  # rerun: the cache answers, nothing new is fetched
    assert r2.returncode == 0
    assert sorted(p.name for p in (tmp_path / "hub" / "models--acme--tiny" / "blobs").iterdir()) == blobs


def test_a_checkpoint_that_does_not_match_the_lock_is_refused(repo, hf_env, tmp_path):
    url, _path = repo
    env = hf_env(url)
    lock, _ = listing(url, env, tmp_path)
    lock["files"]["model.safetensors"]["size"] += 1  # the upstream file changed under the same name
    lock["files"]["tokenizer.json"] = {"size": 10, "blob_id": "0" * 40, "sha256": None}  # and one went missing
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(lock))
    r = fetch(url, env, tmp_path, str(bad))
    assert r.returncode == 3, r.stderr
    assert "does not match the locked listing" in r.stderr and "tokenizer.json: missing" in r.stderr
    assert "model.safetensors: 1500000 bytes, the lock says 1500001" in r.stderr
    assert not marker(tmp_path, lock["sha"]).exists()  # never marked


def downloaded_unmarked(url, hf_env, tmp_path):
    """A good download whose marker is then removed (as on a worker before its copy is verified)."""
    env = hf_env(url)
    lock, lpath = listing(url, env, tmp_path)
    assert fetch(url, env, tmp_path, lpath).returncode == 0
    mark = marker(tmp_path, lock["sha"])
    mark.unlink()
    return env, lock, lpath, mark


def test_verify_only_marks_a_copied_snapshot_and_refuses_a_partial_one(repo, hf_env, tmp_path):
    url, _path = repo
    env, lock, lpath, mark = downloaded_unmarked(url, hf_env, tmp_path)
    assert verify_only(env, tmp_path, lpath).returncode == 0 and mark.exists()  # a good copy is marked
    mark.unlink()
    (snapshot(tmp_path, lock["sha"]) / "config.json").unlink()  # as if the copy from the head was cut short
    r = verify_only(env, tmp_path, lpath)
    assert r.returncode == 3 and "config.json: missing" in r.stderr and not mark.exists()


@pytest.mark.parametrize("name,digest", [("model.safetensors", "sha256"), ("config.json", "git blob")])
def test_a_same_size_corrupted_file_is_refused_by_content(repo, hf_env, tmp_path, name, digest):
    """Size and name match, the bytes do not: the download path and the worker's copy path both refuse it, no
    marker is written, and once the bad blob is deleted as the message says, the next run downloads it again."""
    url, _path = repo
    env, lock, lpath, mark = downloaded_unmarked(url, hf_env, tmp_path)
    path = snapshot(tmp_path, lock["sha"]) / name
    corrupt_in_place(path)
    assert path.stat().st_size == lock["files"][name]["size"]
    for r in (fetch(url, env, tmp_path, lpath), verify_only(env, tmp_path, lpath)):
        assert r.returncode == 3, r.stderr
        assert f"{name}: {digest} " in r.stderr and "is not the locked" in r.stderr, r.stderr
        assert f"delete {path.resolve()}" in r.stderr
        assert not mark.exists()
    path.resolve().unlink()
    r = fetch(url, env, tmp_path, lpath)
    assert r.returncode == 0, r.stderr
    assert mark.exists() and path.stat().st_size == lock["files"][name]["size"]


@pytest.mark.parametrize("mode", ["download", "verify-only"])
def test_a_listing_entry_without_a_digest_is_refused_not_verified(repo, hf_env, tmp_path, mode):
    """A file listed with its size and neither sha256 nor a git blob id: a same-size corruption could not be told
    apart, so the box refuses the listing (exit 4, the file named) before fetching or verifying, and marks nothing."""
    url, _path = repo
    env = hf_env(url)
    lock, _ = listing(url, env, tmp_path)
    lock["files"]["config.json"].update(sha256=None, blob_id=None)
    bad = tmp_path / "undigested.json"
    bad.write_text(json.dumps(lock))
    r = fetch(url, env, tmp_path, str(bad)) if mode == "download" else verify_only(env, tmp_path, str(bad))
    assert r.returncode == 4, r.stdout + r.stderr
    assert "has no sha256 or git blob id for config.json" in r.stderr and "lock refresh" in r.stderr
    assert not marker(tmp_path, lock["sha"]).exists()
    assert not (tmp_path / "hub" / cache_dirname("acme/tiny")).exists()  # nothing fetched


def test_the_verifier_itself_never_passes_a_file_it_cannot_check(tmp_path):
    sys.path.insert(0, str(SCRIPT.parent))
    import fetch_checkpoint

    (tmp_path / "config.json").write_text("{}")
    problems = fetch_checkpoint.verify(str(tmp_path), {"config.json": {"size": 2, "sha256": None, "blob_id": None}})
    assert problems == ["config.json: the listing has no sha256 or git blob id for it; its content cannot be verified"]


def test_a_verified_copy_is_installed_as_a_download_is_laid_out_even_when_two_files_share_a_blob(tmp_path):
    """install(): the staging copy's blobs move into the repo folder's blobs/ and its snapshot of links into place;
    two files of the same content (one blob, two links) and a file that is no link (an older copy's) both survive."""
    from sparkctl.box.fetch_checkpoint import install

    staging, sha = tmp_path / "store" / ".fanout-staging" / "models--acme--tiny@abc", "abc"
    (staging / "blobs").mkdir(parents=True)
    (staging / "blobs" / "b1").write_text("same")
    snap = staging / "snapshots" / sha
    (snap / "sub").mkdir(parents=True)
    (snap / "a.json").symlink_to("../../blobs/b1")
    (snap / "sub" / "b.json").symlink_to("../../../blobs/b1")
    (snap / "plain.txt").write_text("plain")
    final = tmp_path / "store" / "hub" / "models--acme--tiny" / "snapshots" / sha
    install(str(staging), str(final))
    blob = final.parent.parent / "blobs" / "b1"
    assert (final / "a.json").resolve() == (final / "sub" / "b.json").resolve() == blob.resolve()
    assert blob.read_text() == "same" and (final / "plain.txt").read_text() == "plain"
    assert not staging.exists()


# --- the fleet's fan-out: a copy from another box (--copy) -----------------------------------------------------------

FAKE_RSYNC = REPO_ROOT / "tests" / "standins" / "rsync.py"


@pytest.fixture
def fleet(repo, hf_env, tmp_path):
    """spark-1 holds the checkpoint verified (a real download from the stand-in hub); spark-2 is the fresh box."""
    url, _path = repo
    env = hf_env(url)
    one = tmp_path / "spark-1"
    lock, lpath = listing(url, env, tmp_path)
    assert fetch(url, env, one, lpath).returncode == 0
    stores = {"10.0.0.11": str(one), "10.0.0.13": str(tmp_path / "spark-3")}  # spark-3 never fetched it
    (tmp_path / "spark-3").mkdir()
    env = dict(env, FAKE_RSYNC_STORES=json.dumps(stores), FAKE_RSYNC_LOG=str(tmp_path / "rsync.log"))
    return env, lock, lpath, one, tmp_path / "spark-2"


def copy(env, lock, lpath, store: Path, *sources: str, hub: bool = False):
    sha, name = lock["sha"], "acme--tiny"
    args = [str(SCRIPT), "--copy", "--listing", lpath, "--marker", str(marker(store, sha)),
            "--snapshot", str(snapshot(store, sha)), "--staging", str(store / ".staging" / f"{name}@{sha}"),
            "--remote-marker", f"verified/{name}@{sha}", "--remote-snapshot", f"hub/models--{name}/snapshots/{sha}",
            "--rsync", str(FAKE_RSYNC), "--rsync-ssh", "ssh -i /root/.ssh/key"]
    args += [a for s in sources for a in ("--source", s)]
    if hub:
        args += ["--hub", "--cache-dir", str(store / "hub")]
    return run(args, env)


def rsync_log(tmp_path) -> list[dict]:
    path = tmp_path / "rsync.log"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_a_copy_from_a_box_that_holds_it_is_verified_installed_and_marked_with_its_source(fleet):
    env, lock, lpath, one, two = fleet
    r = copy(env, lock, lpath, two, "spark-1=root@10.0.0.11")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["source"] == "spark-1"
    mark = json.loads(marker(two, lock["sha"]).read_text())
    assert mark["source"] == "spark-1" and mark["received_bytes"] >= 1_500_000  # a whole copy: every byte crossed
    snap = snapshot(two, lock["sha"])
    assert (snap / "model.safetensors").stat().st_size == 1_500_000
    # laid out as huggingface_hub lays out a download (so any box is a source any copy resumes from): the snapshot's
    # links point into the repo folder's blobs/, the same relative links as on the source
    weights = snap / "model.safetensors"
    assert weights.is_symlink() and weights.resolve().parent == snap.parent.parent / "blobs"
    assert os.readlink(weights) == os.readlink(snapshot(one, lock["sha"]) / "model.safetensors")
    assert not (two / ".staging" / f"acme--tiny@{lock['sha']}").exists()  # renamed into place


def test_a_copy_runs_at_the_rate_it_is_given(fleet, tmp_path):
    """--rsync-bwlimit (CHECKPOINT_FANOUT_BWLIMIT_KIB_S): rsync's own --bwlimit on the copy of the files; none when 0."""
    env, lock, lpath, _one, two = fleet
    args = [str(SCRIPT), "--copy", "--listing", lpath, "--marker", str(marker(two, lock["sha"])), "--snapshot",
            str(snapshot(two, lock["sha"])), "--staging", str(two / ".staging" / "x"), "--remote-marker",
            f"verified/acme--tiny@{lock['sha']}", "--remote-snapshot", f"hub/models--acme--tiny/snapshots/{lock['sha']}",
            "--rsync", str(FAKE_RSYNC), "--source", "spark-1=root@10.0.0.11", "--rsync-bwlimit", "2048"]
    assert run(args, env).returncode == 0
    tree = [c for c in rsync_log(tmp_path) if c["path"].endswith("/")]
    assert tree and tree[0]["options"] == ["-rlt", "--partial", "--delete", "--stats", "--bwlimit=2048", "-e"]
    marker(two, lock["sha"]).unlink()
    seen = len(rsync_log(tmp_path))
    assert run(args[:-2], env).returncode == 0
    again = [c for c in rsync_log(tmp_path)[seen:] if c["path"].endswith("/")]
    assert again and not any(o.startswith("--bwlimit") for c in again for o in c["options"])


def test_a_source_without_the_verified_commit_is_skipped_by_name_and_the_next_one_used(fleet):
    env, lock, lpath, _one, two = fleet
    r = copy(env, lock, lpath, two, "spark-3=root@10.0.0.13", "spark-9=root@10.0.0.19", "spark-1=root@10.0.0.11")
    assert r.returncode == 0, r.stderr
    assert "spark-3 holds no verified copy of acme/tiny@" in r.stderr  # never fetched it, or another revision
    assert "the copy from spark-9 failed" not in r.stderr and "spark-9 holds no verified copy" in r.stderr
    assert json.loads(r.stdout)["source"] == "spark-1"


def test_a_source_holding_another_revision_is_refused_naming_it(fleet):
    env, lock, lpath, one, two = fleet
    theirs = marker(one, lock["sha"])
    theirs.write_text(json.dumps({**json.loads(theirs.read_text()), "sha": "f" * 40}))
    r = copy(env, lock, lpath, two, "spark-1=root@10.0.0.11")
    assert r.returncode == 5 and f"spark-1: its marker is for acme/tiny@{'f' * 40}, not the locked" in r.stderr
    assert not marker(two, lock["sha"]).exists() and not snapshot(two, lock["sha"]).exists()


def test_a_corrupt_copy_never_replaces_anything_and_is_fetched_again_from_the_next_source(fleet, tmp_path):
    env, lock, lpath, one, two = fleet
    good = tmp_path / "spark-4"  # a second holder, with good bytes
    shutil.copytree(one, good, symlinks=True)
    corrupt_in_place(snapshot(one, lock["sha"]) / "model.safetensors")  # spark-1's disk went bad after its marker
    stores = {**json.loads(env["FAKE_RSYNC_STORES"]), "10.0.0.14": str(good)}
    env = dict(env, FAKE_RSYNC_STORES=json.dumps(stores))
    r = copy(env, lock, lpath, two, "spark-1=root@10.0.0.11", "spark-4=root@10.0.0.14")
    assert r.returncode == 0, r.stderr
    assert "the copy from spark-1 does not match the locked listing (deleted, fetched again)" in r.stderr
    assert json.loads(r.stdout)["source"] == "spark-4"
    data = (snapshot(two, lock["sha"]) / "model.safetensors").read_bytes()
    assert data == (snapshot(good, lock["sha"]) / "model.safetensors").read_bytes()


def test_a_copy_that_dies_half_way_resumes_and_never_leaves_a_snapshot_or_marker_behind(fleet, tmp_path):
    env, lock, lpath, _one, two = fleet
    r = copy(dict(env, FAKE_RSYNC_DIE_AFTER="700000"), lock, lpath, two, "spark-1=root@10.0.0.11")
    assert r.returncode == 5 and "the copy from spark-1 failed (rsync exit 12" in r.stderr
    assert "what arrived is kept to resume" in r.stderr and "(AIRGAPPED)" in r.stderr
    assert not snapshot(two, lock["sha"]).exists() and not marker(two, lock["sha"]).exists()
    staged = list((two / ".staging").rglob("*.safetensors"))
    assert staged and staged[0].stat().st_size < 1_500_000  # the partial file waits in staging
    r = copy(env, lock, lpath, two, "spark-1=root@10.0.0.11")  # the next run
    assert r.returncode == 0, r.stderr
    mark = json.loads(marker(two, lock["sha"]).read_text())
    assert mark["source"] == "spark-1"
    # it resumed: rsync received only what the partial file lacked (its --stats, kept in the marker)
    assert 0 < mark["received_bytes"] < 1_500_000 and json.loads(r.stdout)["received_bytes"] == mark["received_bytes"]


def test_a_copy_killed_on_one_source_resumes_from_another_that_got_its_own_copy_from_the_fleet(fleet, tmp_path):
    """spark-4 got its copy from spark-1 (the fan-out's own install); a copy from spark-1 dies half way, and the next
    source, spark-4, sends only what the partial file lacks: both stores are laid out alike."""
    env, lock, lpath, one, two = fleet
    four = tmp_path / "spark-4"
    assert copy(env, lock, lpath, four, "spark-1=root@10.0.0.11").returncode == 0
    env = dict(env, FAKE_RSYNC_STORES=json.dumps({**json.loads(env["FAKE_RSYNC_STORES"]), "10.0.0.14": str(four)}))
    r = copy(dict(env, FAKE_RSYNC_DIE_AFTER="700000"), lock, lpath, two, "spark-1=root@10.0.0.11")
    assert r.returncode == 5
    r = copy(env, lock, lpath, two, "spark-4=root@10.0.0.14")
    assert r.returncode == 0, r.stderr
    mark = json.loads(marker(two, lock["sha"]).read_text())
    assert mark["source"] == "spark-4" and 0 < mark["received_bytes"] < 1_500_000 - 600_000  # the rest, and small files


def test_a_partial_download_in_the_snapshots_place_is_replaced_by_the_verified_copy(fleet):
    env, lock, lpath, _one, two = fleet
    snap = snapshot(two, lock["sha"])
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("half")  # a killed Hub download, never marked
    r = copy(env, lock, lpath, two, "spark-1=root@10.0.0.11")
    assert r.returncode == 0, r.stderr
    assert (snap / "config.json").read_text() != "half" and marker(two, lock["sha"]).exists()


def test_when_every_source_is_gone_the_hub_is_the_last_and_the_result_says_so(fleet):
    env, lock, lpath, _one, two = fleet
    r = copy(env, lock, lpath, two, "spark-9=root@10.0.0.19", hub=True)
    assert r.returncode == 0, r.stderr
    assert "spark-9 holds no verified copy" in r.stderr and "falling back to the Hub" in r.stderr
    assert json.loads(r.stdout)["source"] == "hub"
    assert json.loads(marker(two, lock["sha"]).read_text())["source"] == "hub"
