"""A stand-in Hugging Face endpoint: serves local git repos as Hub repos to the real huggingface_hub client.

Repos are git repositories (bare or not) under ROOT/<org>/<name> (models) and ROOT/datasets/<org>/<name>. Any git
revision works: branch, tag, full or short sha, refs/pr/N. What huggingface_hub 2.4 needs (see hf-endpoint notes):

  GET  /api/{models|datasets}/{repo}[/revision/{rev}][?blobs=true]   info: sha, siblings (sizes, blob ids, lfs)
  GET  /api/{models|datasets}/{repo}/tree/{rev}[/{path}][?recursive=true]
  GET  /api/{models|datasets}/{repo}/refs
  HEAD/GET /[datasets/]{repo}/resolve/{rev}/{path}   X-Repo-Commit, ETag (+ X-Linked-Etag/-Size for LFS), Range
  GET  /api/agent-harnesses                          the client's one-off probe

Files of LFS_THRESHOLD bytes or more are presented like Hub LFS files (sha256 ETag, lfs block). Errors carry the
Hub's X-Error-Code (RepoNotFound, RevisionNotFound, EntryNotFound), with X-Repo-Commit on EntryNotFound. Never Xet.
Throttle file bodies (bytes/s) with the throttle file (re-read while streaming) so a test can kill a download
mid-file. One log line per request on stderr: `REQ <method> <path> <status> range=<range> bytes=<n>` (n: the body
bytes sent); `bytes_served` sums a log's file bodies, what a fleet fetched from the Hub (.sim/logs/hub.log).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from sparkctl.sim.util import http_server_class, serve

LFS_THRESHOLD = 1_000_000  # bytes; the Hub stores files this big in LFS
CHUNK = 64 * 1024
LFS_POINTER_SIZE = 134


class HubError(Exception):
    def __init__(self, status: int, code: str | None, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.code, self.headers = status, code, headers or {}


class GitRepo:
    """Read-only view of one git repository; commit trees and LFS hashes are immutable, so they are cached."""

    def __init__(self, path: Path):
        self.path = path
        self._trees: dict[str, dict] = {}
        self._sha256: dict[str, str] = {}
        self._lock = threading.Lock()

    def git(self, *args: str) -> bytes:
        p = subprocess.run(["git", "-C", str(self.path), *args], capture_output=True)
        if p.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)}: {p.stderr.decode(errors='replace').strip()}")
        return p.stdout

    def resolve(self, rev: str) -> str:
        if not rev or rev.startswith("-") or any(c.isspace() for c in rev):
            raise HubError(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        p = subprocess.run(["git", "-C", str(self.path), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise HubError(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        return p.stdout.strip()

    def tree(self, sha: str) -> dict[str, tuple[str, str, int]]:
        """path -> (type "file"|"directory", git oid, size) for every entry of the commit, recursively."""
        with self._lock:
            if sha not in self._trees:
                entries = {}
                for rec in self.git("ls-tree", "-r", "-t", "-l", "-z", sha).split(b"\0"):
                    if not rec:
                        continue
                    meta, path = rec.decode().split("\t", 1)
                    _mode, typ, oid, size = meta.split()
                    if typ == "tree":
                        entries[path] = ("directory", oid, 0)
                    elif typ == "blob":
                        entries[path] = ("file", oid, int(size))
                self._trees[sha] = entries
            return self._trees[sha]

    def commit_date(self, sha: str) -> str:
        ts = int(self.git("show", "-s", "--format=%ct", sha).strip())
        return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(ts))

    def stream(self, oid: str, start: int = 0, end: int | None = None):
        """Yield the bytes [start, end) of a blob."""
        p = subprocess.Popen(["git", "-C", str(self.path), "cat-file", "blob", oid], stdout=subprocess.PIPE)
        try:
            pos = 0
            while True:
                chunk = p.stdout.read(CHUNK)
                if not chunk:
                    break
                lo = max(start - pos, 0)
                hi = len(chunk) if end is None else min(end - pos, len(chunk))
                pos += len(chunk)
                if hi > lo:
                    yield chunk[lo:hi]
                if end is not None and pos >= end:
                    break
        finally:
            p.kill()
            p.wait()

    def sha256(self, oid: str) -> str:
        if oid not in self._sha256:
            h = hashlib.sha256()
            for chunk in self.stream(oid):
                h.update(chunk)
            self._sha256[oid] = h.hexdigest()
        return self._sha256[oid]


class HubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sparkctl-sim-hub"

    def log_message(self, fmt, *args):
        pass

    def _log(self, status, nbytes=0):
        sys.stderr.write(f"REQ {self.command} {self.path} {status} range={self.headers.get('Range', '-')} "
                         f"bytes={nbytes}\n")

    # --- plumbing -------------------------------------------------------------------------------------
    def _head(self, status: int, ctype: str, length: int, headers: dict | None = None):
        self.send_response(status)
        for k, v in {"Content-Type": ctype, "Content-Length": str(length), **(headers or {})}.items():
            self.send_header(k, v)
        self.end_headers()

    def _send(self, status: int, body: bytes = b"", headers: dict | None = None, ctype: str = "application/json"):
        self._head(status, ctype, len(body), headers)
        if self.command != "HEAD" and body:
            self.wfile.write(body)
        self._log(status, len(body) if self.command != "HEAD" else 0)

    def _json(self, obj, status: int = 200, headers: dict | None = None):
        self._send(status, json.dumps(obj).encode(), headers)

    def _error(self, e: HubError):
        hdrs = {"X-Error-Message": str(e), **e.headers}
        if e.code:
            hdrs["X-Error-Code"] = e.code
        self._json({"error": str(e)}, e.status, hdrs)

    def _repo(self, kind: str, org: str, name: str) -> GitRepo:
        if any(p in ("", ".", "..") or "/" in p for p in (org, name)):
            raise HubError(404, "RepoNotFound", "Repository not found")
        root = self.server.root
        path = root / ("datasets" if kind == "datasets" else "") / org / name
        if not (path / "HEAD").exists() and not (path / ".git").exists():
            raise HubError(404, "RepoNotFound", "Repository not found")
        with self.server.repos_lock:
            return self.server.repos.setdefault(str(path), GitRepo(path))

    def _check_token(self):
        token = self.server.token
        if not token:
            return
        auth = self.headers.get("Authorization")
        if auth != f"Bearer {token}":
            # like the Hub: no token on a private repo looks like "not found"; a wrong one is a plain 401
            raise HubError(401, None if auth else "RepoNotFound",
                           "Invalid credentials in Authorization header" if auth else "Repository not found")

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        query = parse_qs(url.query)
        try:
            self._route(parts, query)
        except HubError as e:
            self._error(e)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # noqa: BLE001 - a stand-in must answer, not hang the client
            self._json({"error": f"internal error: {e}"}, 500)

    def _route(self, parts: list[str], query: dict):
        if parts == ["api", "agent-harnesses"]:
            return self._json({"standardEnvVars": [], "harnesses": {}})
        self._check_token()
        if len(parts) >= 4 and parts[0] == "api" and parts[1] in ("models", "datasets"):
            return self._api(self._repo(parts[1], parts[2], parts[3]), f"{parts[2]}/{parts[3]}", parts[4:], query)
        kind = "models"
        if parts and parts[0] == "datasets":
            kind, parts = "datasets", parts[1:]
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._resolve(self._repo(kind, parts[0], parts[1]), parts[3], "/".join(parts[4:]))
        raise HubError(404, None, "Not Found")

    # --- /api -----------------------------------------------------------------------------------------
    def _api(self, repo: GitRepo, repo_id: str, rest: list[str], query: dict):
        if rest == ["refs"]:
            return self._json(refs(repo))
        if len(rest) >= 2 and rest[0] == "tree":
            return self._json(self._tree(repo, rest[1], "/".join(rest[2:]).strip("/"), _flag(query, "recursive")))
        if rest and not (len(rest) == 2 and rest[0] == "revision"):
            raise HubError(404, None, "Not Found")
        return self._json(self._info(repo, repo_id, rest[1] if rest else "HEAD", _flag(query, "blobs")))

    def _tree(self, repo: GitRepo, rev: str, sub: str, recursive: bool) -> list[dict]:
        sha = repo.resolve(rev)
        entries = repo.tree(sha)
        if sub and entries.get(sub, ("",))[0] != "directory":
            raise HubError(404, "EntryNotFound", f"{sub} does not exist on {rev}", {"X-Repo-Commit": sha})
        prefix = sub + "/" if sub else ""
        return [self._entry(repo, p, e) for p, e in sorted(entries.items())
                if p.startswith(prefix) and (recursive or "/" not in p[len(prefix):])]

    def _info(self, repo: GitRepo, repo_id: str, rev: str, blobs: bool) -> dict:
        sha = repo.resolve(rev)
        siblings = [self._sibling(repo, path, e, blobs) for path, e in sorted(repo.tree(sha).items())
                    if e[0] == "file"]
        date = repo.commit_date(sha)
        return {
            "_id": sha, "id": repo_id, "modelId": repo_id, "author": repo_id.split("/")[0], "sha": sha,
            "lastModified": date, "createdAt": date, "private": False, "gated": False, "disabled": False,
            "downloads": 0, "likes": 0, "tags": [], "siblings": siblings,
        }

    def _sibling(self, repo: GitRepo, path: str, e, blobs: bool) -> dict:
        s = {"rfilename": path}
        if blobs:
            d = self._entry(repo, path, e)
            s.update({"size": d["size"], "blobId": d["oid"]})
            if "lfs" in d:
                s["lfs"] = {"sha256": d["lfs"]["oid"], "size": d["lfs"]["size"],
                            "pointerSize": d["lfs"]["pointerSize"]}
        return s

    def _entry(self, repo: GitRepo, path: str, e) -> dict:
        typ, oid, size = e
        if typ == "directory":
            return {"type": "directory", "oid": oid, "size": 0, "path": path}
        d = {"type": "file", "oid": oid, "size": size, "path": path}
        if size >= self.server.lfs_threshold:
            d["lfs"] = {"oid": repo.sha256(oid), "size": size, "pointerSize": LFS_POINTER_SIZE}
        return d

    # --- /resolve -------------------------------------------------------------------------------------
    def _resolve(self, repo: GitRepo, rev: str, path: str):
        sha = repo.resolve(rev)
        e = repo.tree(sha).get(path)
        if e is None or e[0] != "file":
            raise HubError(404, "EntryNotFound", f"{path} does not exist at {sha}", {"X-Repo-Commit": sha})
        _, oid, size = e
        headers = {"X-Repo-Commit": sha, "ETag": f'"{oid}"', "Accept-Ranges": "bytes"}
        if size >= self.server.lfs_threshold:
            digest = repo.sha256(oid)
            headers.update({"ETag": f'"{digest}"', "X-Linked-Etag": f'"{digest}"', "X-Linked-Size": str(size)})
        span = byte_range(self.headers.get("Range"), size)
        if span is None:
            return self._send(416, b"", {**headers, "Content-Range": f"bytes */{size}"})
        start, end, status = span
        if status == 206:
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        self._head(status, "application/octet-stream", end - start, headers)
        self._log(status, self._stream(repo, oid, start, end) if self.command == "GET" else 0)

    def _stream(self, repo: GitRepo, oid: str, start: int, end: int) -> int:
        """Write the blob's bytes [start, end) at the throttle's pace; returns how many were sent."""
        sent = 0
        try:
            for chunk in repo.stream(oid, start, end):
                self.wfile.write(chunk)
                sent += len(chunk)
                rate = self.server.throttle()
                if rate:
                    time.sleep(len(chunk) / rate)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        return sent


REQUEST_LINE = re.compile(r"^REQ GET (\S+) \d+ range=\S+ bytes=(\d+)$")


def bytes_served(lines) -> int:
    """The file-body bytes (GET .../resolve/...) a request log reports: what clients downloaded from this hub."""
    total = 0
    for line in lines:
        m = REQUEST_LINE.match(line.strip())
        if m and "/resolve/" in m.group(1):
            total += int(m.group(2))
    return total


def _flag(query: dict, name: str) -> bool:
    return query.get(name, ["false"])[0].lower() in ("1", "true")


def refs(repo: GitRepo) -> dict:
    """The branches and tags of a repo, as the Hub's /refs lists them."""
    out = {"branches": [], "tags": [], "converts": []}
    listing = repo.git("for-each-ref", "--format=%(refname) %(objectname) %(*objectname)",
                       "refs/heads", "refs/tags").decode()
    for line in listing.splitlines():
        ref, obj, *peeled = line.split()
        group = "branches" if ref.startswith("refs/heads/") else "tags"
        out[group].append({"name": ref.split("/", 2)[2], "ref": ref, "targetCommit": peeled[0] if peeled else obj})
    return out


