"""Every tunable of the deploy, for every host. Each line: what it is, and its unit.

Per-box choices (the coding model, KV budget, embedders) live in group_data/gx10.py; the simulated Spark's
differences live in group_data/sim.py and nowhere else.
"""

# --- what the box is (preflight refuses a host that is not this) -----------------------------------------
EXPECTED_ARCH = ["aarch64"]  # `uname -m` values accepted; GX10 is arm64
EXPECTED_OS = ["ubuntu 24.04"]  # "<ID> <VERSION_ID>" from /etc/os-release accepted; DGX OS 7 is Ubuntu 24.04
REQUIRED_GPU = "GB10"  # substring `nvidia-smi --query-gpu=name` must contain (case-insensitive)
REQUIRED_COMPUTE_CAP = "12.1"  # `nvidia-smi --query-gpu=compute_cap` of a GB10 (sm_121)
DGX_RELEASE_FILE = "/etc/dgx-release"  # present on DGX OS: driver + CUDA come with the OS, never from us

# --- memory and bandwidth of the box (the capacity planner's inputs) --------------------------------------
BOX_USABLE_MEMORY_GIB = 121.6  # unified memory CUDA sees on a GX10, GiB
BOX_MEMORY_BANDWIDTH_GBPS = 273  # LPDDR5x bandwidth, GB/s (1e9 bytes/s); the decode roofline's numerator
OS_RESERVE_GIB = 6.0  # kept free for the OS, sshd, nginx, page cache, GiB
PLAN_MEASURED_TOLERANCE = 0.25  # planned vs vLLM-reported KV tokens: relative gap above which health warns

# --- NVIDIA driver and CUDA (skipped entirely on DGX OS) -------------------------------------------------
NVIDIA_DRIVER_BRANCH = 580  # minimum driver major version
CUDA_VERSION = "13.0"  # CUDA toolkit major.minor
CUDA_HOME = "/usr/local/cuda-13.0"  # where cuda-toolkit-13-0 installs; its bin/nvcc proves CUDA is present
NVIDIA_KEYRING_DEB_URL = (  # cuda-keyring package: installs NVIDIA's signing key and the ubuntu2404/sbsa repo list
    "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/sbsa/cuda-keyring_1.1-1_all.deb"
)
NVIDIA_PREREQ_PACKAGES = ["curl", "ca-certificates"]  # what fetching NVIDIA's keyring package needs first
NVIDIA_DRIVER_PACKAGES = ["nvidia-driver-pinning-580", "nvidia-open-580"]  # apt packages: pin, then open driver
CUDA_PACKAGES = ["cuda-toolkit-13-0"]  # apt packages for the CUDA 13.0 toolkit
APT_CACHE_TIME_S = 3600  # seconds an `apt-get update` stays fresh for the deploy

# --- system packages the services need --------------------------------------------------------------------
SYSTEM_PACKAGES = ["python3-venv", "libnuma1", "curl", "nginx", "earlyoom", "rsync"]  # libnuma1: vLLM's _C links it
VLLM_BUILD_PACKAGES = []  # compilers vLLM needs at run time on this platform (none with CUDA wheels)

# --- vLLM ----------------------------------------------------------------------------------------------------
VLLM_VERSION = "0.32.0"  # vLLM release every service runs (same on the simulated Spark's CPU build)
VLLM_DIST = "vllm"  # pip distribution whose installed version is checked against VLLM_VERSION
VLLM_PIP_REQUIREMENT = (  # what pip installs: the aarch64 CUDA 13 wheel from vLLM's release assets
    "https://github.com/vllm-project/vllm/releases/download/v0.32.0/"
    "vllm-0.32.0+cu130-cp38-abi3-manylinux_2_28_aarch64.whl"
)
VLLM_PIP_EXTRA_INDEX_URLS = ["https://download.pytorch.org/whl/cu130"]  # where torch's cu130 build comes from
VLLM_PIP_CONSTRAINTS = []  # pip constraint lines (pins for the dependency resolver)
VLLM_PIP_REMOVE = []  # distributions removed after install (none on a real box)
VLLM_METADATA_ALIAS = ""  # when VLLM_DIST is not "vllm": version to register as a metadata-only "vllm" dist
PIP_FIND_LINKS = []  # local wheel directories on the box (an air-gapped install points these at a wheelhouse)
PIP_NO_INDEX = False  # True: install only from PIP_FIND_LINKS, never from an index
PIP_VERSION = "26.3"  # pip version installed into the venv first (old pips mis-resolve local versions)
# --- versioned vLLM venvs (issue 14) ---
VLLM_VENVS_KEEP = 2  # venvs kept under SPARKCTL_HOME/venvs (newest first) besides any a unit still names

