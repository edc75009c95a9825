"""The OOM guard does what it says: earlyoom's --prefer/--avoid regexes, as rendered into /etc/default/earlyoom,
applied with glibc's POSIX regex (what earlyoom itself calls) to real /proc/<pid>/comm names; and the running sshd
gets its OOM score and memory floor without a restart, idempotently."""

from __future__ import annotations

import ctypes
import ctypes.util
import shlex
import subprocess
import sys
import time

import pytest

from sparkctl.config import groupdata
from sparkctl.errors import SettingError
from sparkctl.render import units

REG_EXTENDED, REG_NOSUB = 1, 8  # <regex.h> (glibc)
_libc = ctypes.CDLL(ctypes.util.find_library("c"))


def posix_matches(pattern: str, names: list[str]) -> set[str]:
    """The names that regexec() matches with `pattern` compiled by regcomp(REG_EXTENDED | REG_NOSUB)."""
    preg = ctypes.create_string_buffer(256)  # > sizeof(regex_t) (64 on glibc x86_64 and aarch64)
    assert _libc.regcomp(preg, pattern.encode(), REG_EXTENDED | REG_NOSUB) == 0, f"regcomp refused {pattern!r}"
    try:
        return {n for n in names if _libc.regexec(preg, n.encode(), 0, None, 0) == 0}
    finally:
        _libc.regfree(preg)


# /proc/<pid>/comm on a converged box (the kernel keeps 15 characters): seen on the simulated Spark, plus the
# names of a GB10 box's vLLM workers and Ray actors
VLLM = ["vllm", "VLLM::EngineCor", "VLLM::Worker_TP", "VLLM::Worker", "ray::RayWorkerW"]
VITAL = ["systemd", "systemd-journal", "systemd-logind", "systemd-udevd", "dbus-daemon", "sshd", "sshd-session",
         "nginx"]
# the deploy's helpers: rollout.py (system python3), fetch_checkpoint.py and check_vllm_args.py (the venv's python),
# the checkpoint copy, the deploy's own shell commands; and what else runs on a box
OTHERS = ["python3", "python", "python3.12", "rsync", "ssh", "sh", "bash", "curl", "sudo", "apt-get", "dpkg",
          "earlyoom", "cron", "agetty", "systemd-network", "systemd-resolve", "systemd-timesyn", "nvidia-persiste",
          "ray", "raylet", "gcs_server", "vllm-helper"]


def rendered_args(data: dict) -> dict:
    """--prefer/--avoid as earlyoom receives them: EnvironmentFile value, then the unit's $EARLYOOM_ARGS split."""
    text = units.render_template("earlyoom.j2", d=data)
    line = next(x for x in text.splitlines() if x.startswith("EARLYOOM_ARGS="))
    argv = shlex.split(shlex.split(line.split("=", 1)[1])[0])  # the file's double quotes, then systemd's word split
    return {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i] in ("--prefer", "--avoid")}


@pytest.mark.parametrize("groups", [["all", "gx10"], ["all", "gx10", "sim"]])
def test_earlyoom_prefers_vllm_only_and_avoids_the_real_vital_names(groups):
    args = rendered_args(groupdata.load(groups))
    everything = VLLM + VITAL + OTHERS
    assert posix_matches(args["--prefer"], everything) == set(VLLM)
    assert posix_matches(args["--avoid"], everything) == set(VITAL)


def test_the_name_check_catches_the_previous_defaults():
    """Not vacuous: the shipped values before this check preferred the deploy's own python helpers and avoided a
    "journald" no process is called."""
    assert {"python3", "python"} <= posix_matches("^(vllm|VLLM|python3?)", OTHERS)
    assert "systemd-journal" not in posix_matches("^(sshd|systemd|nginx|journald)$", VITAL)


def test_systemd_sizes_in_bytes():
    from tasks.oom_guard import size_setting_bytes

    assert size_setting_bytes("SSHD_MEMORY_MIN", "64M") == 64 * 2**20
    assert size_setting_bytes("SSHD_MEMORY_MIN", "1G") == 2**30
    assert size_setting_bytes("SSHD_MEMORY_MIN", 4096) == 4096
    for bad in ("64MB", "10%", "200%", "infinity", "", "-1M", "1g"):  # systemd's suffixes are upper case
        with pytest.raises(SettingError, match="SSHD_MEMORY_MIN"):
            size_setting_bytes("SSHD_MEMORY_MIN", bad)


# --- the running sshd -------------------------------------------------------------------------------------------

class FakeHost:
    def __init__(self, fact):
        self.fact, self.noops = fact, []

    def get_fact(self, cls, **kwargs):
        return self.fact

    def noop(self, text):
        self.noops.append(text)


