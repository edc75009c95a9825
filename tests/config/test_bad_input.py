"""Bad input is refused before the host is touched, with a message naming the setting, the value and what is
valid, and no traceback. Table-driven: each case changes a valid configuration in one way, the way an operator
would (`--data KEY=VALUE`, an edited group_data file, a secret file, a TLS pair), and runs it twice:

- through `python -m sparkctl check` (in process): exit status 2, the words on stderr, no traceback;
- through the whole deploy against pyinfra's @fake connector: not one command reaches the host, same words.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from sparkctl import REPO_ROOT
from sparkctl.__main__ import main
from sparkctl.check import validate_host as validate
from sparkctl.config import groupdata, pki
from sparkctl.config.quantities import GIB
from tasks.preflight import check_facts
from tests.conftest import FAKE_LOCK

ADDRESS = "gx10.test"  # the box's address (ssh_hostname) in every case: what a TLS certificate must name


@dataclass
class Case:
    id: str
    words: list[str]  # each must be in the message
    data: dict = field(default_factory=dict)  # --data overrides (python values; encoded as pyinfra parses them)
    prepare: object = None  # fn(tmp) -> ({--data overrides}, {environment}) for files: secrets, locks, TLS pairs
    gx10_py: object = None  # fn(text) -> text: an edit of group_data/gx10.py
    raw: list[str] = field(default_factory=list)  # raw --data arguments (pyinfra refuses some itself)
    fake: bool = False  # also run through the @fake deploy (one or two of each kind: ~0.7 s of CPU each)


def _cli(value) -> str:
    """A --data value that pyinfra's parse_cli_arg turns back into `value`."""
    from sparkctl.config.groupdata import parse_data_value
    if isinstance(value, str) and parse_data_value(value) == value:
        return value
    return json.dumps(value)


def _token(text: str, mode: int = 0o600, env: str = "SPARK_API_TOKEN_FILE"):
    def prepare(tmp):
        p = tmp / f"token-{env}"
        p.write_text(text)
        p.chmod(mode)
        return {}, {env: str(p)}
    return prepare


def _lock(mutate, dirname: str = "sim-dir"):
    def prepare(tmp):
        lock = json.loads(Path(FAKE_LOCK).read_text())
        mutate(lock["checkpoints"]["unsloth/Qwen3.8-27B-NVFP4"])
        p = tmp / dirname / "models.lock.json"  # the name the real and the simulated lock share
        p.parent.mkdir()
        p.write_text(json.dumps(lock))
        return {"MODEL_LOCK_FILE": str(p)}, {}
    return prepare


