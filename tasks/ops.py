"""Custom pyinfra operations: each reads a fact, then either does nothing (and says why) or yields the command.

That makes steps that are shell commands underneath idempotent: a converged box reports no change.
"""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation
from pyinfra.api.command import QuoteString
from pyinfra.facts.files import File

from sparkctl.errors import SettingError
from tasks.facts import DistVersion, GpuInfo, RolloutStatus, RunningOomGuard


def _fail(state, host, message: str) -> bool:
    """FunctionCommand body: log why, and fail this host's operation (pyinfra stops the host cleanly)."""
    host.log_styled(message, fg="red", log_func=logger.error)
    return False


def fail(message: str) -> FunctionCommand:
    return FunctionCommand(_fail, (message,), {})


def _base(version: str | None) -> str:
    return (version or "").split("+", 1)[0]


@operation()
def pip_dist(venv: str, dist: str, version: str, requirement: str, pip_args: list[str] | None = None):
    """Install `requirement` into `venv` unless distribution `dist` is already at `version` (local tags ignored).

    pyinfra's own pip.packages cannot see local versions such as 0.32.0+cu130 in `pip freeze`, so it would
    reinstall vLLM on every run.
    """
    python = f"{venv}/bin/python"
    have = host.get_fact(DistVersion, python=python, dist=dist)
    if _base(have) == version:
        host.noop(f"{dist} {have} is installed in {venv}")
        return
    yield StringCommand(QuoteString(python), "-m pip install --no-input --progress-bar off",
                        *[QuoteString(a) for a in (pip_args or [])], QuoteString(requirement))
    after = "import importlib.metadata as m; v = m.version(%r); assert v.split('+')[0] == %r, v" % (dist, version)
    yield StringCommand(QuoteString(python), "-c", QuoteString(after))


@operation()
def fetch_checkpoint(repo: str, sha: str, listing: str, cache_dir: str, marker: str, python: str, script: str,
                     workers: int = 8):
    """Download and verify one locked checkpoint unless its verified marker exists."""
    if host.get_fact(File, path=marker):
        host.noop(f"{repo}@{sha[:12]} is on disk and verified")
        return
    yield StringCommand(QuoteString(python), QuoteString(script), "--listing", QuoteString(listing),
                        "--cache-dir", QuoteString(cache_dir), "--marker", QuoteString(marker),
                        "--workers", str(int(workers)))


@operation()
def sync_checkpoint(repo: str, sha: str, listing: str, cache_dir: str, folder: str, snapshot: str, marker: str,
                    python: str, script: str, source: str, ssh_argv: list[str], workers: int = 8):
    """Tensor-parallel worker: copy a verified checkpoint from the head over the CX7 link (never a second Hub
    download), then verify it against the lock by content like a download, unless its marker exists.

    source: user@head, whose forced rrsync serves the head's MODEL_STORE/hub; ssh_argv: rsync's -e command."""
    if host.get_fact(File, path=marker):
        host.noop(f"{repo}@{sha[:12]} is on disk and verified")
        return
    ssh = " ".join(ssh_argv)
    yield StringCommand("mkdir -p", QuoteString(f"{cache_dir}/{folder}"), "&& rsync -a --partial --delete -e",
                        QuoteString(ssh), QuoteString(f"{source}:{folder}/"), QuoteString(f"{cache_dir}/{folder}/"))
    yield StringCommand(QuoteString(python), QuoteString(script), "--verify-only", "--listing", QuoteString(listing),
                        "--snapshot", QuoteString(snapshot), "--marker", QuoteString(marker),
                        "--workers", str(int(workers)))


@operation()
def rollout(service: str, script: str, port: int, served: str, kind: str, timeout: int, interval: int,
            journal_lines: int, env_prefix: str = ""):
    """Switch a service to its staged env file and gate on readiness, unless it already runs exactly that.

    "Exactly that" = the stamp rollout.py recorded after its last healthy start matches the unit file, the staged
    env file and the installed vLLM version now; so a restart happens only when something the service reads
    changed, and a rollout that failed (and rolled back) is tried again on the next run.
    """
    status = host.get_fact(RolloutStatus, script=script, service=service, env_prefix=env_prefix)
    if status.get("active") and status.get("applied") and status.get("applied") == status.get("wanted"):
        host.noop(f"vllm-{service} already runs its configuration")
        return
    yield StringCommand(env_prefix, "python3", QuoteString(script), "apply", QuoteString(service),
                        "--port", str(int(port)), "--served", QuoteString(served), "--kind", kind,
                        "--timeout", str(int(timeout)), "--interval", str(int(interval)),
                        "--journal", str(int(journal_lines)))


