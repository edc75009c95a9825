"""The settings schema: every key of group_data/{all,gx10,sim}.py with its type, unit and valid range, in one place.

group_data/*.py stay the documented source of the values (pyinfra reads them); this validates what pyinfra merged
for a host (host.data.dict(): group data, inventory host data, `--data` overrides). An unknown key is refused with
the closest known names (a typo such as CODING_MODLE would otherwise be silently ignored), so every new setting
must be added here too (tests/check/test_check.py fails when group data and this schema disagree).

`validate(data)` raises SettingError naming the setting, the value and what is valid; no pydantic traceback reaches
an operator. Field descriptions are the "what is valid" text of those messages. Types only: a rule relating two
settings lives in sparkctl/check/rules.py, and every entry point runs both (sparkctl/check/load.py).
"""

from __future__ import annotations

import difflib
import re
from functools import lru_cache
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo

from sparkctl.config import schema_types as t
from sparkctl.errors import SettingError

# keys of the inventory's per-host data that are not settings: sparkctl/config/hosts.py HostConn.data of a
# simulated Spark (.sim/hosts.json); its ssh_* keys are pyinfra's own connector keys (pyinfra_keys())
INVENTORY_KEYS = frozenset({"flavor"})
BOX_WAITS = ("HEALTH_READY_TIMEOUT_S", "HEALTH_COLD_READY_TIMEOUT_S", "ACCEPTANCE_VERDICT_TIMEOUT_S",
             "DRAIN_TIMEOUT_S")  # BOX_TIMEOUT_FLOORS_S's keys
TOPOLOGIES = ("replicas", "split", "tensor-parallel")  # SPARK_TOPOLOGY: how a pair serves (config/topology.py)
# DEVICE_CHECKS: the box's checks
DEVICE_CHECK_NAMES = ("import", "toolchain", "cuda", "triton", "flashinfer", "flashinfer_jit", "torch_compile")


# a plain URL path: nothing nginx would read as syntax or a pattern (PROXY_ROUTES goes into the site verbatim)
Route = t.pattern(r"^(/[A-Za-z0-9_.-]+)+$", "a plain path such as '/v1/models' (letters, digits, _ . - and /)")


class ProxyRoutes(BaseModel):
    """PROXY_ROUTES: per model role, the only vLLM routes the proxy publishes below /<served name>/."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    coder: t.list_of(Route, "a non-empty list of plain paths such as '/v1/models'", 1)
    embedder: t.list_of(Route, "a non-empty list of plain paths such as '/v1/models'", 1)


class Embedder(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)
    model: Annotated[str, Field(description="an embedder's catalog key")]
    kv_cache_gib: t.GiB


class RuntimeOverhead(BaseModel):
    """MODEL_RUNTIME_OVERHEAD_GIB: what one vLLM engine holds beside its weights and KV budget, per model role."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)
    coder: t.GiBOrZero
    embedder: t.GiBOrZero


