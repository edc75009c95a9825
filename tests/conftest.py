"""Shared fixtures: group data as the deploy sees it (raw, and typed through the check layer every entry point
uses), a throw-away bearer token, a resolved test lock. The one way a test builds typed settings: `typed(data)`, or
`changed(cfg, SETTING=value)` from typed ones (the gx10_cfg fixture is the shipped real box's)."""

from __future__ import annotations

import pytest

from sparkctl import REPO_ROOT
from sparkctl.check import load
from sparkctl.config import groupdata, schema

FAKE_LOCK = str(REPO_ROOT / "tests" / "fixtures" / "fake.lock.json")
# test secrets as strong as the check demands (at least 128 random bits): `openssl rand -hex 32`, and a
# secrets.token_urlsafe(32); never used anywhere but these tests
API_TOKEN = "0de8d57f275ee4a9635f11b06c4fb31750225c3ecad5c0087589d39bb7feb5f8"
SCRAPE_TOKEN = "KV_aZzLisdxrpG-5OnuXtVR8UdkGYiI7clxoE9AXbm0"


def pytest_collection_modifyitems(items):
    """Fast tests first, then the end-to-end scenarios (they share one converged pair of test hosts that must not
    meet another test's `sim up`/`sim down`), in the order each one's scenario marker gives (tests/e2e/conftest.py:
    SCENARIO_ORDER; the simulated Spark's own lifecycle first, before the shared pair is booted)."""
    def rank(item):
        if "/tests/e2e/" in str(item.fspath):
            from tests.e2e.conftest import scenario_rank

            return 1, scenario_rank(item)
        return 0, 0
    items.sort(key=rank)  # stable: file order kept within each rank


@pytest.fixture
def token_file(tmp_path, monkeypatch):
    path = tmp_path / "api_token"
    path.write_text(API_TOKEN + "\n")
    path.chmod(0o600)
    monkeypatch.setenv("SPARK_API_TOKEN_FILE", str(path))
    scrape = tmp_path / "scrape_token"  # the proxy's scrape paths have their own token (never the API token)
    scrape.write_text(SCRAPE_TOKEN + "\n")
    scrape.chmod(0o600)
    monkeypatch.setenv("SPARK_SCRAPE_TOKEN_FILE", str(scrape))
    monkeypatch.delenv("SPARK_HF_TOKEN_FILE", raising=False)
    monkeypatch.setenv("GX10_HOSTS", "")
    return path


@pytest.fixture
def gx10_data(token_file, tmp_path):
    """Merged all + gx10 group data (a real GX10), with the resolved test lock and secrets in tmp."""
    data = groupdata.load(["all", "gx10"])
    data["MODEL_LOCK_FILE"] = FAKE_LOCK
    data["SECRETS_DIR"] = str(tmp_path / "secrets")
    return data


def typed(data: dict) -> schema.GroupData:
    """The typed settings of raw group data, through the real validation (the schema's types and every cross-field
    rule, as every entry point reads them): a test that changes a setting changes the dict and validates it again,
    so a value the check refuses never reaches the code under test."""
    return load.typed(data)


def changed(cfg: schema.GroupData, **settings) -> schema.GroupData:
    """cfg with some settings changed, validated again (as an operator's --data would be)."""
    return typed({**cfg.model_dump(), **settings})


@pytest.fixture
def gx10_cfg(gx10_data) -> schema.GroupData:
    """gx10_data, typed."""
    return typed(gx10_data)


from tests.sim.conftest import hf_env, hub_server  # noqa: E402,F401  (the stand-in hub, for download tests)