def _cert(tmp: Path, name: str, names: list[str], issuer=None, days: tuple[int, int] = (-1, 30)):
    """A certificate (issued by `issuer` = (cert, key), else self-signed) and its key, written to tmp."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.timezone.utc)
    icert, ikey = issuer or (None, key)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(icert.subject if icert else subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now + dt.timedelta(days=days[0])).not_valid_after(now + dt.timedelta(days=days[1]))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
            .sign(ikey, hashes.SHA256()))
    pem = cert.public_bytes(serialization.Encoding.PEM)
    kpem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
    (tmp / f"{name}.pem").write_bytes(pem)
    (tmp / f"{name}.key").write_bytes(kpem)
    (tmp / f"{name}.key").chmod(0o600)
    return cert, key


def _tls(build):
    def prepare(tmp):
        cert_file, key_file = build(tmp)
        return {"TLS_CERT_FILE": str(cert_file), "TLS_KEY_FILE": str(key_file)}, {}
    return prepare


def _tls_good(tmp, names=(ADDRESS,)):
    chain, key, _ = pki.ensure_server_cert(tmp / "pki", "box", list(names))
    return chain, key


def _tls_mismatch(tmp):
    chain, _ = _tls_good(tmp)
    _cert(tmp, "other", [ADDRESS])
    return chain, tmp / "other.key"


def _tls_expired(tmp):
    _cert(tmp, "old", [ADDRESS], days=(-400, -35))
    return tmp / "old.pem", tmp / "old.key"


def _tls_broken_chain(tmp):
    ca = _cert(tmp, "ca-one", ["ca-one"])
    _cert(tmp, "ca-two", ["ca-two"])
    _cert(tmp, "leaf", [ADDRESS], issuer=ca)
    (tmp / "chain.pem").write_bytes((tmp / "leaf.pem").read_bytes() + (tmp / "ca-two.pem").read_bytes())
    return tmp / "chain.pem", tmp / "leaf.key"


def _tls_wrong_name(tmp):
    return _tls_good(tmp, names=("elsewhere.test",))


def _tls_open_key(tmp):
    chain, key = _tls_good(tmp)
    key.chmod(0o644)
    return chain, key


def _tls_encrypted_key(tmp):
    chain, key = _tls_good(tmp)
    k = serialization.load_pem_private_key(key.read_bytes(), password=None)
    key.write_bytes(k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.BestAvailableEncryption(b"secret")))
    return chain, key


def _drop_line(prefix):
    return lambda text: "\n".join(line for line in text.splitlines() if not line.startswith(prefix)) + "\n"


def _rename(old, new):
    return lambda text: text.replace(f"{old} = ", f"{new} = ", 1)


EMBED_FACTS = {"bge-m3": {"memory": {"full_attention_layers": 24, "kv_heads": 16, "head_dim": 64}}}

CASES = [
    # --- setting names -----------------------------------------------------------------------------------------
    Case("unknown setting via --data", ["CODING_MODLE", "laguna-s-2.1", "known setting", "CODING_MODEL"],
         data={"CODING_MODLE": "laguna-s-2.1"}, fake=True),
    Case("unknown setting in gx10.py", ["CODING_MODLE", "qwen3.8-27b", "known setting", "CODING_MODEL"],
         gx10_py=_rename("CODING_MODEL", "CODING_MODLE")),
    Case("missing CODING_MODEL line", ["CODING_MODEL", "<not set>", "catalog key", "group_data"],
         gx10_py=_drop_line("CODING_MODEL"), fake=True),
    Case("unknown key in an EMBEDDERS entry", ["EMBEDDERS[0].kv_cachegib", "known setting", "kv_cache_gib"],
         data={"EMBEDDERS": [{"model": "bge-m3", "kv_cachegib": 2}]}),
    Case("unknown pyinfra-like key", ["ssh_hostnme", "known setting", "ssh_hostname"], data={"ssh_hostnme": "x"}),
    # --- models --------------------------------------------------------------------------------------------------
    Case("unknown CODING_MODEL", ["CODING_MODEL", "llama-9000", "qwen3.8-27b", "laguna-s-2.1"],
         data={"CODING_MODEL": "llama-9000"}),
    Case("model key in the wrong case", ["CODING_MODEL", "Qwen3.8-27B", "Did you mean 'qwen3.8-27b'"],
         data={"CODING_MODEL": "Qwen3.8-27B"}),
    Case("coder used as embedder", ["EMBEDDERS[0].model", "qwen3.8-27b", "bge-m3"],
         data={"EMBEDDERS": [{"model": "qwen3.8-27b", "kv_cache_gib": 2}, {"model": "bge-m3", "kv_cache_gib": 2}]}),
    Case("same embedder twice", ["EMBEDDERS[1].model", "bge-m3", "not already listed as EMBEDDERS[0]"],
         data={"EMBEDDERS": [{"model": "bge-m3", "kv_cache_gib": 2}, {"model": "bge-m3", "kv_cache_gib": 2}]}),
    Case("KV budget key typo", ["CODER_KV_CACHE_GIB key 'qwen3.8-27B'", "Did you mean 'qwen3.8-27b'"],
         data={"CODER_KV_CACHE_GIB": {"qwen3.8-27B": 36, "laguna-s-2.1": 12}}),
    Case("scalar KV budget", ["CODER_KV_CACHE_GIB = 36", "mapping of coding model keys", "valid dictionary"],
         data={"CODER_KV_CACHE_GIB": 36}),
    Case("KV budget not a number", ["CODER_KV_CACHE_GIB['qwen3.8-27b']", "lots", "GiB greater than 0"],
         data={"CODER_KV_CACHE_GIB": {"qwen3.8-27b": "lots", "laguna-s-2.1": 12}}),
    Case("KV budget does not fit", ["CODER_KV_CACHE_GIB", "90", "Largest KV budget that fits"],
         data={"CODER_KV_CACHE_GIB": {"qwen3.8-27b": 90, "laguna-s-2.1": 12}}),
    Case("embedder KV below one request", ["EMBEDDERS[1].kv_cache_gib", "0.001", "one 8,192-token request"],
         data={"CATALOG_OVERRIDES": EMBED_FACTS, "EMBEDDERS": [{"model": "qwen3-embedding-0.6b", "kv_cache_gib": 2},
                                                              {"model": "bge-m3", "kv_cache_gib": 0.001}]}, fake=True),
    Case("embedder KV zero", ["EMBEDDERS[0].kv_cache_gib", "0", "greater than 0"],
         data={"EMBEDDERS": [{"model": "qwen3-embedding-0.6b", "kv_cache_gib": 0}, {"model": "bge-m3",
                                                                                 "kv_cache_gib": 2}]}),
    Case("catalog override typo", ["CATALOG_OVERRIDES['qwen3.8-27b']", "max_len", "max_model_len"],
         data={"CATALOG_OVERRIDES": {"qwen3.8-27b": {"max_len": 5}}}),
    Case("catalog override of the wrong type", ["CATALOG_OVERRIDES['qwen3.8-27b']['max_model_len']", "big", "int"],
         data={"CATALOG_OVERRIDES": {"qwen3.8-27b": {"max_model_len": "big"}}}, fake=True),
    Case("catalog memory fact of the wrong type", ["['memory']['resident_gib']", "'a'", "float"],
         data={"CATALOG_OVERRIDES": {"qwen3.8-27b": {"memory": {"resident_gib": "a"}}}}),
    Case("catalog override for an unknown model", ["CATALOG_OVERRIDES", "qwen3.8", "Did you mean 'qwen3.8-27b'"],
         data={"CATALOG_OVERRIDES": {"qwen3.8": {"max_model_len": 5}}}),
    # --- types and ranges ----------------------------------------------------------------------------------------
    Case("zero port", ["CODER_PORT = 0", "1 to 65535"], data={"CODER_PORT": 0}),
    Case("negative port", ["PROXY_PORT = -443", "1 to 65535"], data={"PROXY_PORT": -443}),
    Case("port as a string", ["CODER_PORT = '8000'", "1 to 65535", "valid integer"], data={"CODER_PORT": "8000"}),
    Case("non-integer where an integer belongs", ["CODER_MAX_NUM_SEQS = 'eight'", "whole number"],
         data={"CODER_MAX_NUM_SEQS": "eight"}),
    Case("duplicate ports blame the changed one", ["EMBEDDER_PORTS[1] = 8000", "not already used by CODER_PORT"],
         data={"EMBEDDER_PORTS": [8001, 8000]}),
    Case("port clash names the setting the operator changed", ["CODER_PORT = 8001", "used by EMBEDDER_PORTS[0]"],
         data={"CODER_PORT": 8001}),
    Case("port count", ["EMBEDDER_PORTS", "2 ports"], data={"EMBEDDER_PORTS": [8001]}),
    Case("zero start limit", ["SERVICE_START_LIMIT_BURST = 0", "greater than 0"],
         data={"SERVICE_START_LIMIT_BURST": 0}),
    Case("negative poll interval", ["HEALTH_POLL_INTERVAL_S = -1", "seconds greater than 0"],
         data={"HEALTH_POLL_INTERVAL_S": -1}),
    Case("zero restart delay", ["SERVICE_RESTART_SEC = 0", "seconds greater than 0"], data={"SERVICE_RESTART_SEC": 0}),
    Case("bool where a number belongs", ["PROXY_READ_TIMEOUT_S = True", "seconds"],
         data={"PROXY_READ_TIMEOUT_S": True}),
    Case("OOM score above 1000", ["VLLM_OOM_SCORE_ADJUST = 1001", "-1000 to 1000"],
         data={"VLLM_OOM_SCORE_ADJUST": 1001}),
    Case("OOM score below -1000", ["SSHD_OOM_SCORE_ADJUST = -2000", "-1000 to 1000"],
         data={"SSHD_OOM_SCORE_ADJUST": -2000}),
    Case("list setting given as a string", ["SYSTEM_PACKAGES = 'nginx curl'", "list of Debian package names"],
         data={"SYSTEM_PACKAGES": "nginx curl"}),
    Case("unknown topology", ["SPARK_TOPOLOGY", "mesh", "replicas", "tensor-parallel"],
         data={"SPARK_TOPOLOGY": "mesh"}),
    Case("tensor-parallel on one box", ["SPARK_TOPOLOGY", "tensor-parallel", "two hosts"],
         data={"SPARK_TOPOLOGY": "tensor-parallel"}),
    # --- dangerous values ----------------------------------------------------------------------------------------
    Case("service user root", ["SERVICE_USER = 'root'", "not root"], data={"SERVICE_USER": "root"}, fake=True),
    Case("one key for checkpoint copy and peer status", ["TP_PEER_KEY = 'cx7-sync'", "CHECKPOINT_SYNC_KEY"],
         data={"TP_PEER_KEY": "cx7-sync"}),
    Case("relative model store", ["MODEL_STORE = 'models'", "absolute path other than /"],
         data={"MODEL_STORE": "models"}),
    Case("empty model store", ["MODEL_STORE = ''", "absolute path other than /"], data={"MODEL_STORE": ""}),
    Case("model store at /", ["MODEL_STORE = '/'", "absolute path other than /"], data={"MODEL_STORE": "/"}),
    Case("state dir equal to the model store", ["STATE_DIR = '/srv/models'", "other than MODEL_STORE"],
         data={"STATE_DIR": "/srv/models"}),
    Case("vLLM listening beyond loopback", ["LISTEN_ADDRESS = '0.0.0.0'", "loopback",
                                            "LISTEN_ADDRESS_NOT_LOOPBACK_OK"], data={"LISTEN_ADDRESS": "0.0.0.0"}),
    Case("server name with ;", ["PROXY_SERVER_NAME = 'a.example; return 200'", "no ';'"],
         data={"PROXY_SERVER_NAME": "a.example; return 200"}),
    Case("newline in an environment value", ["VLLM_EXTRA_ENV['X']", "single line"],
         data={"VLLM_EXTRA_ENV": {"X": "a\nExecStart=/bin/sh"}}, fake=True),
    Case("newline in a vLLM argument", ["VLLM_COMMON_ARGS[0]", "single line"],
         data={"VLLM_COMMON_ARGS": ["--x\n--y"]}),
    Case("watchdog restart command with a typo'd placeholder",
         ["WATCHDOG_RESTART_COMMAND", "{rollout} restart {servcie} --wait", "no placeholders but",
          "{unit} {service} {port} {served} {kind} {rollout} {limits}"],
         data={"WATCHDOG_RESTART_COMMAND": "{rollout} restart {servcie} --wait"}, fake=True),
    Case("watchdog restart command naming no service",
         ["WATCHDOG_RESTART_COMMAND", "a command containing {service} or {unit}"],
         data={"WATCHDOG_RESTART_COMMAND": "{rollout} restart --wait"}),
    Case("watchdog stop command with a format spec", ["WATCHDOG_STOP_COMMAND", "{unit:>9}", "no placeholders but"],
         data={"WATCHDOG_STOP_COMMAND": "systemctl stop {unit:>9}"}),
    Case("earlyoom regex with a quote", ["EARLYOOM_AVOID", "regular expression"],
         data={"EARLYOOM_AVOID": "^(sshd|'x)$"}),
    # --- the lock ------------------------------------------------------------------------------------------------
    Case("malformed revision sha", ["sim-dir/models.lock.json", "sha", "'main'", "40-hex", "lock refresh"],
         prepare=_lock(lambda e: e.update(sha="main")), fake=True),
    Case("unresolved revision", ["sim-dir/models.lock.json", ".sha", "None", "40-hex"],
         prepare=_lock(lambda e: e.update(sha=None))),
    Case("lock file missing", ["MODEL_LOCK_FILE", "no-such.lock.json", "existing lock file"],
         data={"MODEL_LOCK_FILE": "no-such.lock.json"}),
    # --- secrets -------------------------------------------------------------------------------------------------
    Case("missing token file", ["SPARK_API_TOKEN_FILE", "does-not-exist", "readable file"],
         prepare=lambda tmp: ({}, {"SPARK_API_TOKEN_FILE": str(tmp / "does-not-exist")})),
    Case("empty token", ["SPARK_API_TOKEN_FILE", "non-empty"], prepare=_token("  \n")),
    Case("token readable by others", ["SPARK_API_TOKEN_FILE", "only its owner", "0644", "chmod 600"],
         prepare=_token("t0ken", 0o644), fake=True),
    Case("token readable by its group", ["SPARK_API_TOKEN_FILE", "only its owner", "0640"],
         prepare=_token("t0ken", 0o640)),
    Case("empty HF token", ["SPARK_HF_TOKEN_FILE", "non-empty Hugging Face token"],
         prepare=_token("", env="SPARK_HF_TOKEN_FILE")),
    Case("HF token readable by others", ["SPARK_HF_TOKEN_FILE", "only its owner", "0604"],
         prepare=_token("hf_x", 0o604, env="SPARK_HF_TOKEN_FILE")),
    # --- the TLS pair --------------------------------------------------------------------------------------------
    Case("unreadable TLS files", ["TLS_CERT_FILE", "nope.pem", "readable PEM"],
         prepare=_tls(lambda tmp: (tmp / "nope.pem", tmp / "nope.key"))),
    Case("TLS certificate without key", ["TLS_CERT_FILE/TLS_KEY_FILE", "both set"],
         data={"TLS_CERT_FILE": "cert.pem"}),
    Case("TLS key of another certificate", ["TLS_KEY_FILE", "other.key", "private key of TLS_CERT_FILE", "nginx -t"],
         prepare=_tls(_tls_mismatch), fake=True),
    Case("TLS certificate expired", ["TLS_CERT_FILE", "old.pem", "valid now", "CN=old"], prepare=_tls(_tls_expired)),
    Case("TLS chain out of order", ["TLS_CERT_FILE", "chain.pem", "issued by the next", "CN=ca-two"],
         prepare=_tls(_tls_broken_chain)),
    Case("TLS certificate for another name", ["TLS_CERT_FILE", "subjectAltName includes gx10.test",
                                              "elsewhere.test"], prepare=_tls(_tls_wrong_name)),
    Case("TLS key readable by others", ["TLS_KEY_FILE", "only its owner", "0644"], prepare=_tls(_tls_open_key)),
    Case("TLS key with a passphrase", ["TLS_KEY_FILE", "unencrypted"], prepare=_tls(_tls_encrypted_key)),
    # --- the command line ----------------------------------------------------------------------------------------
    Case("--data without =", ["--data", "CODING_MODEL", "KEY=VALUE"], raw=["CODING_MODEL"]),  # pyinfra's
    # own CLI raises ValueError for this one, before our code runs
]


def _prepare(case: Case, tmp: Path) -> tuple[list[str], dict, Path | None]:
    """The case as (--data arguments, environment, edited group_data dir or None)."""
    token = tmp / "api_token"
    token.write_text("t0ken-for-tests\n")
    token.chmod(0o600)
    scrape = tmp / "scrape_token"
    scrape.write_text("scr4pe-token-for-tests\n")
    scrape.chmod(0o600)
    env = {"SPARK_API_TOKEN_FILE": str(token), "SPARK_SCRAPE_TOKEN_FILE": str(scrape), "GX10_HOSTS": "",
           "SPARKCTL_TEST_SECRETS": str(tmp / "secrets")}
    data = {"ssh_hostname": ADDRESS, **case.data}
    if case.prepare:
        more_data, more_env = case.prepare(tmp)
        data.update(more_data)
        env.update(more_env)
    args = [f"{k}={_cli(v)}" for k, v in data.items()] + case.raw
    gd = None
    if case.gx10_py:
        gd = tmp / "group_data"
        gd.mkdir()
        for f in (REPO_ROOT / "group_data").glob("*.py"):
            (gd / f.name).write_text(f.read_text())
        (gd / "gx10.py").write_text(case.gx10_py((gd / "gx10.py").read_text()))
    return args, env, gd


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_check_refuses_with_a_clear_message(case, tmp_path, monkeypatch, capsys):
    args, env, gd = _prepare(case, tmp_path)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("SPARK_HF_TOKEN_FILE", raising=False) if "SPARK_HF_TOKEN_FILE" not in env else None
    if gd is not None:
        monkeypatch.setattr(groupdata, "load", functools.partial(groupdata.load, root=gd.parent))
    argv = ["check", "--data", f"MODEL_LOCK_FILE={FAKE_LOCK}", "--data", f"SECRETS_DIR={tmp_path / 'secrets'}"]
    for a in args:
        argv += ["--data", a]
    status = main(argv)  # an exception here (a traceback) fails the test
    err = capsys.readouterr().err
    assert status == 2, err
    assert "Traceback" not in err
    for w in case.words:
        assert w in err, f"{w!r} missing from: {err}"


# --- the same cases through the whole deploy (@fake): no command reaches the host ------------------------------


def _fake_run(case: Case, tmp: Path) -> dict:
    args, env, gd = _prepare(case, tmp)
    cwd = REPO_ROOT
    if gd is not None:  # a repository whose group_data/ is the edited copy (pyinfra reads it from the cwd)
        cwd = tmp / "repo"
        cwd.mkdir()
        for name in ("deploy.py", "config.py", "tasks", "templates", "tests", "sparkctl"):
            (cwd / name).symlink_to(REPO_ROOT / name)
        (cwd / "group_data").symlink_to(gd)
    full_env = {k: v for k, v in os.environ.items() if k != "SPARK_HF_TOKEN_FILE"}
    full_env.update(env, FAKE_KIND="dgx", PYINFRA_FAKE_DELAY="0", PYINFRA_FAKE_DELAY_JITTER="0",
                    PYTHONPATH=str(REPO_ROOT))
    cmd = [sys.executable, "tests/fake_driver.py", "tests/inventory_fake.py"]
    for a in args:
        cmd += ["--data", a]
    r = subprocess.run(cmd, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=120)
    line = next((x for x in r.stdout.splitlines() if x.startswith("FAKE-DRIVER-JSON ")), None)
    assert line, r.stdout + r.stderr
    out = json.loads(line.split(" ", 1)[1])
    out["log"] = r.stdout + r.stderr
    return out


FAKE_CASES = [c for c in CASES if c.fake]


@pytest.fixture(scope="module")
def fake_runs(tmp_path_factory) -> dict:
    """Every case's @fake deploy, run in parallel subprocesses (pyinfra's CLI keeps global state: one per run)."""
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        futures = {c.id: pool.submit(_fake_run, c, tmp_path_factory.mktemp("fake")) for c in FAKE_CASES}
        return {k: f.result() for k, f in futures.items()}


@pytest.mark.parametrize("case", FAKE_CASES, ids=[c.id for c in FAKE_CASES])
def test_deploy_refuses_before_any_command(case, fake_runs):
    out = fake_runs[case.id]
    assert out["commands"] == [], out["commands"][:3]
    assert out["error"], out["log"][-2000:]
    assert "Traceback" not in out["log"]
    for w in case.words:
        assert w in out["log"], f"{w!r} missing from: {out['error']}"


# --- warnings and the box's facts ---------------------------------------------------------------------------------


def test_the_valid_configuration_passes(gx10_data):
    s = validate(gx10_data, "gx10")
    assert s.coder.model.key == "qwen3.8-27b" and s.warnings == ()


def test_short_proxy_timeout_is_a_warning_naming_the_floor(gx10_data):
    gx10_data["PROXY_READ_TIMEOUT_S"] = 600
    s = validate(gx10_data, "gx10")
    assert any("PROXY_READ_TIMEOUT_S = 600" in w and "7200" in w for w in s.warnings)


FACTS_OK = dict(arch="aarch64", os_release={"id": "ubuntu", "version_id": "24.04"},
                gpu={"name": "NVIDIA GB10", "compute_cap": "12.1", "driver_version": "580.95.05"}, is_dgx=True,
                disk_free=500 * GIB, pending_bytes=100 * GIB)

FACT_CASES = [
    ("host not arm64", {"arch": "x86_64"}, ["x86_64", "EXPECTED_ARCH"]),
    ("not Ubuntu 24.04", {"os_release": {"id": "ubuntu", "version_id": "22.04"}}, ["ubuntu 22.04", "EXPECTED_OS"]),
    ("no GB10", {"gpu": {"name": "NVIDIA H100", "compute_cap": "9.0", "driver_version": "580.1"}},
     ["H100", "REQUIRED_GPU"]),
    ("DGX OS without driver", {"gpu": None}, ["dgx-release", "nvidia-smi"]),
    ("disk too small", {"disk_free": 50 * GIB}, ["50.0 GiB free", "100.0 GiB", "DISK_HEADROOM_GIB"]),
]


@pytest.mark.parametrize("case_id,change,words", FACT_CASES, ids=[c[0] for c in FACT_CASES])
def test_preflight_facts_refuse_a_box_that_is_not_a_gx10(case_id, change, words, gx10_data):
    s = validate(gx10_data, "gx10")
    assert check_facts(s, **FACTS_OK) == []
    problems = check_facts(s, **{**FACTS_OK, **change})
    assert len(problems) == 1
    for w in words:
        assert w in problems[0], problems[0]
