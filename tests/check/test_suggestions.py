"""Every refusal that suggests a value ("at least N", "at most N", "lower X to at most N") suggests one `check`
accepts (issue 41, class 5): each case below makes a refusal suggest a value, the test applies the suggestion, and
follows the next refusal's the same way, until the configuration passes. A suggestion refused in turn (the same
setting refused again), or advice that never reaches a configuration `check` accepts, fails the test.

`test_every_rule_that_suggests_a_value_has_a_case` scans the rules' source for a suggested bound, so a new rule that
suggests a value without a case here fails too."""

from __future__ import annotations

import inspect
import re

import pytest

from sparkctl.capacity import plan
from sparkctl.check import gateway, rules
from sparkctl.check.gateway import validate_gateway
from sparkctl.check.validate import validate_host
from sparkctl.config import groupdata
from sparkctl.errors import SettingError, SparkctlError
from sparkctl.fleet import placement
from sparkctl.fleet import validate as fleet_validate
from tests.conftest import FAKE_LOCK

BOXES = {"spark-1": "10.0.0.11", "spark-2": "10.0.0.12"}
GATEWAYS = {"gw-1": "10.0.0.21", "gw-2": "10.0.0.22"}
VIP = {"GATEWAY_VIP": "10.0.0.100", "GATEWAY_VIP_INTERFACE": "eth0"}
EMBED_FACTS = {"bge-m3": {"memory": {"full_attention_layers": 24, "kv_heads": 16, "head_dim": 64}}}
SUGGESTED = re.compile(r"(?:lower (?P<other>\S+) to )?at (?:least|most) (?:[A-Z_]+ = )?(?P<n>\d[\d,]*(?:\.\d+)?)"
                       r"|Largest KV budget that fits: (?P<kv>\d+(?:\.\d+)?) GiB.*?Change (?P<kv_setting>\S+) in", re.S)


def _number(text: str):
    text = text.replace(",", "")
    return float(text) if "." in text else int(text)


def _set(data: dict, setting: str, value) -> None:
    """data[setting] = value, where setting may name a mapping key or a list item (X['k'], X[1], X[0].field)."""
    m = re.fullmatch(r"(?P<name>[A-Z_0-9]+)(?:\[(?P<key>'[^']*'|\d+)\])?(?:\.(?P<field>\w+))?", setting)
    name, key, field = m["name"], m["key"], m["field"]
    if key is None:
        data[name] = value
        return
    container = data[name]
    container = dict(container) if isinstance(container, dict) else list(container)
    k = key.strip("'") if key.startswith("'") else int(key)
    container[k] = {**container[k], field: value} if field else value
    data[name] = container


def run(data: dict, front: bool) -> None:
    """The whole check, offline: every box (its fleet with it), then with `front` the gateways' (two, one VIP)."""
    boxes = {b: {**data, "ssh_hostname": a} for b, a in BOXES.items()}
    for box, d in boxes.items():
        validate_host(d, box, read_secrets=False, hosts=list(BOXES))
    if front:
        gws = {g: {**data, "ssh_hostname": a} for g, a in GATEWAYS.items()}
        for g in gws:
            validate_gateway(g, gws[g], boxes, gateways=gws, read_secrets=False)


