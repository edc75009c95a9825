"""Small helpers shared by the simulated Spark's modules: commands, pid files, progress lines with timings."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from sparkctl.errors import SparkctlError

QUIET = False  # tests set this to keep output short


def say(msg: str) -> None:
    if not QUIET:
        print(msg, flush=True)


@contextmanager
def step(what: str):
    """Print `what ... done (1.23 s)` around a block; the block may append a detail to the list it gets."""
    t0 = time.monotonic()
    detail: list[str] = []
    try:
        yield detail
    except BaseException:
        say(f"{what}: FAILED after {time.monotonic() - t0:.2f} s")
        raise
    extra = f" ({', '.join(detail)})" if detail else ""
    say(f"{what}: {time.monotonic() - t0:.2f} s{extra}")


def run(argv: list[str], check: bool = True, capture: bool = True, **kw) -> subprocess.CompletedProcess:
    """Run a command; on failure raise a SparkctlError naming the command and its stderr."""
    p = subprocess.run([str(a) for a in argv], capture_output=capture, text=True, **kw)
    if check and p.returncode != 0:
        err = (p.stderr or p.stdout or "").strip() if capture else ""
        raise SparkctlError(f"command failed (rc {p.returncode}): {' '.join(map(str, argv))}"
                            + (f"\n{err[-2000:]}" if err else ""))
    return p


def read_pid(path: Path) -> int | None:
    try:
        pid = int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if pid_alive(pid) else None


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                out += [int(x) for x in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
            except OSError:
                pass
    except OSError:
        pass
    return out


def processes_naming(directory: Path) -> list[int]:
    """Every live process (but this one and its ancestors) whose command line names a path under directory."""
    spare, p = set(), os.getpid()
    while p > 1:
        spare.add(p)
        try:
            p = int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    prefix = str(directory).rstrip("/") + "/"
    pids = [int(d) for d in os.listdir("/proc") if d.isdigit() and int(d) not in spare]
    return sorted(pid for pid in pids if pid_alive(pid)
                  and any(arg == prefix[:-1] or arg.startswith(prefix) for arg in cmdline(pid)))


def kill(pid: int | None, sig: int = signal.SIGTERM) -> None:
    if pid:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def wait_gone(pid: int | None, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def python_env() -> dict:
    """Environment for our own Python children: the repo on sys.path whatever the cwd."""
    from sparkctl import REPO_ROOT

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def python() -> str:
    return sys.executable


def http_server_class():
    """A threading HTTP server with a deep accept queue (apt and huggingface_hub open many connections)."""
    from http.server import ThreadingHTTPServer

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 128

    return Server


def serve(srv, banner: str) -> int:
    """Run a stand-in daemon's server until killed, after one line on stderr (its log) saying what it serves."""
    sys.stderr.write(banner + "\n")
    sys.stderr.flush()
    srv.serve_forever()
    return 0


@contextmanager
def state_lock():
    """Serialize `up` and `down` of this checkout (two at once would race on the bridge, netns and overlays)."""
    import fcntl

    from sparkctl.sim.config import SIM_DIR

    SIM_DIR.mkdir(parents=True, exist_ok=True)
    with open(SIM_DIR / ".lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another `sim up`/`sim down` of this checkout ({SIM_DIR / '.lock'})")
            fcntl.flock(f, fcntl.LOCK_EX)
        yield
