"""Fixtures for the simulated Spark's tests (sparkctl/sim)."""

from __future__ import annotations

import os
import shutil
import threading

import pytest

from sparkctl.sim import util


@pytest.fixture(autouse=True, scope="session")
def _quiet():
    util.QUIET = True
    yield


@pytest.fixture
def hub_server(tmp_path):
    """A stand-in hub on 127.0.0.1:<free port> over tmp_path/hub; yields (root, url, throttle_file)."""
    from sparkctl.sim import hub

    root = tmp_path / "hub"
    root.mkdir()
    throttle = tmp_path / "throttle"
    srv = hub.make_server(root, "127.0.0.1", 0, throttle_file=throttle)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield root, f"http://127.0.0.1:{srv.server_address[1]}", throttle
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def hf_env(tmp_path):
    """env(endpoint) -> environment for a huggingface_hub subprocess (it reads these at import time)."""

    def env(endpoint: str) -> dict:
        e = dict(os.environ, HF_ENDPOINT=endpoint, HF_HOME=str(tmp_path / "hf_home"), HF_HUB_DISABLE_XET="1",
                 HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HUB_DISABLE_TELEMETRY="1", NO_PROXY="127.0.0.1,localhost")
        e.pop("HF_TOKEN", None)
        return e

    return env


def have(*tools: str) -> bool:
    return all(shutil.which(t, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") for t in tools)
