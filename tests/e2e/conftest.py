"""End-to-end fixtures: two simulated Sparks (spark-1 = DGX OS flavour, spark-2 = plain Ubuntu flavour),
converged once by the README's own command (`pyinfra -y inventory.py deploy.py`) and shared by the scenarios.

Every e2e test is marked `e2e`; they need root, debootstrap and network namespaces (CI has them).
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from sparkctl import REPO_ROOT
from sparkctl.config import groupdata, hosts, secrets

BIN = Path(sys.executable).parent
TIMINGS: list[tuple[str, float]] = []


def pytest_collection_modifyitems(items):
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


def pytest_terminal_summary(terminalreporter):
    if TIMINGS:
        terminalreporter.section("simulated Spark timings")
        for name, secs in TIMINGS:
            terminalreporter.write_line(f"{name:60} {secs:8.1f} s")


def record(name: str, secs: float) -> None:
    TIMINGS.append((name, secs))
    print(f"TIMING {name}: {secs:.1f} s")


@dataclass
class Run:
    rc: int
    output: str
    seconds: float
    stdout: str = ""

    def failure(self) -> str:
        """What to show when a run failed: every error region, then the tail (the whole log is kept on disk)."""
        lines = self.output.splitlines()
        keep = set()
        for i, line in enumerate(lines):
            if "Error" in line or "error" in line or "refused" in line or "FAILED" in line:
                keep.update(range(max(0, i - 25), min(len(lines), i + 5)))
        errors = "\n".join(lines[i] for i in sorted(keep))
        return f"{errors[-12000:]}\n--- tail ---\n" + "\n".join(lines[-15:])


RUN_LOG_DIR = REPO_ROOT / ".sim" / "logs" / "e2e"


def pyinfra(*args: str, timeout: int = 2400) -> Run:
    env = dict(os.environ, GX10_HOSTS="", PYINFRA_PROGRESS="off")
    t0 = time.monotonic()
    r = subprocess.run([str(BIN / "pyinfra"), *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                       timeout=timeout)
    run = Run(r.returncode, r.stdout + r.stderr, time.monotonic() - t0, r.stdout)
    RUN_LOG_DIR.mkdir(parents=True, exist_ok=True)
    (RUN_LOG_DIR / f"{time.strftime('%H%M%S')}-{'_'.join(a.replace('/', '') for a in args)[:80]}.log").write_text(
        f"$ pyinfra {' '.join(args)}\nrc={run.rc} in {run.seconds:.1f} s\n{run.output}")
    return run


def sim_exec(name: str, command: str) -> str:
    from sparkctl.sim import api as sim

    return sim.exec_in(name, ["sh", "-c", command], check=True).stdout


@dataclass
class Spark:
    """What a client of a converged simulated Spark needs (also used by the bench e2e test)."""

    host: hosts.HostConn
    data: dict
    token: str
    ca: str

    def base_url(self, served_name: str) -> str:
        return f"https://{self.host.address}:{self.data['PROXY_PORT']}/{served_name}/v1"

    def client(self) -> httpx.Client:
        ctx = ssl.create_default_context(cafile=self.ca)
        return httpx.Client(verify=ctx, timeout=self.data["HEALTH_REQUEST_TIMEOUT_S"], trust_env=False)


@pytest.fixture(scope="session")
def sim_pair():
    from sparkctl.sim import api as sim

    # SPARKCTL_E2E_REUSE=1 (development only): keep a running pair and leave it running afterwards
    reuse = os.environ.get("SPARKCTL_E2E_REUSE") == "1" and sim.is_running("spark-1") and sim.is_running("spark-2")
    if not reuse:
        sim.down()
    t0 = time.monotonic()
    sim.up(hosts=2, flavors={"spark-1": "dgx", "spark-2": "ubuntu"})
    record("sim up: 2 hosts (rootfs, hub, models, wheelhouse, stand-ins)", time.monotonic() - t0)
    yield {h.name: h for h in hosts.sim_hosts()}
    if os.environ.get("SPARKCTL_E2E_REUSE") == "1":
        return
    t0 = time.monotonic()
    sim.down()
    record("sim down", time.monotonic() - t0)


@pytest.fixture(scope="session")
def first_converge(sim_pair) -> Run:
    run = pyinfra("-y", "inventory.py", "deploy.py")
    record("first converge, 2 bare hosts (pyinfra -y inventory.py deploy.py)", run.seconds)
    assert run.rc == 0, run.failure()
    return run


@pytest.fixture(scope="session")
def converged_spark(first_converge, sim_pair) -> Spark:
    data = groupdata.load(["all", "gx10", "sim"])
    return Spark(host=sim_pair["spark-1"], data=data, token=secrets.read_api_token(data),
                 ca=str(secrets.secrets_dir(data) / "pki" / "ca.pem"))
