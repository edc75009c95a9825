#!/usr/bin/env python3
"""On the box (uploaded by the deploy, run by sparkctl-box-facts.timer, stdlib only): the GPU facts GB10 reports.

    gpu_textfile.py --out /var/lib/prometheus/node-exporter/sparkctl_gpu.prom [--nvidia-smi nvidia-smi]

GB10 has unified memory: every memory.* field of `nvidia-smi --query-gpu` is [N/A], so memory is not read here
(MemAvailable from node exporter's meminfo collector is the honest figure). What GB10 does report: utilization,
temperature, power, SM clock, and per-process memory (`--query-compute-apps`), labelled with the systemd unit
the process belongs to. Fields answering [N/A] / [Not Supported] are left out rather than exported as 0.
"""

from __future__ import annotations

import argparse
import csv
import io
import subprocess
import sys
import time

try:
    from sparkctl.box.boxio import write_atomic
    from sparkctl.box.textfile import TEXTFILE_MODE, Exposition
except ImportError:  # on the box: the scripts sit side by side
    from boxio import write_atomic
    from textfile import TEXTFILE_MODE, Exposition

GPU_FIELDS = ["index", "uuid", "name", "utilization.gpu", "temperature.gpu", "power.draw", "clocks.sm",
              "clocks.max.sm"]
APP_FIELDS = ["pid", "process_name", "used_memory"]
MIB = 2**20
# field -> (metric, help, factor from nvidia-smi's nounits value to the metric's base unit)
GPU_METRICS = {
    "utilization.gpu": ("sparkctl_gpu_utilization_ratio", "GPU utilization (nvidia-smi utilization.gpu), 0-1", 0.01),
    "temperature.gpu": ("sparkctl_gpu_temperature_celsius", "GPU temperature, degrees Celsius", 1.0),
    "power.draw": ("sparkctl_gpu_power_watts", "GPU power draw, watts", 1.0),
    "clocks.sm": ("sparkctl_gpu_sm_clock_hertz", "current SM clock, hertz", 1e6),
    "clocks.max.sm": ("sparkctl_gpu_sm_clock_max_hertz", "maximum SM clock, hertz", 1e6),
}


def number(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:  # [N/A], [Not Supported], empty
        return None


def query(nvidia_smi: str, kind: str, fields: list[str], timeout: float = 10.0) -> list[list[str]]:
    r = subprocess.run([nvidia_smi, f"--query-{kind}={','.join(fields)}", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{nvidia_smi} --query-{kind} exited {r.returncode}: {(r.stdout + r.stderr).strip()}")
    return [[c.strip() for c in row] for row in csv.reader(io.StringIO(r.stdout)) if row]


def unit_of(pid: str, proc: str = "/proc") -> str:
    """The systemd unit a process runs in (from its cgroup path), or "" when it is in none."""
    try:
        with open(f"{proc}/{pid}/cgroup") as f:
            for line in f:
                path = line.rstrip("\n").split(":", 2)[-1]
                for part in reversed(path.split("/")):
                    if part.endswith(".service") or part.endswith(".scope"):
                        return part
    except OSError:
        pass
    return ""


def collect(nvidia_smi: str, proc: str = "/proc") -> Exposition:
    exp = Exposition()
    ok = 1
    try:
        gpus = query(nvidia_smi, "gpu", GPU_FIELDS)
        apps = query(nvidia_smi, "compute-apps", APP_FIELDS)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"gpu_textfile: {exc}", file=sys.stderr)
        gpus, apps, ok = [], [], 0
    for row in gpus:
        values = dict(zip(GPU_FIELDS, row))
        labels = {"gpu": values.get("index", ""), "uuid": values.get("uuid", ""), "name": values.get("name", "")}
        exp.add("sparkctl_gpu_info", "gauge", "one per GPU nvidia-smi lists", 1, labels)
        for field, (metric, help_text, factor) in GPU_METRICS.items():
            value = number(values.get(field, ""))
            if value is not None:
                exp.add(metric, "gauge", help_text, round(value * factor, 6), {"gpu": labels["gpu"]})
    for row in apps:
        values = dict(zip(APP_FIELDS, row))
        used = number(values.get("used_memory", ""))
        if used is None:
            continue
        pid = values.get("pid", "")
        exp.add("sparkctl_gpu_process_memory_bytes", "gauge",
                "GPU memory a process holds (nvidia-smi --query-compute-apps used_memory), bytes", int(used * MIB),
                {"pid": pid, "process": values.get("process_name", ""), "unit": unit_of(pid, proc)})
    exp.add("sparkctl_gpu_processes", "gauge", "compute processes nvidia-smi lists", len(apps))
    exp.add("sparkctl_gpu_facts_ok", "gauge", "1 when nvidia-smi answered both queries", ok)
    exp.add("sparkctl_gpu_facts_timestamp_seconds", "gauge", "when these GPU facts were read, unix time",
            round(time.time(), 3))
    return exp


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="the .prom file to write (atomically)")
    p.add_argument("--nvidia-smi", default="nvidia-smi")
    args = p.parse_args(argv)
    exp = collect(args.nvidia_smi)
    write_atomic(args.out, exp.text(), TEXTFILE_MODE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