@operation()
def metadata_alias(venv: str, version: str):
    """A metadata-only `vllm` distribution at `version` in the venv (for builds published under another name)."""
    python = f"{venv}/bin/python"
    if host.get_fact(DistVersion, python=python, dist="vllm") == version:
        host.noop(f"vllm metadata alias {version} present")
        return
    code = ("import pathlib, sysconfig; d = pathlib.Path(sysconfig.get_paths()['purelib']) / %r; "
            "d.mkdir(exist_ok=True); (d / 'METADATA').write_text(%r); (d / 'RECORD').write_text('')"
            % (f"vllm-{version}.dist-info", f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"))
    yield StringCommand(QuoteString(python), "-c", QuoteString(code))


@operation()
def require_driver(required_gpu: str, min_driver: int):
    """At execute time, after the packages: the new driver must answer, else stop and say to reboot."""
    if not host.state.is_executing:
        host.noop("checked after the driver packages are installed")
        return
    gpu = host.get_fact(GpuInfo)
    ok = gpu and "error" not in gpu and required_gpu.lower() in gpu["name"].lower()
    if ok and int(gpu["driver_version"].split(".")[0]) >= min_driver:
        host.noop(f"{gpu['name']} answers with driver {gpu['driver_version']}")
        return
    yield fail(f"the NVIDIA driver is installed but the GPU does not answer yet ({gpu}); reboot the box "
               f"(sudo reboot: a new kernel module loads at boot) and rerun the deploy")


SIZE_SUFFIXES = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}  # systemd's sizes are base 1024


def systemd_bytes(setting: str, value) -> int:
    """A systemd size (MemoryMin=64M) in bytes, as systemd parses it; refuse the forms we cannot compare."""
    text = str(value).strip().upper()
    number, suffix = (text[:-1], text[-1:]) if text[-1:] in SIZE_SUFFIXES else (text, "")
    if not number.isdigit():
        raise SettingError(setting, value, "a size in bytes with an optional K, M, G or T suffix, e.g. '64M'")
    return int(number) * SIZE_SUFFIXES[suffix]


@operation()
def running_oom_guard(unit: str, oom_score_adj: int, memory_min: str, memory_min_setting: str):
    """Give the running daemon of `unit` the OOMScoreAdjust=/MemoryMin= its drop-in sets, without a restart.

    systemd applies OOMScoreAdjust= only when it starts a process, so a drop-in added to a running sshd would wait
    for the next sshd start. Restarting sshd would apply it, but a restart whose new sshd fails to start leaves
    the box without logins; so write /proc/<pid>/oom_score_adj of the listener (later connections inherit it)
    and, best effort, of its per-connection children, and set MemoryMin on the unit's cgroup for this boot
    (`systemctl set-property --runtime`; the drop-in carries both across restarts and reboots). A score already
    lower (better protected) than the setting is left alone.
    """
    adj, want_min = int(oom_score_adj), systemd_bytes(memory_min_setting, memory_min)
    now = host.get_fact(RunningOomGuard, unit=unit)
    if not now["pid"]:
        host.noop(f"{unit} is not running: its drop-in applies when it starts")
        return
    score_ok = now["adj"] is not None and now["adj"] <= adj
    floor_ok = now["memory_min"] is None or now["memory_min"] == want_min
    if score_ok and floor_ok:
        floor = "no memory controller here" if now["memory_min"] is None else f"memory.min {want_min}"
        host.noop(f"running {unit} (pid {now['pid']}) has oom_score_adj {now['adj']} ({floor})")
        return
    if not score_ok:
        main = str(int(now["pid"]))
        yield StringCommand(f"for p in {main} $(pgrep -P {main}); do echo {adj} > /proc/$p/oom_score_adj",
                            f'2>/dev/null || true; done; test "$(cat /proc/{main}/oom_score_adj)" = {adj}')
    if not floor_ok:
        yield StringCommand("systemctl set-property --runtime", QuoteString(unit),
                            QuoteString(f"MemoryMin={memory_min}"))