def plan(monkeypatch, fact, adj=-900, memory_min="64M"):
    import tasks.oom_guard as ops

    fake = FakeHost({"can_lower": True, **fact})
    monkeypatch.setattr(ops, "host", fake)
    cmds = [str(c.get_raw_value()) for c in ops.running_oom_guard._inner(
        unit="ssh.service", oom_score_adj=adj, memory_min=memory_min, memory_min_setting="SSHD_MEMORY_MIN")]
    return cmds, fake.noops


def test_a_converged_sshd_plans_nothing(monkeypatch):
    cmds, noops = plan(monkeypatch, {"pid": 812, "adj": -900, "memory_min": 64 * 2**20})
    assert cmds == [] and "oom_score_adj -900" in noops[0]
    cmds, _ = plan(monkeypatch, {"pid": 812, "adj": -1000, "memory_min": None})  # better protected; no memory.min
    assert cmds == []
    cmds, noops = plan(monkeypatch, {"pid": 0, "adj": None, "memory_min": None})
    assert cmds == [] and "not running" in noops[0]


def test_a_box_that_cannot_lower_oom_scores_plans_no_change_and_says_why(monkeypatch):
    """A container without CAP_SYS_RESOURCE (the simulated Spark in a sandbox): systemd ignores OOMScoreAdjust=
    there, and a write would fail; the next run must still be a no-op."""
    cmds, noops = plan(monkeypatch, {"pid": 812, "adj": 0, "memory_min": None, "can_lower": False})
    assert cmds == [] and "CAP_SYS_RESOURCE" in noops[0]
    cmds, _ = plan(monkeypatch, {"pid": 812, "adj": 0, "memory_min": 0, "can_lower": False})
    assert cmds == ["systemctl set-property --runtime ssh.service MemoryMin=64M"]  # the floor still applies


def test_a_running_sshd_without_the_drop_in_applied_is_fixed_in_place(monkeypatch):
    cmds, _ = plan(monkeypatch, {"pid": 812, "adj": 0, "memory_min": 0})
    assert len(cmds) == 2
    assert "echo -900 > /proc/$p/oom_score_adj" in cmds[0] and "$(pgrep -P 812)" in cmds[0]
    assert cmds[1] == "systemctl set-property --runtime ssh.service MemoryMin=64M"
    assert not any("restart" in c for c in cmds)  # the operator's connection stays


def test_the_fact_and_the_fix_on_real_processes(tmp_path):
    """The fact's and the operation's shell, run here: a stand-in `systemctl` names a real process as MainPID."""
    from tasks.facts import RunningOomGuard

    # a "listener" at oom_score_adj 200 with one "connection" child; lowering back to 100 needs no privilege
    listener = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time;"
                                 "open('/proc/self/oom_score_adj', 'w').write('200');"
                                 "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
                                 "time.sleep(60)"])
    try:
        fake = tmp_path / "bin"
        fake.mkdir()
        (fake / "systemctl").write_text(f"#!/bin/sh\n[ \"$3\" = MainPID ] && echo {listener.pid}\n"
                                        "[ \"$3\" = ControlGroup ] && echo /nonexistent\nexit 0\n")
        (fake / "systemctl").chmod(0o755)
        env = {"PATH": f"{fake}:/usr/bin:/bin"}
        fact = RunningOomGuard()
        read = lambda: fact.process(subprocess.run(  # noqa: E731
            ["sh", "-c", fact.command("ssh.service").get_raw_value()], env=env, capture_output=True, text=True,
            check=True).stdout.splitlines())
        for _ in range(100):  # the child is forked right away
            if subprocess.run(["pgrep", "-P", str(listener.pid)], capture_output=True).stdout.strip():
                break
            time.sleep(0.05)
        before = read()
        assert isinstance(before.pop("can_lower"), bool)  # this machine's own CAP_SYS_RESOURCE, either way
        assert before == {"pid": listener.pid, "adj": 200, "memory_min": None}
        before["can_lower"] = True  # back down to its own earlier score: allowed without CAP_SYS_RESOURCE
        import tasks.oom_guard as ops

        ops_host, ops.host = ops.host, FakeHost(before)
        try:
            cmds = [str(c.get_raw_value()) for c in ops.running_oom_guard._inner(
                unit="ssh.service", oom_score_adj=100, memory_min="64M", memory_min_setting="SSHD_MEMORY_MIN")]
        finally:
            ops.host = ops_host
        assert len(cmds) == 1  # no memory controller reported: the score only
        subprocess.run(["sh", "-c", cmds[0]], env=env, check=True)
        assert read()["adj"] == 100
        child = subprocess.run(["pgrep", "-P", str(listener.pid)], capture_output=True, text=True).stdout.split()
        assert [open(f"/proc/{c}/oom_score_adj").read().strip() for c in child] == ["100"]
    finally:
        for p in subprocess.run(["pgrep", "-P", str(listener.pid)], capture_output=True, text=True).stdout.split():
            subprocess.run(["kill", p])
        listener.kill()
        listener.wait()