# --- paths on the box ------------------------------------------------------------------------------------------
SPARKCTL_HOME = "/opt/sparkctl"  # versioned vLLM venvs (venvs/) and the helper scripts (bin/) the deploy uploads
MODEL_STORE = "/srv/models"  # Hugging Face cache root for every checkpoint (hub/ below it)
ENV_DIR = "/etc/sparkctl"  # root-only: one env file per service, the previous one kept beside it
STATE_DIR = "/var/lib/sparkctl"  # service user's home: JIT/compile/autotune caches, rollout stamps
SERVICE_USER = "vllm"  # system user every vLLM service runs as

# --- services ----------------------------------------------------------------------------------------------------
LISTEN_ADDRESS = "127.0.0.1"  # every vLLM binds here; only nginx's TLS port is reachable from outside
CODER_PORT = 8000  # TCP port of the coding model's vLLM
EMBEDDER_PORTS = [8001, 8002]  # TCP ports of the embedders, in EMBEDDERS order
CODER_SERVED_NAME = "coder"  # OpenAI model id and URL prefix of the coding model; unchanged by a flip
CODER_MAX_NUM_SEQS = 8  # --max-num-seqs: concurrent sequences the coder schedules
CODER_MAX_NUM_BATCHED_TOKENS = 16384  # --max-num-batched-tokens: prefill chunk per step, tokens
VLLM_COMMON_ARGS = []  # extra `vllm serve` flags for every service
VLLM_EXTRA_ENV = {}  # extra environment for every vLLM service (name -> value)
VLLM_ENGINE_READY_TIMEOUT_S = 1800  # VLLM_ENGINE_READY_TIMEOUT_S: seconds vLLM waits for its engine to load
SERVICE_RESTART_SEC = 30  # RestartSec=: seconds between automatic restarts, s
SERVICE_START_LIMIT_INTERVAL_S = 3600  # StartLimitIntervalSec=: window for counting restarts, s
SERVICE_START_LIMIT_BURST = 3  # StartLimitBurst=: starts allowed in the window before systemd gives up
SERVICE_STOP_TIMEOUT_S = 120  # TimeoutStopSec=: seconds a stopping vLLM gets before SIGKILL
SERVICE_NOFILE = 65536  # LimitNOFILE=: open files per service
NVIDIA_DEVICES = ["char-nvidia-frontend", "char-nvidiactl", "char-nvidia-uvm",
                  "char-nvidia-caps"]  # DeviceAllow= device groups (rw) CUDA needs (/proc/devices names)

# --- readiness --------------------------------------------------------------------------------------------------
HEALTH_READY_TIMEOUT_S = 1800  # seconds a (re)started service may take to answer /v1/models (GB10: 2-15 min)
HEALTH_POLL_INTERVAL_S = 2  # seconds between readiness polls
HEALTH_JOURNAL_LINES = 40  # journal lines shown when a service fails its health check
HEALTH_REQUEST_TIMEOUT_S = 7200  # client timeout of the health check's real requests, s
# --- safe change: drained, gated, reversible rollouts (issue 14) ---
# A generation of 20-30K tokens is normal here; the 27B coder decodes ~20 tokens/s on a GX10 (273 GB/s over
# ~14 GB of weights read per token), so one that has just started needs ~1500 s: 1800 s lets it finish.
DRAIN_TIMEOUT_S = 1800  # longest wait for vllm:num_requests_running (+ waiting) to reach 0 before a restart, s
DRAIN_RETRY_AFTER_S = 30  # Retry-After the proxy sends with its 503 while a served model drains, s
DRAIN_DIR = "/etc/nginx/sparkctl-drain"  # box: <served>.conf here = the proxy answers 503 for that model
ROLLOUT_RETRY_FAILED = False  # True: try again a candidate the box remembers as failed (or --data ...=True)
ROLLOUT_FAILED_KEEP = 20  # failed candidates remembered per service (hash, when, why, journal); older ones forgotten

# --- checkpoints (Hugging Face) ---------------------------------------------------------------------------------
HF_ENDPOINT = "https://huggingface.co"  # Hub (or mirror) the box downloads from
HF_DOWNLOAD_WORKERS = 8  # parallel file downloads per checkpoint
MODEL_LOCK_FILE = "models.lock.json"  # committed lock: catalog revision -> commit sha + file listing
DISK_HEADROOM_GIB = 20  # free space that must remain under MODEL_STORE after pending downloads, GiB
CATALOG_OVERRIDES = {}  # per-model field overrides of sparkctl/config/catalog.py (model key -> {field: value})

