"""`rehearse --cold-warm` (sparkctl/rehearse/coldwarm.py) against a fake box: the ssh layer plays a coder unit whose
start compiles into the kernel caches; the cold start (caches moved aside) and the warm restart are timed as the
health table times them, each cache's files counted before and after, and a cache a restart wipes is BAD."""

from __future__ import annotations

import re
import subprocess

import pytest

from sparkctl.check.load import load
from sparkctl.rehearse import boxread, coldwarm
from sparkctl.rehearse.figures import BAD, NOT_MEASURED, OK, WARN

UNIT = "vllm-coder.service"


class Host:
    name, address, ssh_user = "spark-1", "10.250.0.11", "root"


class FakeBox(boxread.Shell):
    """A coder unit: a start takes `cold_s` with empty caches and `warm_s` with the cold start's files, and writes
    `writes` files into each cache it uses; `wiped` names caches a restart empties (as a RuntimeDirectory is). Each
    cache's files: [older than the mark, newer]."""

    def __init__(self, cfg, cold_s=900.0, warm_s=120.0, writes=None, wiped=(), fails=False):
        self.cfg, self.cold_s, self.warm_s, self.fails = cfg, cold_s, warm_s, fails
        self.writes = writes if writes is not None else {"FLASHINFER_WORKSPACE_BASE": 40, "TRITON_CACHE_DIR": 12}
        self.wiped = set(wiped)
        self.files = {name: [5, 0] for name in cfg.KERNEL_CACHES}  # what an earlier build left
        self.invocation, self.start, self.ready, self.active, self.commands = 1, 1000.0, True, "active", []
        self.took, self.warm = 100.0, False  # the start that was running before the rehearsal

    def _started(self, warm: bool):
        self.invocation += 1
        self.start += 5000.0
        self.ready, self.warm, self.took = False, warm, self.warm_s if warm else self.cold_s
        if warm:
            for name in self.wiped:
                self.files[name] = [0, 0]

    def run(self, host, command, timeout_s):
        self.commands.append(command)
        if command.startswith("n=$(find"):
            marked = "! -newer" in command
            text = "".join(f"cache {n} {sum(f)} {sum(f) * 4096} {f[0] if marked else '-'}\n"
                           for n, f in self.files.items())
            return boxread.Result(0, text, "")
        if command.startswith("set -e; systemctl stop"):  # the cold start: caches moved aside, started
            self.files = {n: [0, 0] for n in self.files}
            self._started(warm=False)
            if self.fails:
                self.active = "failed"
            return boxread.Result(0, "", "")
        if command.startswith("systemctl stop"):  # the caches put back after a failed cold start
            self.files = {n: [5, 0] for n in self.files}
            self.active = "active"
            return boxread.Result(0, "", "")
        if command.startswith("set -e; touch"):  # the mark, then the warm restart
            self.files = {n: [sum(f), 0] for n, f in self.files.items()}
            self._started(warm=True)
            return boxread.Result(0, "", "")
        if command.startswith("rm -"):
            return boxread.Result(0, "", "")
        # a read of the unit (boxread.read_box): the first read after a start finds it loading, the next ready
        journal = []
        if self.ready:
            journal = [f"{self.start + self.took:.6f} spark-1 vllm[7]: INFO:     Application startup complete."]
        elif self.active != "failed":
            self.ready = True
            for name, n in self.writes.items():  # a cold start compiles all; a warm one only what is missing
                if not self.warm or self.files[name] == [0, 0]:
                    self.files[name][1] += n
        text = "\n".join(["=== service coder", f"ActiveState={self.active}", "MemoryCurrent=[not set]",
                          f"InvocationID=inv{self.invocation}", f"start_epoch={self.start:.6f}", "=== journal",
                          *journal, "=== boot", "=== meminfo", "MemAvailable: 1 kB", "=== scripts"]) + "\n"
        return boxread.Result(0, text, "")


@pytest.fixture(scope="module")
def cfg():
    return load(["all", "gx10"]).cfg


def figs(result) -> dict:
    return {f.name: f for f in coldwarm.figures("spark-1", result)}


