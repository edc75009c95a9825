"""The check renders every file the deploy writes and runs the real validators on it (sparkctl/check/render.py):
the shipped configurations pass in every topology, a refused line is blamed on the setting that produced it, a
validator that is not installed is reported as skipped (never as passed), the token file's contents never reach a
message, and vLLM's own parser is used when it is installed here."""

from __future__ import annotations

import importlib.util
import shutil
import threading
import time

import pytest

from sparkctl.check import render as check_render
from sparkctl.check import tools as check_tools
from sparkctl.check.blame import culprits
from sparkctl.check.load import shipped
from sparkctl.check.validate import validate_host
from sparkctl.config import groupdata
from sparkctl.errors import SettingError
from sparkctl.render import box_files
from tests.conftest import API_TOKEN, FAKE_LOCK, SCRAPE_TOKEN, changed

needs_tools = pytest.mark.skipif(not (shutil.which("nginx") and shutil.which("systemd-analyze")),
                                 reason="nginx and systemd-analyze are the validators under test")


@needs_tools
@pytest.mark.parametrize("groups", [["all", "gx10"], ["all", "gx10", "sim"]])
@pytest.mark.parametrize("topology", [{}, {"SPARK_TOPOLOGY": "tensor-parallel"},
                                      {"SPARK_TOPOLOGY": "tensor-parallel", "TP_BACKEND": "ray"}],
                         ids=["single", "tensor-parallel", "ray"])
def test_the_shipped_configurations_render_and_validate(groups, topology, token_file, tmp_path):
    data = {**groupdata.load(groups), "MODEL_LOCK_FILE": FAKE_LOCK, "SECRETS_DIR": str(tmp_path), **topology}
    hosts = ["spark-1", "spark-2"] if topology else ["gx10"]
    for host in hosts:
        s = validate_host(data, host, hosts=hosts)
        notes = "\n".join(s.notes)
        assert all(svc.unit in notes for svc in s.services) and "sparkctl-memory.conf" in notes
        assert ("nginx -t: sparkctl.conf, sparkctl-token.conf" in notes) == (host != "spark-2")  # worker: no proxy
        assert "earlyoom: --prefer/--avoid" in notes
        if topology.get("TP_BACKEND") == "ray":
            assert "ray-head.service" in notes or "ray-worker.service" in notes
        if importlib.util.find_spec("vllm") is None:
            assert "vLLM's argument parser: skipped" in notes and "before anything stops" in notes


def test_blame_follows_the_line_to_the_setting(gx10_cfg):
    def render(cfg):
        return f"a {cfg.PROXY_READ_TIMEOUT_S}\nb {cfg.PROXY_SEND_TIMEOUT_S} {cfg.PROXY_PORT}\nc constant\n"

    assert culprits(render, gx10_cfg, 1, shipped()) == ["PROXY_READ_TIMEOUT_S"]
    assert set(culprits(render, gx10_cfg, 2, shipped())) == {"PROXY_SEND_TIMEOUT_S", "PROXY_PORT"}
    changed_port = changed(gx10_cfg, PROXY_PORT=8443)
    assert culprits(render, changed_port, 2, shipped())[0] == "PROXY_PORT"  # the one the operator changed
    assert culprits(render, gx10_cfg, 3, shipped()) == []


@needs_tools
def test_a_refused_line_of_a_unit_names_its_setting(gx10_data):
    with pytest.raises(SettingError) as e:
        validate_host({**gx10_data, "SERVICE_STOP_TIMEOUT_S": 10**5, "SERVICE_RESTART_SEC": 1e-7}, "gx10")
    text = str(e.value)
    assert text.startswith("SERVICE_RESTART_SEC = 1e-07 is not valid") and "RestartSec=1e-07" in text
    assert "/tmp/" not in text and "sparkctl-check" not in text  # the private root is not the operator's business


