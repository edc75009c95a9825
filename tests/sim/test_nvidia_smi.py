"""The nvidia-smi and nvcc stand-ins answer like a GB10 box with driver 580.95.05 and CUDA 13.0."""

import subprocess
import sys

import pytest

from sparkctl.sim.config import STANDINS

SMI = STANDINS / "nvidia-smi"


def smi(*args):
    return subprocess.run([sys.executable, str(SMI), *args], capture_output=True, text=True)


def test_query_gpu_csv_noheader():
    p = smi("--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader")
    assert p.returncode == 0
    assert p.stdout == "NVIDIA GB10, 12.1, 580.95.05\n"


@pytest.mark.parametrize("fields,expected", [
    ("name", "NVIDIA GB10"),
    ("compute_cap", "12.1"),
    ("driver_version,name", "580.95.05, NVIDIA GB10"),
    ("name,memory.total,memory.used,memory.free", "NVIDIA GB10, [N/A], [N/A], [N/A]"),
])
def test_any_subset_and_order(fields, expected):
    p = smi(f"--query-gpu={fields}", "--format=csv,noheader")
    assert (p.returncode, p.stdout.strip()) == (0, expected)


def test_csv_has_a_header_line():
    p = smi("--query-gpu", "name,compute_cap,memory.total", "--format", "csv")
    assert p.stdout.splitlines() == ["name, compute_cap, memory.total [MiB]", "NVIDIA GB10, 12.1, [N/A]"]


def test_unknown_field_is_an_error():
    p = smi("--query-gpu=name,bogus", "--format=csv")
    assert p.returncode != 0 and 'Field "bogus" is not a valid field to query.' in p.stdout


def test_plain_table_and_list():
    p = smi()
    assert p.returncode == 0
    assert "NVIDIA GB10" in p.stdout and "Driver Version: 580.95.05" in p.stdout and "CUDA Version: 13.0" in p.stdout
    assert smi("-L").stdout.startswith("GPU 0: NVIDIA GB10 (UUID: GPU-")


def test_standins_say_so_and_run_with_the_instance_python():
    text = SMI.read_text()
    assert text.startswith("#!/usr/bin/python3\n") and "STAND-IN" in text
    for name in ("nvcc", "ptxas", "dgx-release"):
        assert "STAND-IN" in (STANDINS / name).read_text()


@pytest.mark.parametrize("tool", ["nvcc", "ptxas"])
def test_cuda_tool_versions(tool):
    """What the device check's toolchain step runs under CUDA_HOME (`--version`): answered as CUDA 13.0's; nothing
    else is (a stand-in compiles nothing)."""
    p = subprocess.run(["sh", str(STANDINS / tool), "--version"], capture_output=True, text=True)
    assert p.returncode == 0 and "Cuda compilation tools, release 13.0, V13.0.88" in p.stdout
    assert subprocess.run(["sh", str(STANDINS / tool), "-c", "x.cu"], capture_output=True).returncode == 1
