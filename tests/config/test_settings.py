"""Settings are typed once: the schema's frozen GroupData keeps each value as validated (a whole number stays an
int), the check layer builds HostConfig (catalog resolved once, the host's address) and Settings from it, tools off
the deploy path need no lock and no secrets, and no code reads a setting past it (no fallback, no second catalog,
no second GIB)."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from sparkctl import REPO_ROOT
from sparkctl.__main__ import main
from sparkctl.check.load import host_config, load
from sparkctl.check.validate import validate_host
from sparkctl.config import catalog, groupdata, hosts, lock
from sparkctl.config.schema import GroupData
from sparkctl.errors import SettingError
from tests.conftest import FAKE_LOCK, changed


def test_settings_are_typed_as_validated_and_frozen(gx10_cfg):
    assert type(gx10_cfg.DRAIN_TIMEOUT_S) is int and gx10_cfg.DRAIN_TIMEOUT_S == 1800  # a float setting given 1800
    assert str(gx10_cfg.PROXY_READ_TIMEOUT_S) == "7200"  # what nginx, systemd and rollout.py are given
    assert type(changed(gx10_cfg, DRAIN_TIMEOUT_S=12.5).DRAIN_TIMEOUT_S) is float
    assert gx10_cfg.EMBEDDERS[0].model == "qwen3-embedding-0.6b" and gx10_cfg.EMBEDDERS[0].kv_cache_gib == 2
    with pytest.raises(ValidationError, match="frozen"):
        gx10_cfg.CODER_PORT = 9000
    with pytest.raises(SettingError, match="DRAIN_TIMEOUT_S = -1 is not valid"):
        changed(gx10_cfg, DRAIN_TIMEOUT_S=-1)


def test_settings_are_read_as_attributes_only(gx10_cfg):
    with pytest.raises(TypeError):
        gx10_cfg["CODER_PORT"]  # no item access: a setting is an attribute, checked by the type checker too
    assert not hasattr(gx10_cfg, "get")  # no fallback can be written against it


def test_the_check_layer_resolves_the_catalog_once_per_host(gx10_data, monkeypatch):
    calls = []
    resolve = catalog.resolve
    monkeypatch.setattr(catalog, "resolve", lambda overrides=None, models=None: calls.append(overrides)
                        or resolve(overrides, models))
    s = validate_host({**gx10_data, "ssh_hostname": "10.0.0.5"}, "gx10")
    assert len(calls) == 1
    assert isinstance(s.cfg, GroupData) and s.coding_model is s.catalog["qwen3.8-27b"] is s.coder.model
    assert (s.host_name, s.address) == ("gx10", "10.0.0.5")
    assert validate_host(gx10_data, "gx10").address == "gx10"  # no ssh_hostname: the inventory name


def test_the_catalog_carries_the_hosts_overrides(token_file, tmp_path):
    data = {**groupdata.load(["all", "gx10", "sim"]), "MODEL_LOCK_FILE": FAKE_LOCK, "SECRETS_DIR": str(tmp_path)}
    s = validate_host(data, "spark-1")
    tiny = s.catalog["qwen3.8-27b"].checkpoint.repo
    assert tiny != catalog.CATALOG["qwen3.8-27b"].checkpoint.repo and s.coder.checkpoint.repo == tiny


def test_tools_load_settings_without_a_lock_or_secrets(monkeypatch, tmp_path, capsys):
    """`plan` (and bench, status, sim, lock) read the first half of the check layer: the committed lock has no
    resolved commit and no secret exists, and a real GX10's data still loads and plans; the deploy's whole check
    refuses that same data, naming the lock."""
    monkeypatch.setenv("SPARK_API_TOKEN_FILE", str(tmp_path / "no-token"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    config = load(["all", "gx10"])
    assert config.cfg.MODEL_LOCK_FILE == "models.lock.json" and config.coding_model.key == "qwen3.8-27b"
    assert main(["plan", "--groups", "all,gx10", "--json"]) == 0
    assert '"schema": "sparkctl.plan/1"' in capsys.readouterr().out
    with pytest.raises(SettingError, match="MODEL_LOCK_FILE models.lock.json"):
        validate_host(groupdata.load(["all", "gx10"]), "gx10", read_secrets=False)


def test_a_tool_merges_the_inventory_hosts_own_data(monkeypatch):
    monkeypatch.setenv("SPARK_CODING_MODELS", "spark-2=laguna-s-2.1")
    monkeypatch.setenv("GX10_HOSTS", "spark-1,spark-2")
    host = hosts.find("spark-2")
    config = load(["all", "gx10"], host)
    assert config.cfg.CODING_MODEL == "laguna-s-2.1" and (config.host_name, config.address) == ("spark-2", "spark-2")
    with pytest.raises(SettingError, match="CODER_PORT = 0 is not valid"):
        load(["all", "gx10"], host, overrides={"CODER_PORT": 0})


def test_every_entry_point_reads_settings_through_the_check_layer(gx10_data, gx10_cfg):
    """The cross-field rules run wherever settings are read, not only in `check`: what `plan`, `bench`, `status`,
    `sim` and `lock` read refuses two services on one port as the deploy does; and nothing but the check layer
    builds the typed settings or their catalog."""
    config = host_config(gx10_data)
    assert config.cfg == gx10_cfg and config.catalog == lock.with_facts(
        catalog.resolve(gx10_data["CATALOG_OVERRIDES"], gx10_data["CATALOG_MODELS"]), gx10_cfg)
    with pytest.raises(SettingError, match="PROXY_PORT = 8000 is not valid; expected a port not already used by "
                                           "CODER_PORT"):
        host_config({**gx10_data, "PROXY_PORT": 8000})
    with pytest.raises(SettingError, match="PROXY_PORT = 8000"):
        load(["all", "gx10"], overrides={"PROXY_PORT": 8000})
    assert set(offenders(r"\bschema\.validate\(|\bwith_catalog\(")) == {"sparkctl/check/load.py",
                                                                         "sparkctl/config/settings.py"}


# --- no code reads a setting past the typed object --------------------------------------------------------------------

SOURCES = [p for p in [*(REPO_ROOT / "sparkctl").rglob("*.py"), *(REPO_ROOT / "tasks").rglob("*.py"),
                       REPO_ROOT / "deploy.py"] if "sparkctl/box/" not in str(p)]  # stdlib-only box scripts
# modules another branch is rewriting now; the lead empties this list when it merges them
NOT_YET_CONVERTED: dict[str, str] = {}  # files still reading raw group data (none left)


def offenders(pattern: str) -> dict[str, list[str]]:
    """{file: ["line: text"]} of every source line matching pattern."""
    found: dict[str, list[str]] = {}
    for p in SOURCES:
        rel = str(p.relative_to(REPO_ROOT))
        for n, line in enumerate(p.read_text().splitlines(), 1):
            if re.search(pattern, line):
                found.setdefault(rel, []).append(f"{n}: {line.strip()}")
    return found


def test_no_setting_is_read_with_a_fallback():
    names = "|".join(GroupData.model_fields)
    found = offenders(rf'\.get\(\s*["\']({names})["\']')
    assert set(found) <= set(NOT_YET_CONVERTED), {k: v for k, v in found.items() if k not in NOT_YET_CONVERTED}
    assert set(NOT_YET_CONVERTED) <= set(found), "converted: remove it from NOT_YET_CONVERTED"


def test_the_catalog_is_resolved_in_one_place_and_gib_defined_once():
    resolved = offenders(r"\bcatalog(_mod)?\.resolve\(")
    assert set(resolved) - set(NOT_YET_CONVERTED) == {"sparkctl/config/settings.py"}, resolved
    assert len(resolved["sparkctl/config/settings.py"]) == 1
    defined = offenders(r"^\s*GIB\s*=")
    assert set(defined) == {"sparkctl/config/quantities.py"}, defined