class GroupData(BaseModel):
    """Every setting, typed as validated (read as attributes: cfg.DRAIN_TIMEOUT_S; templates write d.SETTING); the
    unit is in the description, the meaning in group_data/*.py. Frozen: what was checked is what is used."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)

    # what the box is
    EXPECTED_ARCH: t.list_of(t.Text, "a non-empty list of `uname -m` values", 1)
    EXPECTED_OS: t.list_of(t.Text, 'a non-empty list of "<ID> <VERSION_ID>" values', 1)
    REQUIRED_GPU: t.Text
    REQUIRED_COMPUTE_CAP: t.Version
    DGX_RELEASE_FILE: t.AbsPath
    # memory and bandwidth
    BOX_USABLE_MEMORY_GIB: t.GiB
    BOX_MEMORY_BANDWIDTH_GBPS: t.typed(float, "a bandwidth in GB/s greater than 0 and at most 100000", gt=0,
                                       le=100_000)
    OS_RESERVE_GIB: t.GiBOrZero
    EMBEDDER_KV_FLOOR_GIB: t.GiB
    PLAN_MEASURED_TOLERANCE: t.Fraction
    VLLM_ADMISSION_MARGIN_GIB: t.GiBOrZero
    VLLM_STARTING_ENGINE_GIB: t.GiBOrZero
    PAGE_CACHE_EVICTION: Annotated[Literal["checkpoints", "drop-caches", "off"],
                                   Field(description="one of checkpoints, drop-caches, off")]
    UNIFIED_MEMORY_STANDIN: t.RootProgramOrEmpty  # ExecStartPre=+: run as root before every vLLM start
    # NVIDIA driver and CUDA
    NVIDIA_DRIVER_BRANCH: t.Count
    CUDA_VERSION: t.Version
    CUDA_HOME: t.RootProgramDir  # the deploy runs its bin/nvcc as root (tasks/nvidia.py)
    NVIDIA_KEYRING_DEB_URL: t.Url
    NVIDIA_PREREQ_PACKAGES: t.DebPackages
    NVIDIA_DRIVER_PACKAGES: t.DebPackages
    CUDA_PACKAGES: t.DebPackages
    APT_CACHE_TIME_S: t.WholeSeconds
    # system packages
    SYSTEM_PACKAGES: t.DebPackages
    VLLM_BUILD_PACKAGES: t.DebPackages
    # vLLM
    VLLM_VERSION: t.Release
    VLLM_DIST: t.PipName
    VLLM_PIP_REQUIREMENT: t.pattern(r"^[^\s-]\S*$", "a pip requirement or wheel URL without spaces, not an option "
                                                      "(no leading -), e.g. vllm==0.32.0")
    VLLM_PIP_EXTRA_INDEX_URLS: t.list_of(t.Url, "a list of http(s) index URLs")
    VLLM_PIP_CONSTRAINTS: t.list_of(t.pattern(r"^[^\s#-].*$", "a pip constraint line, not an option or a comment"),
                                    "a list of pip constraint lines such as torch==2.13.0+cpu")
    VLLM_PIP_REMOVE: t.list_of(t.PipName, "a list of pip distribution names")
    VLLM_METADATA_ALIAS: t.ReleaseOrEmpty
    PIP_FIND_LINKS: t.list_of(t.AbsPath, "a list of absolute directories on the box")
    PIP_NO_INDEX: bool
    PIP_VERSION: t.Version
    VLLM_PIP_URL_OK: bool
    BOX_PIP_PLATFORMS: t.list_of(t.pattern(r"^[a-z0-9][a-z0-9_]*$", "a pip platform tag such as "
                                                                     "manylinux_2_39_aarch64"),
                                 "a list of pip platform tags (empty: the control machine's own)")
    BOX_PYTHON_VERSION: t.pattern(r"^3\.\d{1,2}$", "a Python major.minor such as 3.12")
    PIP_FIND_LINKS_HERE: Annotated[dict[t.AbsPath, t.LocalPath], Field(
        description="a mapping of PIP_FIND_LINKS directories on the box to their copies on the control machine")]
    WHEELHOUSE_CACHE: t.LocalPath
    WHEELHOUSE_FROM: t.typed(str, "a control-machine directory of wheels (relative to the repository or absolute), "
                                  "or \"\" for the package index")
    # paths on the box
    SPARKCTL_HOME: t.DeployDir
    MODEL_STORE: t.DeployDir
    ENV_DIR: t.DeployDir
    STATE_DIR: t.DeployDir
    SERVICE_USER: t.DedicatedUser
    # services
    LISTEN_ADDRESS: t.Ipv4Address
    LISTEN_ADDRESS_NOT_LOOPBACK_OK: bool
    CODER_PORT: t.UserPort
    EMBEDDER_PORTS: t.list_of(t.UserPort, "a list of TCP ports, one per EMBEDDERS entry")
    CODER_SERVED_NAME: t.Name
    CODER_MAX_NUM_SEQS: t.typed(int, "a whole number of sequences from 1 to 1024", ge=1, le=1024)
    CODER_MAX_NUM_BATCHED_TOKENS: t.Tokens
    VLLM_COMMON_ARGS: t.list_of(t.Text, "a list of `vllm serve` arguments")
    VLLM_EXTRA_ENV: t.env_mapping("a mapping of environment variable names to string values")
    GPU_ARCH_ENV: t.env_mapping("a mapping of environment variable names to string values")
    TRITON_PTXAS_BLACKWELL_PATH: t.program_or_empty(r"^(/[A-Za-z0-9_+@-][A-Za-z0-9._+@-]*)*$", "an absolute path on "
                                                    "the box such as /usr/local/cuda-13.0/bin/ptxas, or empty for "
                                                    "Triton's bundled ptxas-blackwell")
    # the JIT toolchain and the kernel caches in every engine's environment
    ENGINE_SYSTEM_PATH: t.list_of(t.SearchDir, "a non-empty list of root-owned system directories on the box, such "
                                  "as ['/usr/bin', '/bin']", 1)
    KERNEL_CACHES: Annotated[dict[t.EnvName, t.SubDir],
        Field(description="a mapping of environment variable names to directories under STATE_DIR")]
    VLLM_ENGINE_READY_TIMEOUT_S: t.WholeSeconds
    SERVICE_RESTART_SEC: t.Seconds
    SERVICE_START_LIMIT_INTERVAL_S: t.WholeSeconds
    SERVICE_START_LIMIT_BURST: t.Count
    SERVICE_STOP_TIMEOUT_S: t.WholeSeconds
    SERVICE_NOFILE: t.typed(int, "a whole number of open files from 1 to 1048576 (the kernel's nr_open)", ge=1,
                            le=1_048_576)
    NVIDIA_DEVICES: t.list_of(t.pattern(r"^[a-z0-9][a-z0-9_-]*$", "a /proc/devices group name"),
                              "a list of device groups such as char-nvidiactl")
    # readiness
    HEALTH_READY_TIMEOUT_S: t.typed(float, f"a number of seconds from 0 to {t.MAX_SECONDS} (0: look once, do not wait)",
                                    ge=0, le=t.MAX_SECONDS)
    HEALTH_COLD_READY_TIMEOUT_S: t.typed(float, f"a number of seconds from 0 to {t.MAX_SECONDS} (at least "
                                         "HEALTH_READY_TIMEOUT_S: shorter is read as HEALTH_READY_TIMEOUT_S)",
                                         ge=0, le=t.MAX_SECONDS)
    HEALTH_STALL_S: t.Seconds
    HEALTH_POLL_INTERVAL_S: t.Seconds
    HEALTH_JOURNAL_LINES: t.Count
    HEALTH_REQUEST_TIMEOUT_S: t.Seconds
    HEALTH_LISTENER_TIMEOUT_S: t.Seconds
    HEALTH_PROBE_MAX_TOKENS: t.Tokens
    # checkpoints
    HF_ENDPOINT: t.Url
    HF_DOWNLOAD_WORKERS: t.typed(int, "a whole number of parallel downloads from 1 to 64", ge=1, le=64)
    MODEL_LOCK_FILE: t.LocalPath
    DISK_HEADROOM_GIB: t.DiskGiB
    AIRGAPPED: bool
    CHECKPOINT_FANOUT_KEY: t.FileName
    CHECKPOINT_FANOUT_BWLIMIT_KIB_S: t.typed(int, "a whole number of KiB/s from 0 (the link's full rate) to "
                                                  "25,000,000 (a 200 Gb/s link)", ge=0, le=25_000_000)
    CHECKPOINT_SEED_BOX: Annotated[str, Field(
        description='"" (the first box that keeps it and reaches the Hub) or a box of the inventory')]
    CATALOG_OVERRIDES: Annotated[dict[str, dict[str, Any]], Field(
        description="a mapping of catalog model keys to {field: value} overrides")]
    CATALOG_MODELS: Annotated[dict[str, dict[str, Any]], Field(
        description="a mapping of new catalog model keys to catalog entries (sparkctl/config/catalog.py)")]
    MODEL_RUNTIME_OVERHEAD_GIB: Annotated[RuntimeOverhead, Field(
        description='{"coder": GiB, "embedder": GiB}: what a vLLM engine holds beside its weights and KV cache')]
    # TLS proxy
    PROXY_PORT: t.Port
    PROXY_SERVER_NAME: t.ServerNames
    PROXY_READ_TIMEOUT_S: t.NginxSeconds
    PROXY_SEND_TIMEOUT_S: t.NginxSeconds
    PROXY_TIMEOUT_FLOOR_S: t.typed(float, f"a number of seconds from {t.LONG_GENERATION_S} to {t.MAX_SECONDS} (two "
                                          f"10-minute timeouts once cut long reasoning generations silently)",
                                   ge=t.LONG_GENERATION_S, le=t.MAX_SECONDS)
    PROXY_MAX_BODY_MB: t.typed(int, "a whole number of MiB from 1 to 1024", ge=1, le=1024)
    PROXY_ROUTES: Annotated[ProxyRoutes, Field(description="{\"coder\": [paths], \"embedder\": [paths]}")]
    TLS_CERT_FILE: t.typed(str, "a control-machine path of a PEM certificate chain, or empty")
    TLS_KEY_FILE: t.typed(str, "a control-machine path of a PEM private key, or empty")
    TLS_SERVER_NAMES: t.list_of(t.HostName, "a list of DNS names or IP addresses")
    SECRETS_DIR: t.LocalPath
    # OOM guard
    EARLYOOM_MIN_FREE_PERCENT: t.Percent
    EARLYOOM_PREFER: t.Regex
    EARLYOOM_AVOID: t.Regex
    EARLYOOM_REPORT_INTERVAL_S: t.typed(int, f"a whole number of seconds from 0 to {t.MAX_SECONDS} (0: no reports)",
                                        ge=0, le=t.MAX_SECONDS)
    SSHD_MEMORY_MIN: t.SystemdSize
    SSHD_OOM_SCORE_ADJUST: t.OomScore
    VLLM_OOM_SCORE_ADJUST: t.OomScore
    # two Sparks
    SPARK_TOPOLOGY: Literal[TOPOLOGIES]
    TP_HEAD: t.typed(str, "an inventory host name, or empty for the first host")
    TP_BACKEND: Literal["native", "ray"]
    TP_MASTER_PORT: t.UserPort
    RAY_VERSION: t.Version
    RAY_PORT: t.UserPort
    RAY_DASHBOARD: bool
    CX7_INTERFACES: t.list_of(t.IfName, "a non-empty list of interface names", 1)
    CX7_HCAS: t.list_of(t.IfName, "a list of RDMA device names")
    CX7_ADDRESSES: Annotated[dict[str, list[t.Cidr]], Field(
        description="a mapping of inventory host names to lists of address/prefix")]
    CX7_NETPLAN_FILE: t.owned_file({"/etc/netplan/": "the only place netplan reads the operator's files; not one the "
                                                     "installer or cloud-init writes"},
                                   pattern=r"^/etc/netplan/[A-Za-z0-9][A-Za-z0-9._-]*\.yaml$",
                                   description="a file /etc/netplan/<name>.yaml (the only place netplan reads the "
                                               "operator's files) that the installer or cloud-init does not write",
                                   refused=t.NETPLAN_SYSTEM_FILES)
    CX7_MANAGE_NETPLAN: bool
    CX7_MTU: t.typed(int, "0 (leave the interfaces' MTU) or an MTU in bytes from 1280 to 9216",
                     t._check(lambda v: v == 0 or 1280 <= v <= 9216, "0, or an MTU from 1280 to 9216"))
    RDMA_DEVICES: t.list_of(t.pattern(r"^[a-z0-9][a-z0-9_-]*$", "a /proc/devices group name"),
                            "a list of device groups such as char-infiniband_verbs")
    TP_MEMLOCK: t.pattern(r"^(infinity|[1-9][0-9]{0,15}[KMGT]?)?$", "infinity, a size in bytes with an optional "
                          "K, M, G or T suffix (base 1024) as systemd parses it, or empty for systemd's default")
    NCCL_IB_GID_INDEX: t.typed(int, "a GID index from 0 to 255, or -1 to let NCCL choose", ge=-1, le=255)
    NCCL_SYSTEM_LIBRARY: t.program_or_empty(r"^(/[A-Za-z0-9_+@-][A-Za-z0-9._+@-]*)*$", "an absolute path on the box "
                                            "such as /usr/lib/aarch64-linux-gnu/libnccl.so.2, or empty for torch's "
                                            "bundled NCCL")
    LINK_PROBE_BYTES: t.typed(int, "a whole number of bytes from 1024 to 4294967296 (4 GiB: nccl-tests' 16 GB froze a "
                                   "Spark)", ge=1024, le=4 * 1024 ** 3)
    LINK_PROBE_ITERS: t.typed(int, "a whole number of timed iterations from 1 to 10000", ge=1, le=10_000)
    LINK_PROBE_BACKEND: Annotated[Literal["nccl", "gloo"], Field(description="one of nccl, gloo")]
    LINK_MIN_BUSBW_GBPS: t.typed(float, "a bandwidth in GB/s from 0 (no floor) to 1000", ge=0, le=1000)
    CHECKPOINT_SYNC_KEY: t.FileName
    TP_PEER_KEY: t.FileName
    TP_PEER_CALL_TIMEOUT_S: t.Seconds
    CHECKPOINT_SYNC_USER: Annotated[Literal["root"], Field(
        description="root (the head's forced-command rrsync entry lives in root's authorized_keys; tasks/link.py "
                    "writes no other account's)")]
    CHECKPOINT_SYNC_SSH_OPTIONS: t.list_of(t.SshOption, "a list of ssh -o options such as BatchMode=yes")
    GATEWAY_HANDOFF_DIR: t.LocalPath
    GATEWAY_NAMESPACE: t.K8sName
    GATEWAY_K8S_VERSION: t.Version
    # bench
    BENCH_STREAMS: t.distinct_list_of(t.Streams, "a non-empty list of distinct stream counts from 1 to 1024", 1)
    BENCH_WINDOW_S: t.Seconds
    BENCH_MAX_TOKENS: t.Tokens
    BENCH_PREFILL_TOKENS: t.Tokens
    BENCH_CLIENT_TIMEOUT_S: t.Seconds
    BENCH_IGNORE_EOS: bool
    BENCH_AGREEMENT_TOLERANCE: t.Fraction
    BENCH_SETTLE_S: t.Seconds
    BENCH_IDLE_TIMEOUT_S: t.Seconds
    NIAH_MAX_TOKENS: t.Tokens
    # the first hour on a box: `python -m sparkctl rehearse`
    REHEARSE_OUT_DIR: t.LocalPath
    REHEARSE_SSH_TIMEOUT_S: t.Seconds
    REHEARSE_DEVICE_CHECK_TIMEOUT_S: t.Seconds
    REHEARSE_LINK_PORT: t.UserPort
    REHEARSE_LINK_TIMEOUT_S: t.Seconds
    REHEARSE_COLD_WARM_TIMEOUT_S: t.Seconds
    # monitoring: node exporter, box facts, scrape paths, the hand-off's Prometheus job and alerts
    MONITORING_PACKAGES: t.DebPackages
    NODE_EXPORTER_PORT: t.UserPort
    NODE_EXPORTER_DEFAULTS_FILE: t.owned_file({"/etc/default/prometheus-node-exporter": "where the Debian package's "
                                                                                        "unit reads its ARGS="})
    NODE_EXPORTER_COLLECTORS: t.list_of(t.pattern(r"^[a-z_]+$", "a node exporter collector name"),
                                        "a non-empty list of node exporter collector names", 1)
    TEXTFILE_DIR: t.DeployDir
    BOX_FACTS_INTERVAL_S: t.WholeSeconds
    NVIDIA_SMI: t.RootProgramOrName
    SCRAPE_NODE_PATH: t.Name
    PROMETHEUS_JOB_NAME: t.Name
    PROMETHEUS_SCRAPE_INTERVAL_S: t.WholeSeconds
    PROMETHEUS_SCRAPE_TIMEOUT_S: t.WholeSeconds
    PROMETHEUS_TOKEN_FILE: t.AbsPath
    PROMETHEUS_CA_FILE: t.AbsPath
    ALERT_MODEL_DOWN_FOR_S: t.WholeSeconds
    ALERT_KV_USAGE_RATIO: t.Fraction
    ALERT_KV_USAGE_FOR_S: t.WholeSeconds
    ALERT_WAITING_FOR_S: t.WholeSeconds
    ALERT_MEM_AVAILABLE_FLOOR_GIB: t.GiB
    ALERT_MEM_AVAILABLE_FOR_S: t.WholeSeconds
    ALERT_CERT_EXPIRY_DAYS: t.typed(int, "a whole number of days from 1 to 3650", ge=1, le=3650)
    ALERT_SPEC_ACCEPTANCE_FRACTION: t.Fraction
    ALERT_SPEC_ACCEPTANCE_WINDOW_S: t.WholeSeconds
    ALERT_FRONT_DOOR_DOWN_FOR_S: t.WholeSeconds
    ALERT_FOR_S: t.WholeSeconds
    # the liveness watchdog
    WATCHDOG_INTERVAL_S: t.Seconds
    WATCHDOG_STALL_S: t.Seconds
    WATCHDOG_PROBE_IDLE_S: t.Seconds
    WATCHDOG_PROBE_TIMEOUT_S: t.Seconds
    WATCHDOG_HTTP_TIMEOUT_S: t.Seconds
    WATCHDOG_MAX_RESTARTS: t.typed(int, "a whole number of restarts from 0 to 1000 (0: never restart, only report)",
                                   ge=0, le=1000)
    WATCHDOG_WINDOW_S: t.WholeSeconds
    WATCHDOG_RESTART_COMMAND: t.command_template(("service", "unit"))
    WATCHDOG_STOP_COMMAND: t.command_template(("service", "unit"))
    WATCHDOG_ROLLOUT_ACTIVE_COMMAND: t.command_template(("service", "unit"))
    STATUS_SSH_TIMEOUT_S: t.Seconds
    # safe change: drained, gated, reversible rollouts
    VLLM_VENVS_KEEP: t.typed(int, "a whole number of venvs from 1 to 100", ge=1, le=100)
    # the device check of a new venv (sparkctl/box/device_check.py CHECKS: tests/box/test_device_check.py)
    VLLM_DEVICE_PREPARE: t.list_of(t.root_command("an absolute program and plain arguments such as "
                                                  "/usr/bin/nvidia-modprobe -u -c=0"),
                                   "a list of commands, each an absolute program and plain arguments")
    DEVICE_CHECKS: t.list_of(Annotated[Literal[DEVICE_CHECK_NAMES], Field(
        description=f"one of {', '.join(DEVICE_CHECK_NAMES)}")], f"a non-empty list of checks from "
                             f"{', '.join(DEVICE_CHECK_NAMES)}", 1)
    DEVICE_CHECK_TIMEOUT_S: t.WholeSeconds
    DRAIN_TIMEOUT_S: t.typed(float, f"a number of seconds from 0 to {t.MAX_SECONDS} (0: do not drain)", ge=0,
                             le=t.MAX_SECONDS)
    BOX_TIMEOUT_FLOORS_S: Annotated[dict[Literal[BOX_WAITS], t.Seconds], Field(
        description=f"a mapping of {', '.join(BOX_WAITS)} to the least seconds each needs on this box")]
    BOX_TIMEOUT_FLOOR_MODE: Annotated[Literal["fail", "warn"], Field(description="one of fail, warn")]
    DRAIN_RETRY_AFTER_S: t.WholeSeconds
    DRAIN_DIR: t.DeployDir
    ROLLOUT_RETRY_FAILED: bool
    RETIRE_LAST_OF_POOL: bool
    ROLLOUT_FAILED_KEEP: t.Count
    ROLLOUT_GATE_MAX_TOKENS: t.Tokens
    ROLLOUT_GATE_REQUEST_TIMEOUT_S: t.Seconds
    ROLLOUT_WORKER_SETTLE_S: t.Seconds
    # the acceptance gate after a flip
    ACCEPTANCE_ENABLED: bool
    ACCEPTANCE_MODE: Annotated[Literal["fail", "warn"], Field(description="one of fail, warn")]
    ACCEPTANCE_VERDICT_TIMEOUT_S: t.WholeSeconds
    ACCEPTANCE_HISTORY_FILE: t.StateFile
    ACCEPTANCE_WINDOW_S: t.Seconds
    ACCEPTANCE_STREAMS: t.distinct_list_of(t.Streams, "a non-empty list of distinct stream counts from 1 to 1024", 1)
    ACCEPTANCE_SPEC_ENABLED: bool
    ACCEPTANCE_SPEC_FLOOR_FRACTION: t.Fraction
    ACCEPTANCE_DECODE_ENABLED: bool
    ACCEPTANCE_DECODE_MAX_REGRESSION: t.Fraction
    ACCEPTANCE_PREFILL_ENABLED: bool
    ACCEPTANCE_PREFILL_TOKENS: t.Tokens
    ACCEPTANCE_PREFILL_REPEATS: t.Count
    ACCEPTANCE_PREFILL_MAX_REGRESSION: t.Fraction
    ACCEPTANCE_PREVIOUS_DECODE_MAX_REGRESSION: t.Fraction
    ACCEPTANCE_PREVIOUS_PREFILL_MAX_REGRESSION: t.Fraction
    ACCEPTANCE_PUBLISHED_DECODE_MAX_REGRESSION: t.Fraction
    ACCEPTANCE_PUBLISHED_PREFILL_MAX_REGRESSION: t.Fraction
    ACCEPTANCE_ANCHOR_DECODE_MAX_REGRESSION: t.Fraction
    ACCEPTANCE_ANCHOR_PREFILL_MAX_REGRESSION: t.Fraction
    ACCEPTANCE_PAIR_MIN_SPEEDUP: t.typed(float, "0 (a pair slower than one box accepted) or a multiple up to 2",
                                         ge=0, le=2)
    ACCEPTANCE_SPEC_MIN_TOKENS_PER_STEP: t.typed(float, "a mean acceptance length from 1 (off) to 2 tokens per step",
                                                 ge=1, le=2)
    ACCEPTANCE_ROOFLINE_FLOOR_FRACTION: t.typed(float, "a fraction from 0 (off) up to (not including) 1", ge=0, lt=1)
    ACCEPTANCE_KV_ENABLED: bool
    ACCEPTANCE_KV_MAX_SHORTFALL: t.Fraction
    ACCEPTANCE_NIAH_ENABLED: bool
    ACCEPTANCE_NIAH_LENGTH: t.Tokens
    ACCEPTANCE_NIAH_DEPTH: t.typed(float, "a needle depth in % from 0 to 100", ge=0, le=100)
    ACCEPTANCE_FAIL_ON_PROBLEMS: bool
    ACCEPTANCE_CLOCK_SKEW_S: t.WholeSeconds
    # the fleet: pools of boxes, rollouts in waves, and a rollout's wall-time estimate (sparkctl/fleet/)
    FLEET_POOLS: Annotated[dict[t.Name, t.FleetPoolValue], Field(
        description='a mapping of pool names to a number of boxes, a list of inventory host names, or {"model", '
                    '"boxes", "tensor_parallel", "embedders", "served_name"}; {} for SPARK_TOPOLOGY\'s pools')]
    ROLLOUT_WAVES: t.list_of(t.WaveSize, 'a non-empty list of batch sizes such as [1, "25%", "100%"]', 1)
    MAX_UNAVAILABLE: t.WaveSize
    MAX_FAIL_PERCENTAGE: t.typed(float, "a percentage from 0 to 100", ge=0, le=100)
    ROLLOUT_ESTIMATE_DRAIN_S: t.EstimateRange
    ROLLOUT_ESTIMATE_LOAD_S: t.EstimateRange
    ROLLOUT_ESTIMATE_COLD_LOAD_S: t.EstimateRange
    ROLLOUT_ESTIMATE_ACCEPTANCE_S: t.EstimateRange
    # per-box choices (group_data/gx10.py)
    CODING_MODEL: Annotated[str, Field(description="a coding model's catalog key")]
    CODER_KV_CACHE_GIB: Annotated[dict[str, t.GiB], Field(
        description='a mapping of coding model keys to KV budgets in GiB, e.g. {"qwen3.8-27b": 36}')]
    EMBEDDERS: Annotated[list[Embedder], Field(description='a list of {"model": <catalog key>, "kv_cache_gib": '
                                                           '<GiB>}')]
    # the simulated Spark (group_data/sim.py): memory facts shared by its tiny models' CATALOG_OVERRIDES
    SIM_TINY_MEMORY: Annotated[dict[str, Any] | None, Field(description="a mapping of MemoryFacts fields")] = None
    SIM_CHECKPOINTS: Annotated[dict[str, dict[str, Any]] | None, Field(
        description="a mapping of stand-in repositories to their descriptions (sparkctl/sim/models.py)")] = None
    # the front door: vLLM's router on the gateway host
    GATEWAY_FRONT_PORT: t.Port
    GATEWAY_PACKAGES: t.DebPackages
    ROUTER_VERSION: t.Release
    ROUTER_HOME: t.DeployDir
    ROUTER_USER: t.DedicatedUser
    ROUTER_POLICY: Literal["random", "round_robin", "cache_aware", "kv_aware", "power_of_two", "consistent_hash",
                           "sticky_least_loaded"]
    ROUTER_PORT_BASE: t.UserPort
    ROUTER_METRICS_PORT_BASE: t.UserPort
    ROUTER_STANDBY_PORT_BASE: t.UserPort
    ROUTER_STANDBY_METRICS_PORT_BASE: t.UserPort
    ROUTER_BRIDGE_PORT: t.UserPort
    ROUTER_SCRAPE_PATH: t.Name
    ROUTER_HEALTH_PATH: t.pattern(r"^/[A-Za-z0-9._/-]*$", "an absolute URL path such as /health")
    ROUTER_HEALTH_INTERVAL_S: t.whole_seconds(1, 60, "the routers' health window is at most "
                                              f"{t.MAX_ROUTER_HEALTH_WINDOW_S} s")
    ROUTER_HEALTH_TIMEOUT_S: t.whole_seconds(1, 60, "vLLM's /health reads one flag: its slowest answer measured "
                                             "under load was 0.956 s")
    ROUTER_HEALTH_FAILURE_THRESHOLD: t.bounded_count(10, "checks", "the routers' health window is at most "
                                                     f"{t.MAX_ROUTER_HEALTH_WINDOW_S} s")
    ROUTER_HEALTH_SUCCESS_THRESHOLD: t.bounded_count(10, "checks", "a recovered box rejoins within 10 checks")
    ROUTER_OUT_WAIT_S: t.typed(float, f"a number of seconds from 0 to {2 * t.MAX_ROUTER_HEALTH_WINDOW_S} (0: no router "
                               "in front, drain at once; at most twice the routers' longest health window, "
                               f"{t.MAX_ROUTER_HEALTH_WINDOW_S} s: every rollout waits it per box)",
                               ge=0, le=2 * t.MAX_ROUTER_HEALTH_WINDOW_S)
    ROUTER_WORKER_STARTUP_TIMEOUT_S: t.whole_seconds(1, t.LONGEST_GENERATION_S, "the longest generation: past it no box is coming")
    ROUTER_STARTUP_CHECK_INTERVAL_S: t.whole_seconds(1, 30, "a restart's clients get 503 until the next check")
    ROUTER_RETRIES: t.bounded_count(10, "attempts", "each may wait the longest backoff: more hold a failing request "
                                                  "for minutes")
    ROUTER_RETRY_INITIAL_BACKOFF_MS: t.typed(int, "a whole number of ms from 1 to 60000 (a retry waiting a minute "
                                                  "outlasts the routers' health window)", ge=1, le=60_000)
    ROUTER_RETRY_MAX_BACKOFF_MS: t.typed(int, "a whole number of ms from 1 to 60000 (a retry waiting a minute outlasts "
                                              "the routers' health window)", ge=1, le=60_000)
    ROUTER_CB_FAILURE_THRESHOLD: t.Count
    ROUTER_CB_SUCCESS_THRESHOLD: t.Count
    ROUTER_CB_TIMEOUT_S: t.whole_seconds(1, 600, "an open circuit keeps a recovered box out: at most 10 minutes")
    ROUTER_CB_WINDOW_S: t.whole_seconds(1, 3600, "failures older than an hour say nothing of a box now")
    ROUTER_REQUEST_TIMEOUT_S: t.whole_seconds(1, t.LONGEST_GENERATION_S, "the longest generation")
    ROUTER_QUEUE_TIMEOUT_S: t.whole_seconds(1, t.LONGEST_GENERATION_S, "the longest generation")
    ROUTER_RESTART_RETRY_AFTER_S: t.whole_seconds(1, 60, "a router restarts in seconds")
    ROUTER_READY_TIMEOUT_S: t.whole_seconds(1, 1800, "a restarted router listens once a box is healthy; a GX10 loads "
                                                     "a model within 15 minutes")
    ROUTER_STOP_TIMEOUT_S: t.whole_seconds(1, t.LONGEST_GENERATION_S, "the longest generation")
    # two front doors, one service: keepalived's VIP and the bridge's firewall (check/gateway.py: cross-field rules)
    GATEWAY_VIP: t.Ipv4OrEmpty
    GATEWAY_VIP_PREFIX_LEN: t.typed(int, "a prefix length from 1 to 32 bits", ge=1, le=32)
    GATEWAY_VIP_INTERFACE: t.IfNameOrEmpty
    KEEPALIVED_PACKAGES: t.DebPackages
    # its range is check/gateway.py's refusal (vrrp_router_id), naming the setting and the valid ids
    VRRP_ROUTER_ID: Annotated[int, Field(description="a VRRP virtual router id from 1 to 255")]
    VRRP_PASSWORD_FILE: t.FileName
    VRRP_PRIORITY_FIRST: t.typed(int, "a VRRP priority from 2 to 254", ge=2, le=254)
    VRRP_PRIORITY_STEP: t.typed(int, "a priority step from 1 to 253", ge=1, le=253)
    VRRP_ADVERT_INT_S: t.whole_seconds(1, 20, "a backup takes the VIP after 3 missed adverts: within a minute")
    VRRP_PREEMPT: bool
    FRONT_HEALTH_PORT: t.UserPort
    FRONT_HEALTH_ROUTER_PATH: t.pattern(r"^/[A-Za-z0-9._/-]*$", "an absolute URL path such as /liveness")
    FRONT_HEALTH_INTERVAL_S: t.whole_seconds(1, 30, f"a failed front door gives up the VIP within "
                                                    f"{t.MAX_FRONT_HEALTH_WINDOW_S} s")
    FRONT_HEALTH_TIMEOUT_S: t.whole_seconds(1, 30, f"a failed front door gives up the VIP within "
                                                   f"{t.MAX_FRONT_HEALTH_WINDOW_S} s")
    FRONT_HEALTH_FALL: t.bounded_count(10, "runs", f"a failed front door gives up the VIP within "
                                                   f"{t.MAX_FRONT_HEALTH_WINDOW_S} s")
    FRONT_HEALTH_RISE: t.bounded_count(10, "runs", "a recovered front door may hold the VIP again within 10 runs")
    FRONT_HEALTH_SCRIPT: t.owned_file(program=True)  # keepalived runs it as root
    KEEPALIVED_CONF: t.owned_file({"/etc/keepalived/keepalived.conf": "the one file keepalived.service reads"})
    FRONT_DOOR_AFFINITY_TIMEOUT_S: t.typed(int, "a whole number of seconds from 1 to 86400 (Kubernetes' limit)",
                                           ge=1, le=86400)
    BRIDGE_FIREWALL_TABLE: t.owned_name(31, "an nftables table name")
    BRIDGE_FIREWALL_FILE: t.owned_file()


# --- strings end up in unit, env and nginx files: one line each -----------------------------------------------------

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _one_line(setting: str, value) -> None:
    if isinstance(value, str):
        if _CONTROL.search(value):
            raise SettingError(setting, value, "a single line without control characters (newline, tab, NUL)",
                               "It is written into unit, env and nginx files")
    elif isinstance(value, dict):
        for k, v in value.items():
            _one_line(f"{setting} key", k)
            _one_line(f"{setting}[{k!r}]", v)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _one_line(f"{setting}[{i}]", v)


# --- from pydantic's errors to the operator's message -------------------------------------------------------------


class _Missing:
    def __repr__(self) -> str:
        return "<not set>"


def _describe(annotation, loc: tuple) -> str | None:
    """The description of the innermost type on loc's path that has one (the most specific "what is valid")."""
    found = None
    for part in _key_steps(loc):
        annotation, found = _unwrap(annotation, found)
        annotation, found, known = _step(annotation, part, found)
        if not known:
            return found
    annotation, found = _unwrap(annotation, found)
    return found