def test_a_validator_not_installed_is_skipped_and_said_so(gx10_data, monkeypatch):
    monkeypatch.setattr(check_tools, "available", lambda tool: False)
    twice = {"coder": ["/v1/models", "/v1/models"], "embedder": ["/v1/models"]}  # what only nginx -t refuses
    notes = validate_host({**gx10_data, "PROXY_ROUTES": twice}, "gx10").notes
    said = " is not installed on this control machine: apt-get install the packages of scripts/control-packages.txt)"
    assert f"nginx -t: skipped (nginx{said}" in notes
    assert f"systemd-analyze verify: skipped (systemd-analyze{said}" in notes


@needs_tools
def test_the_token_file_never_reaches_a_message(gx10_data, monkeypatch):
    monkeypatch.setattr(box_files, "tokens", lambda cfg, api, scrape: f"map $x $y {{ \"{api}\" 1; bogus {scrape};\n")
    with pytest.raises(SettingError) as e:
        validate_host(gx10_data, "gx10")
    text = str(e.value)
    assert "nginx -t" in text and "sparkctl-token.conf" in text and "not shown" in text
    assert API_TOKEN not in text and SCRAPE_TOKEN not in text


def test_vllms_own_parser_is_used_when_installed(gx10_data, monkeypatch):
    """With vLLM importable (a stand-in here), each service's arguments go through check_vllm_args.check, and a
    flag it refuses is blamed on the free-form list that holds it."""
    from sparkctl.box import check_vllm_args

    seen = {}

    def check(argvs):
        seen.update(argvs)
        return {unit: (["unrecognized arguments: --kv-cache-bytes"] if "--kv-cache-bytes" in argv else [])
                for unit, argv in argvs.items()}

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else
                        real_find_spec(name, *a))
    monkeypatch.setattr(check_vllm_args, "check", check)
    notes = validate_host(gx10_data, "gx10").notes
    assert "vLLM's argument parser: every service's arguments" in notes
    assert seen["vllm-coder.service"][:2][0] == "serve" and "--max-model-len" in seen["vllm-coder.service"]
    with pytest.raises(SettingError, match=r"^VLLM_COMMON_ARGS\[1\] = '--kv-cache-bytes' .*unrecognized arguments"):
        validate_host({**gx10_data, "VLLM_COMMON_ARGS": ["--enforce-eager", "--kv-cache-bytes", "1"]}, "gx10")


def test_identical_hosts_are_validated_once(gx10_data, monkeypatch):
    calls = []
    real = check_tools.systemd
    monkeypatch.setattr(check_render, "_CACHE", {})
    monkeypatch.setattr(check_tools, "systemd", lambda root, texts: calls.append(root) or real(root, texts))
    validate_host(gx10_data, "gx10")
    validate_host(gx10_data, "gx10")
    assert len(calls) <= 1  # 0 where systemd-analyze is not installed


def test_hosts_checked_at_once_run_each_validator_once(monkeypatch, tmp_path):
    """The deploy checks every host at once (a greenlet each, switching while a validator runs): a host whose files
    are the same waits for the first host's run and gets its result; different files get their own run."""
    monkeypatch.setattr(check_render, "_CACHE", {})
    monkeypatch.setattr(check_render, "_RUNNING", {})
    calls = []

    def slow_validator(root, texts):
        calls.append(texts["a.conf"])
        time.sleep(0.2)  # long enough for every other host to arrive meanwhile
        return []

    def host(i: int, text: str) -> threading.Thread:
        files = {"a.conf": check_render.BoxFile("/etc/a.conf", lambda cfg: text)}
        return threading.Thread(target=check_render.validated, args=("tool", tmp_path / f"host-{i}", files, None,
                                                                      slow_validator))

    hosts = [host(i, "same\n") for i in range(3)] + [host(3, "other\n")]
    for t in hosts:
        t.start()
    for t in hosts:
        t.join()
    assert sorted(calls) == ["other\n", "same\n"]
