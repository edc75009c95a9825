"""The ownership rule (issue 41), typed once in the settings schema (sparkctl/config/schema_types.py): every setting
that names a file the deploy writes, a directory it owns, an account it creates, an nftables table or unit it
replaces, or a program it runs as root goes through one of the ownership types (each carries an `Owned` marker).

A setting whose name says it is of such a kind (*_PATH, *_USER, *_DIR, *_FILE, *_TABLE, *_UNIT, *_PROGRAM, ...)
must carry the marker or be listed below with why it is none of them; so a setting of that kind added next month
without the rule fails here. The refusals themselves (several values per kind) are in tests/check/test_ownership.py.
"""

from __future__ import annotations

import re
from typing import Annotated

import pytest
from pydantic import BaseModel

from sparkctl.config import schema
from sparkctl.config import schema_types as t

# what a setting's name says it names: a path, an account, a table, a unit or a program
KIND_NAMES = re.compile(r"_(PATH|USER|DIR|DIRS|FILE|TABLE|UNIT|UNITS|PROGRAM|SCRIPT|CONF|HOME|STORE|LIBRARY|SMI|"
                        r"STANDIN|PREPARE)$")

# settings of such a name that are none of the deploy's own on the host, each with why
NOT_OWNED = {
    "MODEL_LOCK_FILE": "a file on the control machine (read; `lock refresh` writes it there)",
    "SECRETS_DIR": "a directory on the control machine (checked by config/secrets.py: its owner alone may write)",
    "GATEWAY_HANDOFF_DIR": "a directory on the control machine (check/rules.py handoff_dir)",
    "REHEARSE_OUT_DIR": "a directory on the control machine",
    "TLS_CERT_FILE": "the operator's certificate on the control machine (read, then copied into the deploy's TLS dir)",
    "TLS_KEY_FILE": "the operator's key on the control machine (read, then copied into the deploy's TLS dir)",
    "VRRP_PASSWORD_FILE": "a file name in SECRETS_DIR, on the control machine",
    "PROMETHEUS_TOKEN_FILE": "where the cluster's Prometheus mounts the scrape token: a path inside its pod",
    "PROMETHEUS_CA_FILE": "where the cluster's Prometheus mounts the CA: a path inside its pod",
    "DGX_RELEASE_FILE": "read only (whether the box runs DGX OS): the deploy never writes it",
    "SCRAPE_NODE_PATH": "a URL path segment on the proxy, not a file",
    "ROUTER_SCRAPE_PATH": "a URL path segment on the front, not a file",
    "ROUTER_HEALTH_PATH": "a URL path on each box's proxy, not a file",
    "FRONT_HEALTH_ROUTER_PATH": "a URL path of the router, not a file",
    "CHECKPOINT_SYNC_USER": "root by its type (Literal): the account whose authorized_keys holds the link's rrsync "
                            "entry; the deploy creates no account there",
}


def _kinds(annotation, metadata) -> set[str]:
    return t.owned_kinds(Annotated[(annotation, *metadata)] if metadata else annotation)


def unowned(model: type[BaseModel]) -> list[str]:
    """The settings whose name says they name a path, account, table, unit or program, typed without the
    ownership rule and not listed in NOT_OWNED."""
    return [name for name, field in model.model_fields.items()
            if KIND_NAMES.search(name) and name not in NOT_OWNED
            and not _kinds(field.annotation, field.metadata)]


def test_every_setting_of_an_owned_kind_goes_through_the_ownership_rule():
    assert unowned(schema.GroupData) == []


def test_the_exemptions_name_settings_that_exist():
    assert set(NOT_OWNED) <= set(schema.GroupData.model_fields)


def test_a_new_setting_of_that_kind_without_the_rule_fails_the_test():
    """The check itself can fail: a setting added with a plain path type is caught, one typed owned is not."""
    class Later(schema.GroupData):
        GATEWAY_EXTRA_CONF_FILE: t.AbsPath = "/etc/x"
        GATEWAY_METRICS_USER: t.pattern(r"^[a-z]+$", "a user") = "x"
        GATEWAY_OWNED_FILE: t.owned_file() = "/etc/sparkctl/x"

    assert unowned(Later) == ["GATEWAY_EXTRA_CONF_FILE", "GATEWAY_METRICS_USER"]
    assert unowned(schema.GroupData) == []


@pytest.mark.parametrize("setting, kind", [
    ("SERVICE_USER", "account"), ("ROUTER_USER", "account"), ("BRIDGE_FIREWALL_TABLE", "name"),
    ("KEEPALIVED_CONF", "file"), ("FRONT_HEALTH_SCRIPT", "file"), ("BRIDGE_FIREWALL_FILE", "file"),
    ("CX7_NETPLAN_FILE", "file"), ("NODE_EXPORTER_DEFAULTS_FILE", "file"), ("ACCEPTANCE_HISTORY_FILE", "file"),
    ("VLLM_DEVICE_PREPARE", "program"), ("NVIDIA_SMI", "program"), ("UNIFIED_MEMORY_STANDIN", "program"),
    ("TRITON_PTXAS_BLACKWELL_PATH", "program"), ("NCCL_SYSTEM_LIBRARY", "program"), ("CUDA_HOME", "program"),
    ("ROUTER_HOME", "dir"), ("SPARKCTL_HOME", "dir"), ("ENV_DIR", "dir"), ("DRAIN_DIR", "dir"),
])
def test_each_owned_setting_declares_its_kind(setting, kind):
    field = schema.GroupData.model_fields[setting]
    assert kind in _kinds(field.annotation, field.metadata)