def _key_steps(loc: tuple) -> list:
    """loc with a mapping key's pair (key, "[key]"), pydantic's spelling of "this key is wrong", as one "[key]"."""
    return [p for i, p in enumerate(loc) if not (i + 1 < len(loc) and loc[i + 1] == "[key]")]


def _step(annotation, part, found):
    """(the type one step down loc's path, the description so far, whether the step led anywhere)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        field = annotation.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            return annotation, found, False
        inner = field.annotation if not field.metadata else Annotated[(field.annotation, *field.metadata)]
        return inner, field.description or found, True
    args, origin = get_args(annotation), get_origin(annotation)
    if origin is list and isinstance(part, int) and args:
        return args[0], found, True
    if origin is dict and len(args) == 2:
        return (args[0] if part == "[key]" else args[1]), found, True
    return annotation, found, False


def _unwrap(annotation, found):
    while get_origin(annotation) is Annotated:
        args = get_args(annotation)
        for meta in args[1:]:
            if isinstance(meta, FieldInfo) and meta.description:
                found = meta.description
        annotation = args[0]
    return annotation, found


def _loc_text(loc: tuple) -> str:
    """("EMBEDDERS", 0, "kv_cache_gib") -> EMBEDDERS[0].kv_cache_gib; ("CX7_ADDRESSES", "spark-1", 0) ->
    CX7_ADDRESSES['spark-1'][0] (a name after a list index is an Embedder field, else a mapping key);
    ("VLLM_EXTRA_ENV", "bad key", "[key]") -> VLLM_EXTRA_ENV key 'bad key' (the key itself is wrong)."""
    text = str(loc[0])
    for i, (prev, part) in enumerate(zip(loc, loc[1:]), start=1):
        if part == "[key]":
            continue
        if i + 1 < len(loc) and loc[i + 1] == "[key]":
            text += f" key {part!r}"
        elif isinstance(part, int):
            text += f"[{part}]"
        elif isinstance(prev, int):
            text += f".{part}"
        else:
            text += f"[{part!r}]"
    return text


def _error(err: dict, data: dict) -> SettingError:
    loc = tuple(p for p in err["loc"] if p not in ("function-after",))
    if err["type"] == "extra_forbidden":
        key = _loc_text(loc)
        known = [*GroupData.model_fields, *pyinfra_keys()] if len(loc) == 1 else list(Embedder.model_fields)
        close = _close_names(str(loc[-1]), known)
        hint = f"Did you mean {', '.join(close)}?" if close else \
            "Every setting is defined, with its meaning and unit, in group_data/all.py or group_data/gx10.py"
        return SettingError(key, err["input"], "a known setting name", hint)
    if not loc:
        return SettingError("settings", "<group data>", "a mapping of setting names to values", err["msg"])
    setting = _loc_text(loc)
    if err["type"] == "missing":
        return SettingError(setting, _Missing(), _describe(GroupData, loc) or "a value",
                            "Every setting needs a line in group_data/ (group_data/all.py or gx10.py)")
    valid = _describe(GroupData, loc) or err["msg"].removeprefix("Input should be ")
    if err["type"] == "value_error" and str(err.get("ctx", {}).get("error", "")):
        valid = str(err["ctx"]["error"])  # a rule's own words: what exactly is wrong with this value
    hint = err["msg"] if err["type"] not in ("greater_than", "greater_than_equal", "less_than", "less_than_equal",
                                             "value_error", "string_pattern_mismatch") else ""
    return SettingError(setting, err["input"], valid, _quote_hint(err, loc) or hint)


def _quote_hint(err: dict, loc: tuple) -> str:
    """A number where text belongs (CUDA_VERSION=13.0, an env value of 1): how to write it as text. pyinfra reads a
    --data value as JSON, so an unquoted 13.0 arrives as a number."""
    value = err["input"]
    if err["type"] != "string_type" or type(value) not in (int, float):
        return ""
    if len(loc) > 1:
        return f'{value!r} was read as a number: write it in quotes, "{value}"'
    return (f'{value!r} was read as a number: write it in quotes, {loc[0]} = "{value}" in group data, or '
            f"--data '{loc[0]}=\"{value}\"' (pyinfra reads a --data value as JSON)")


def _close_names(name: str, known) -> list[str]:
    """Known names close to `name`, case-insensitively (coding_model -> CODING_MODEL), as they are spelled."""
    by_lower = {k.lower(): k for k in known}
    return [by_lower[c] for c in difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.6)]


def _order(err: dict) -> int:
    return 0 if err["type"] == "extra_forbidden" else 1  # a typo'd key also makes its intended key "missing"


def pyinfra_keys() -> frozenset[str]:
    """Host data keys pyinfra itself reads: every connector's connection keys (ssh_*, fake_*, docker_*, ...) and
    the global-argument defaults (_sudo, _env, ...)."""
    return _pyinfra_keys()


@lru_cache(maxsize=1)
def _pyinfra_keys() -> frozenset[str]:
    from importlib.metadata import entry_points

    from pyinfra.api.arguments import all_global_arguments

    keys = {name for name, _ in all_global_arguments() if name.startswith("_")}
    for ep in entry_points(group="pyinfra.connectors"):  # as pyinfra.api.connectors.get_all_connectors loads them
        try:
            keys |= set(getattr(ep.load(), "data_meta", {}))
        except Exception:  # noqa: BLE001 - a connector whose optional dependency is missing has no keys to allow
            continue
    return frozenset(keys)


def validate(data: dict) -> GroupData:
    """The merged host data, checked against the schema; pyinfra's own keys and the inventory's are let through."""
    if not isinstance(data, dict):
        raise SettingError("settings", type(data).__name__, "a mapping of setting names to values")
    allowed = pyinfra_keys() | INVENTORY_KEYS
    settings = {k: v for k, v in data.items() if k not in allowed}
    for key, value in settings.items():
        _one_line(key, value)
    try:
        cfg = GroupData.model_validate(settings)
    except ValidationError as exc:
        errors = sorted(exc.errors(include_url=False), key=_order)
        raise _error(errors[0], data) from None
    return cfg


def ssh_port(data: dict) -> int:
    """The port the deploy reaches sshd on (pyinfra's ssh_port host data; 22 by default)."""
    port = data.get("ssh_port")
    return port if isinstance(port, int) and not isinstance(port, bool) else 22