def test_a_cold_start_and_a_warm_restart_and_each_cache_reused(cfg):
    box = FakeBox(cfg)
    result = coldwarm.measure(box, Host(), cfg, UNIT, sleep=lambda s: None)
    assert (result["cold_s"], result["warm_s"], result["error"]) == (900.0, 120.0, "")
    fi = result["caches"]["FLASHINFER_WORKSPACE_BASE"]
    assert fi["dir"] == "/var/lib/sparkctl/cache/flashinfer"
    assert (fi["before_cold"]["files"], fi["before_warm"]["files"], fi["after_warm"]) == (5, 40, {"files": 40,
                                                                                                "bytes": 163840,
                                                                                                "kept": 40})
    f = figs(result)
    assert (f["coder: cold start (kernel caches emptied)"].value, f["coder: warm restart"].value) == (
        "900.0 s", "120.0 s (780.0 s faster, 13% of the cold start)")
    assert f["coder: warm restart"].verdict == OK and "faster than the cold start (900.0 s)" in \
        f["coder: warm restart"].against
    assert (f["FLASHINFER_WORKSPACE_BASE: reused"].verdict, f["TRITON_CACHE_DIR: reused"].verdict) == (OK, OK)
    assert f["FLASHINFER_WORKSPACE_BASE: reused"].value == ("40 files (0.2 MiB) before the warm restart, 40 of them "
                                                            "untouched after it (40 in all)")
    assert f["CUTE_DSL_CACHE_DIR: reused"].verdict == NOT_MEASURED  # nothing written: never a pass
    # the caches were moved aside before the cold start and dropped once it was up
    cold = next(c for c in box.commands if coldwarm.ASIDE in c and "systemctl start" in c)
    assert "mv /var/lib/sparkctl/cache/flashinfer /var/lib/sparkctl/cache/flashinfer.rehearse-cold-aside" in cold
    assert any(c.startswith("rm -rf") and coldwarm.ASIDE in c for c in box.commands)


def test_a_cache_a_restart_wipes_is_bad(cfg):
    """A cache left in the unit's TMPDIR (its RuntimeDirectory) is empty at every start."""
    result = coldwarm.measure(FakeBox(cfg, wiped={"TRITON_CACHE_DIR"}), Host(), cfg, UNIT, sleep=lambda s: None)
    f = figs(result)
    assert f["TRITON_CACHE_DIR: reused"].verdict == BAD  # the warm start wrote its 12 files again
    assert f["TRITON_CACHE_DIR: reused"].value.startswith("12 files (0.0 MiB) before the warm restart, 0 of them")
    assert "never TMPDIR or /run" in f["TRITON_CACHE_DIR: reused"].bad_means


def test_a_warm_restart_no_faster_is_a_warning(cfg):
    f = figs(coldwarm.measure(FakeBox(cfg, cold_s=100.0, warm_s=130.0), Host(), cfg, UNIT, sleep=lambda s: None))
    assert f["coder: warm restart"].verdict == WARN


def test_a_cold_start_that_fails_puts_the_caches_back(cfg):
    box = FakeBox(cfg, fails=True)
    result = coldwarm.measure(box, Host(), cfg, UNIT, sleep=lambda s: None)
    assert result["cold_s"] is None and "failed during its start" in result["error"]
    assert "put back" in result["error"] and box.files["TRITON_CACHE_DIR"] == [5, 0]
    assert not any(c.startswith("set -e; touch") for c in box.commands)  # no warm restart
    assert figs(result)["coder: cold start (kernel caches emptied)"].verdict == BAD


def test_without_the_flag_nothing_restarts_and_nothing_passes():
    (f,) = coldwarm.figures("spark-1", None, "not measured (rehearse --cold-warm restarts the coder twice)")
    assert f.verdict == NOT_MEASURED


def test_the_box_commands_are_valid_shell(cfg):
    for text in (coldwarm.count_command(cfg), coldwarm.count_command(cfg, coldwarm.mark_path(cfg)),
                 coldwarm.cold_command(cfg, UNIT), coldwarm.warm_command(cfg, UNIT),
                 coldwarm.restore_command(cfg, UNIT), coldwarm.drop_aside_command(cfg), coldwarm.drop_mark_command(cfg)):
        assert subprocess.run(["sh", "-n", "-c", text]).returncode == 0, text
    counted = subprocess.run(["sh", "-c", coldwarm.count_command(cfg)], capture_output=True, text=True).stdout
    assert re.findall(r"^cache (\w+) 0 0 -$", counted, re.M) == list(cfg.KERNEL_CACHES)  # absent dirs count 0


def test_the_count_tells_untouched_files_from_rewritten_ones(tmp_path):
    """The real count through sh on a directory: a file the warm restart neither removed nor rewrote is "kept"."""
    import os
    import time

    cfg = load(["all", "gx10"], overrides={"STATE_DIR": str(tmp_path)}).cfg
    triton = tmp_path / cfg.KERNEL_CACHES["TRITON_CACHE_DIR"]
    triton.mkdir(parents=True)
    for i in range(3):
        (triton / f"k{i}.cubin").write_bytes(b"x" * 1000)
    old = time.time() - 60
    for f in triton.iterdir():
        os.utime(f, (old, old))
    mark = coldwarm.mark_path(cfg)
    subprocess.run(["touch", mark], check=True)
    (triton / "k0.cubin").write_bytes(b"y" * 1000)  # rewritten after the mark
    (triton / "k3.cubin").write_bytes(b"z")  # new
    out = subprocess.run(["sh", "-c", coldwarm.count_command(cfg, mark)], capture_output=True, text=True).stdout
    counts = coldwarm.parse_counts(out)
    assert (counts["TRITON_CACHE_DIR"]["files"], counts["TRITON_CACHE_DIR"]["kept"]) == (4, 2)
    assert counts["CUTE_DSL_CACHE_DIR"] == {"files": 0, "bytes": 0, "kept": 0}