CASES = [  # (id, the rule whose suggestion it follows, the change, a gateway in front, how a suggestion is applied)
    ("a router health timeout past the window", "router_health_window", {"ROUTER_HEALTH_TIMEOUT_S": 60}, False),
    ("both router health waits at their most", "router_health_window",
     {"ROUTER_HEALTH_INTERVAL_S": 60, "ROUTER_HEALTH_TIMEOUT_S": 60}, False),
    ("a front door's health window past a minute", "front_health_window",
     {"FRONT_HEALTH_INTERVAL_S": 30, "FRONT_HEALTH_TIMEOUT_S": 30}, True),
    ("a router wait below the window", "router_out_wait", {"ROUTER_OUT_WAIT_S": 5}, False),
    ("a router wait of 0 behind a gateway", "router_out_wait_behind", {"ROUTER_OUT_WAIT_S": 0}, True),
    ("a slower router health check", "router_out_wait", {"ROUTER_HEALTH_INTERVAL_S": 40}, True),
    ("a drain of 60 s on a real box", "box_waits", {"DRAIN_TIMEOUT_S": 60}, False),
    ("a batched-token budget of 1", "batched_tokens", {"CODER_MAX_NUM_BATCHED_TOKENS": 1}, False),
    ("a batched-token budget below the block", "coder_batch_floor", {"CODER_MAX_NUM_BATCHED_TOKENS": 8}, False),
    ("a scrape interval below its timeout", "scrape_timeout", {"PROMETHEUS_SCRAPE_INTERVAL_S": 5}, False),
    ("an embedder KV below one request", "embedders_hold_one_request",
     {"CATALOG_OVERRIDES": EMBED_FACTS, "EMBEDDERS": [{"model": "qwen3-embedding-0.6b", "kv_cache_gib": 2},
                                                      {"model": "bge-m3", "kv_cache_gib": 0.001}]}, False),
    ("an embedder KV below the floor", "_embedder_floor",
     {"EMBEDDERS": [{"model": "qwen3-embedding-0.6b", "kv_cache_gib": 1e-6}, {"model": "bge-m3", "kv_cache_gib": 2}]},
     False),
    ("sshd's memory floor beyond the OS reserve", "memory", {"SSHD_MEMORY_MIN": "64G"}, False),
    ("a VRRP priority step too large", "priorities", {**VIP, "VRRP_PRIORITY_FIRST": 100, "VRRP_PRIORITY_STEP": 100},
     True),
    ("a first retry wait longer than the longest", "retry_backoff", {"ROUTER_RETRY_INITIAL_BACKOFF_MS": 5000}, True),
    ("a last wave short of the fleet", "rollout_waves", {"ROLLOUT_WAVES": [1, 1]}, False),
    ("a pool of more boxes than the inventory", "place", {"FLEET_POOLS": {"qwen3.8-27b": 3}}, False),
    ("a KV budget the box cannot hold", "_refusal_message",
     {"CODER_KV_CACHE_GIB": {"qwen3.8-27b": 90, "laguna-s-2.1": 12}}, False),
    ("a pool's KV budget beyond its box", "memory_fits",
     {"FLEET_POOLS": {"laguna-s-2.1": 1, "qwen3.8-27b": 1},
      "CODER_KV_CACHE_GIB": {"qwen3.8-27b": 36, "laguna-s-2.1": 30}}, False),
]


def _apply(data: dict, e: SparkctlError) -> str:
    """Apply the refusal's suggested value; returns the setting it changed."""
    m = SUGGESTED.search(str(e).split("is not valid; expected", 1)[-1])
    assert m, f"no suggested value in: {e}"
    if m["kv"]:  # the capacity plan's advice (sparkctl/capacity/plan.py)
        _set(data, m["kv_setting"], _number(m["kv"]))
        return m["kv_setting"]
    setting, value = (m["other"] or getattr(e, "setting", "")), _number(m["n"])
    if setting == "SSHD_MEMORY_MIN":  # a systemd size, the suggestion in GiB
        value = f"{int(value)}G"
    elif re.fullmatch(r"ROLLOUT_WAVES\[\d+\]", setting):
        value = int(value)
    _set(data, setting, value)
    return setting


@pytest.mark.parametrize("case_id, rule, change, front", CASES, ids=[c[0] for c in CASES])
def test_a_suggested_value_is_one_check_accepts(case_id, rule, change, front, token_file):
    data = {**groupdata.load(["all", "gx10"]), "MODEL_LOCK_FILE": FAKE_LOCK, **change}
    followed = []
    for _ in range(4):
        try:
            run(data, front)
            break
        except SparkctlError as e:
            setting = _apply(data, e)
            assert setting not in followed, f"the suggestion for {setting} was refused in turn: {e}"
            followed.append(setting)
    else:
        pytest.fail(f"still refused after following {followed}")
    assert followed, "the change was not refused: the case does not reach its rule"


def _suggesting(module) -> set[str]:
    """Functions of `module` whose messages suggest a bound (at least/at most a number or a setting's value)."""
    found = set()
    for name, fn in inspect.getmembers(module, inspect.isfunction):
        if fn.__module__ != module.__name__:
            continue
        src = inspect.getsource(fn)
        if re.search(r'at (least|most) \{|at (least|most) [A-Z_]+ = \{|"at (least|most)"|to at most|Largest KV', src):
            found.add(name)
    return found


def test_every_rule_that_suggests_a_value_has_a_case():
    suggesting = set().union(*(_suggesting(m) for m in (rules, gateway, fleet_validate, placement, plan)))
    covered = {rule for _, rule, _, _ in CASES} | {"_window"}  # _window: router_ and front_health_window's
    assert suggesting - covered == set(), "a rule suggests a value no case here follows"