# --- TLS proxy (nginx) -----------------------------------------------------------------------------------------
PROXY_PORT = 443  # the one public port: TLS, bearer token, one path prefix per served model
PROXY_SERVER_NAME = "_"  # nginx server_name
PROXY_READ_TIMEOUT_S = 7200  # proxy_read_timeout: a 10-minute value once cut long reasoning silently, s
PROXY_SEND_TIMEOUT_S = 7200  # proxy_send_timeout / send_timeout, s
PROXY_TIMEOUT_FLOOR_S = 7200  # timeouts below this are warned about before deploy, s
PROXY_MAX_BODY_MB = 64  # client_max_body_size: a 262K-token prompt (~1 MB text) plus images, MiB
TLS_CERT_FILE = ""  # control-machine path of the server certificate chain (PEM); empty: generate a local CA
TLS_KEY_FILE = ""  # control-machine path of its private key (PEM)
TLS_SERVER_NAMES = []  # extra DNS names / IPs for a generated certificate (the host address is always in)
SECRETS_DIR = "secrets"  # control-machine directory (git-ignored) for api_token, hf_token and the generated PKI

# --- OOM guard --------------------------------------------------------------------------------------------------
EARLYOOM_MIN_FREE_PERCENT = 4  # earlyoom -m: act when available memory falls below this, %
EARLYOOM_PREFER = "^(vllm|VLLM|python3?)"  # earlyoom --prefer: process names killed first (vLLM's processes)
EARLYOOM_AVOID = "^(sshd|systemd|nginx|journald)$"  # earlyoom --avoid: never kill these
EARLYOOM_REPORT_INTERVAL_S = 3600  # earlyoom -r: memory report in its journal every this many seconds
SSHD_MEMORY_MIN = "64M"  # MemoryMin= for sshd: the operator can always log in
SSHD_OOM_SCORE_ADJUST = -900  # OOMScoreAdjust= for sshd (-1000..1000): the kernel kills it last
VLLM_OOM_SCORE_ADJUST = 500  # OOMScoreAdjust= for every vLLM service (-1000..1000): the kernel kills it first

# --- two Sparks (README "A second Spark") ------------------------------------------------------------------------
SPARK_TOPOLOGY = "replicas"  # replicas | split | tensor-parallel
TP_HEAD = ""  # tensor-parallel: inventory name of the head (rank 0, behind the proxy); empty: the first host
TP_BACKEND = "native"  # tensor-parallel launcher: native (vLLM --nnodes/--node-rank, no Ray) | ray
TP_MASTER_PORT = 29501  # vLLM's native multi-node rendezvous port on the head's CX7 address
RAY_VERSION = "2.55.1"  # ray[default] installed into the venv when TP_BACKEND = "ray"
RAY_PORT = 6379  # `ray start --head --port`
CX7_INTERFACES = ["enp1s0f1np1", "enP2p1s0f1np1"]  # the two "twin" netdevs of the linked QSFP port
CX7_HCAS = ["rocep1s0f1", "roceP2p1s0f1"]  # their RDMA devices (NCCL_IB_HCA lists both)
CX7_ADDRESSES = {  # per host: one address per twin interface (CIDR), each twin on its own subnet
    "spark-1": ["192.168.100.10/24", "192.168.101.10/24"],
    "spark-2": ["192.168.100.11/24", "192.168.101.11/24"],
}
CX7_NETPLAN_FILE = "/etc/netplan/40-cx7.yaml"  # netplan file written for the link (mode 0600)
CX7_MANAGE_NETPLAN = True  # write CX7_NETPLAN_FILE and `netplan apply` when it changes
CHECKPOINT_SYNC_KEY = "cx7-sync"  # tensor-parallel: ssh key (in SECRETS_DIR) the worker uses to copy checkpoints
GATEWAY_HANDOFF_DIR = "handoff"  # control machine: endpoints.json + Kubernetes manifests for the gateway
GATEWAY_NAMESPACE = "carouter"  # Kubernetes namespace of the rendered Service/EndpointSlice manifests
GATEWAY_K8S_VERSION = "1.30"  # Kubernetes schema version the manifests are validated against

# --- bench probe and acceptance checks --------------------------------------------------------------------------
BENCH_STREAMS = [1, 2, 4, 8]  # concurrent streams swept by `sparkctl bench`
BENCH_WINDOW_S = 40  # decode measurement window, s
BENCH_MAX_TOKENS = 1024  # max_tokens per probe request
BENCH_PREFILL_TOKENS = 12288  # the fresh prefill after the decode window, tokens
BENCH_CLIENT_TIMEOUT_S = 7200  # bench/niah/evals client timeout; no retries, s
BENCH_IGNORE_EOS = False  # True: requests run to BENCH_MAX_TOKENS even past end-of-sequence (random-weight models)