RANGE = re.compile(r"bytes=(\d*)-(\d*)")


def byte_range(header: str | None, size: int) -> tuple[int, int, int] | None:
    """(start, end, HTTP status) of what a Range header asks of a file of `size` bytes: the whole file with 200
    when there is no usable range, a part with 206; None when the range starts past the end (416)."""
    m = RANGE.fullmatch((header or "").strip())
    if not m or not (m.group(1) or m.group(2)):
        return 0, size, 200
    first, last = m.groups()
    if first:
        start, end = int(first), min(int(last) + 1 if last else size, size)
    else:
        start, end = max(size - int(last), 0), size
    if start >= size and size:
        return None
    return start, end, 206


def make_server(root, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
                lfs_threshold: int = LFS_THRESHOLD, throttle_file: Path | None = None):
    """The endpoint, not yet serving: call serve_forever() (a thread is fine); server_address has the port."""
    srv = http_server_class()((host, port), HubHandler)
    srv.root = Path(root).resolve()
    srv.token = token
    srv.lfs_threshold = lfs_threshold
    srv.repos, srv.repos_lock = {}, threading.Lock()
    cache = {"t": 0.0, "v": 0.0}

    def throttle() -> float:
        """bytes/s from the throttle file (0: full speed), re-read at most 5 times a second."""
        now = time.monotonic()
        if throttle_file is not None and now - cache["t"] > 0.2:
            cache["t"] = now
            try:
                cache["v"] = float(Path(throttle_file).read_text().strip() or 0)
            except (FileNotFoundError, ValueError):
                cache["v"] = 0.0
        return cache["v"] or float(os.environ.get("SPARKCTL_SIM_HUB_THROTTLE", "0") or 0)

    srv.throttle = throttle
    return srv


def main(argv=None) -> int:
    from sparkctl.sim import config

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=str(config.HUB_DIR))
    ap.add_argument("--host", default=config.HOST_ADDRESS)
    ap.add_argument("--port", type=int, default=config.HUB_PORT)
    ap.add_argument("--token", help="require Authorization: Bearer TOKEN")
    ap.add_argument("--lfs-threshold", type=int, default=LFS_THRESHOLD)
    ap.add_argument("--throttle-file", default=str(config.HUB_THROTTLE_FILE))
    a = ap.parse_args(argv)
    srv = make_server(a.root, a.host, a.port, a.token, a.lfs_threshold, Path(a.throttle_file))
    return serve(srv, f"LISTENING http://{a.host}:{srv.server_address[1]} root={srv.root}")


if __name__ == "__main__":
    sys.exit(main())
