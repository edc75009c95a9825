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
# The least KV budget an embedder gets when nothing tells its layers (the built-in embedders' entries type none, and
# an unrefreshed lock has no config.json): a few thousand tokens of a small embedder's KV, half the shipped 2 GiB;
# with its layer facts the check holds the budget to one full request instead, GiB
EMBEDDER_KV_FLOOR_GIB = 1.0
# vLLM refuses to start an engine when the box's free memory (MemAvailable on the GB10's unified memory) is below
# total x --gpu-memory-utilization (vllm/v1/worker/utils.py request_memory, at every CUDA start, whatever
# --kv-cache-memory-bytes says); its default 0.92 asks for 111.9 GiB and refuses the second engine on the box. Each
# service is given its planned footprint (resident + KV) plus this margin over BOX_USABLE_MEMORY_GIB, and `check`
# walks every start the deploy can make against it (sparkctl/capacity/admission.py). The margin is the plan's own
# uncertainty: an engine is refused at start, not OOM-killed later, when less than its plan + this is free, GiB
VLLM_ADMISSION_MARGIN_GIB = 2.0
# What a starting vLLM service already holds when vLLM takes its memory snapshot (its API server, the engine process,
# the CUDA context): that snapshot's free memory is the box's less this, so every start the walk replays is judged
# with it. GB10 owners report idle MemAvailable of 113-116 GiB against ~110.3 GiB at vLLM's snapshot, about 3 GiB
# (../shared/reference/spark-vllm.md section 0 item 11, community reports), GiB
VLLM_STARTING_ENGINE_GIB = 3.0
# The page cache before every vLLM start (the unit's ExecStartPre=+, as root outside the sandbox: sparkctl/box/
# page_cache.py), so vLLM's memory snapshot is taken after it: on the GB10's unified memory cached file pages fill
# the same pool as the engines (a flip leaves the stopped coder's checkpoint cached). "checkpoints": posix_fadvise
# DONTNEED on every file under MODEL_STORE/hub (targeted: only the checkpoints' clean pages, no global sync behind a
# download being written); "drop-caches": NVIDIA's playbooks' `sync; echo 3 > /proc/sys/vm/drop_caches` (every
# clean cache on the box); "off": nothing. One of checkpoints, drop-caches, off
PAGE_CACHE_EVICTION = "checkpoints"
# The simulated Spark's stand-in for the GB10's unified-memory pool (group_data/sim.py): a script run before every
# vLLM start (ExecStartPre=+) that applies vLLM's own request_memory against the pool less what the box's other
# running vLLM services hold by their plan. "" on a real box: vLLM itself reads the real pool at every start
UNIFIED_MEMORY_STANDIN = ""
PLAN_MEASURED_TOLERANCE = 0.25  # planned vs measured KV capacity, relative gap (fraction): above it the health
# table warns (vLLM's startup log) and the plan flags its estimate against the catalog's production measurement

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
# What vLLM compiles with at run time on the box: Triton (Qwen3.8's Gated DeltaNet layers run as Triton kernels)
# builds its launcher with the system C compiler against Python.h at first use; without them the engine dies at
# start-up after a clean install ("Python.h: No such file or directory", vllm-project/vllm issue #27890)
VLLM_BUILD_PACKAGES = ["build-essential", "python3-dev"]  # Debian packages: C compiler, Python.h for python3

# --- vLLM ----------------------------------------------------------------------------------------------------
VLLM_VERSION = "0.32.0"  # vLLM release every service runs (same on the simulated Spark's CPU build)
VLLM_DIST = "vllm"  # pip distribution whose installed version is checked against VLLM_VERSION
# What pip installs, from PyPI: vLLM's aarch64 wheel there is its CUDA 13 build (it requires torch 2.13.0, whose
# aarch64 wheel requires nvidia-*-cu13 and triton); `python -m sparkctl check --resolve` resolves it for the box
VLLM_PIP_REQUIREMENT = "vllm==0.32.0"  # a pip requirement (name and version specifier)
VLLM_PIP_URL_OK = False  # True allows a bare URL or path (http(s)://, file:, a .whl) as VLLM_PIP_REQUIREMENT
VLLM_PIP_EXTRA_INDEX_URLS = []  # index URLs besides PyPI (a second torch index only if a setting asks: none)
VLLM_PIP_CONSTRAINTS = []  # pip constraint lines (pins for the dependency resolver)
VLLM_PIP_REMOVE = []  # distributions removed after install (none on a real box)
VLLM_METADATA_ALIAS = ""  # when VLLM_DIST is not "vllm": version to register as a metadata-only "vllm" dist
PIP_FIND_LINKS = []  # local wheel directories on the box (an air-gapped install points these at a wheelhouse)
PIP_NO_INDEX = False  # True: install only from PIP_FIND_LINKS, never from an index
PIP_VERSION = "26.3"  # pip version installed into the venv first (old pips mis-resolve local versions)
# what the box's pip installs for, to resolve VLLM_PIP_REQUIREMENT on the control machine (check --resolve):
BOX_PIP_PLATFORMS = ["manylinux_2_39_aarch64"]  # pip platform tags: Ubuntu 24.04's glibc 2.39 on arm64 (older
# manylinux_2_x tags down to 2_17 are accepted too, as the box's pip does); empty: this machine's own platform
BOX_PYTHON_VERSION = "3.12"  # major.minor of the python3 the venv is made with (Ubuntu 24.04's)
PIP_FIND_LINKS_HERE = {}  # PIP_FIND_LINKS directory on the box -> its copy on this machine (repo-relative path)
# --- where the venv's wheels come from: downloaded once per requirement set by the control machine, copied to each
# box that builds the venv, installed there with pip --no-index --require-hashes (sparkctl/check/wheelhouse.py) ---
# the control machine's wheelhouse cache (repo-relative or absolute; created when missing): one directory per set
WHEELHOUSE_CACHE = ".cache/wheelhouse"  # a directory on the control machine
# a directory of wheels on the control machine the cache is built from instead of the index (a mirror, a copy
# carried to a site without Internet; repo-relative or absolute)
WHEELHOUSE_FROM = ""  # a directory on the control machine; "": the package index
# --- versioned vLLM venvs: a new vLLM is built beside the running one ---
VLLM_VENVS_KEEP = 2  # venvs kept under SPARKCTL_HOME/venvs (newest first) besides any a unit still names
# --- the device check: a new venv runs once in the vLLM unit's own sandbox before any service uses it ---
# commands run as root once per boot, before any vLLM or Ray unit and the device check (sparkctl-devices.service,
# which they Want and start After=; preflight runs them too): the sandbox (NoNewPrivileges, DevicePolicy=closed)
# keeps the setuid nvidia-modprobe from loading nvidia-uvm and creating /dev/nvidia-uvm and /dev/nvidia0 at the first
# CUDA use after a reboot; an absolute program and plain arguments each
VLLM_DEVICE_PREPARE = ["/usr/bin/nvidia-modprobe -u -c=0"]
# what the device check (sparkctl/box/device_check.py) runs, in order, the first failure refusing the venv: import
# (vLLM at VLLM_VERSION), toolchain (every program the JIT paths run resolves and answers in the unit's environment:
# ninja on PATH, nvcc and ptxas under CUDA_HOME, the C and C++ compilers, TRITON_PTXAS_BLACKWELL_PATH when set), cuda
# (CUDA init, REQUIRED_COMPUTE_CAP, memory), triton (a kernel compiled and run: C compiler, Python.h, ptxas),
# flashinfer (imported when installed), flashinfer_jit (vLLM's has_flashinfer() is True, and FlashInfer JIT-builds
# and runs one small module, its RMSNorm, in a fresh workspace), torch_compile (inductor on the CPU: C++ compiler)
DEVICE_CHECKS = ["import", "toolchain", "cuda", "triton", "flashinfer", "flashinfer_jit"]
DEVICE_CHECK_TIMEOUT_S = 600  # RuntimeMaxSec= of the device check's transient unit: longest it may run, s

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
# --- the GB10's runtime: what the kernels vLLM compiles at first use must target (sm_121a) ---
# In every vLLM service's environment (and the Ray units'); VLLM_EXTRA_ENV may not repeat a name (check).
# CUTE_DSL_ARCH: NVIDIA's CuTe DSL (nvidia-cutlass-dsl, which vllm 0.32.0 requires: ../shared/reference/spark-vllm.md
# §2) compiles for this arch; the community Laguna single-Spark recipe sets sm_121a (spark-vllm.md §7 [C]).
# FLASHINFER_CUDA_ARCH_LIST: FlashInfer's JIT (flashinfer/jit) builds for these; 12.1a is what GB10 recipes set beside
# it (community recipes; not in the shared reference notes). {} on the simulated Spark (no GPU). name -> value
GPU_ARCH_ENV = {"CUTE_DSL_ARCH": "sm_121a", "FLASHINFER_CUDA_ARCH_LIST": "12.1a"}
# Triton's ptxas for the GB10, rendered as TRITON_PTXAS_BLACKWELL_PATH when set: Triton 3.7 assembles for sm_90 and
# newer (the GB10's sm_121a) with its bundled `ptxas-blackwell` (CUDA 13.1's, which knows sm_121a) and reads this
# variable to replace it (triton/backends/nvidia/compiler.py get_ptxas, triton/knobs.py nvidia.ptxas_blackwell);
# TRITON_PTXAS_PATH only covers older GPUs. "" = the bundled one. Set f"{CUDA_HOME}/bin/ptxas" when a Triton kernel
# fails with "ptxas fatal: Value 'sm_121a' is not defined for option 'gpu-name'" (triton-lang/triton #8539, an older
# Triton on a DGX Spark; vllm PR #31338 documents the same error)
TRITON_PTXAS_BLACKWELL_PATH = ""  # an absolute path on the box, or ""
# --- the JIT toolchain in every engine's environment (the vLLM and Ray units, and so the device check) ---
# FlashInfer's JIT runs `ninja` from PATH, then nvcc under CUDA_HOME (which calls ptxas beside it); vLLM 0.32.0's
# has_flashinfer() (vllm/utils/flashinfer.py) is False unless shutil.which("ninja") and CUDA_HOME/bin/nvcc resolve,
# yet the FlashInfer attention backend (SM12x with FP8 KV) and sampler still JIT at the profile run and die with
# FileNotFoundError 'ninja' (flashinfer PR #3386). The venv's own `bin/ninja` (pip's, a vLLM dependency) is on no
# systemd default PATH, so every unit renders PATH = the venv's bin, CUDA_HOME's bin, then these directories, and
# CUDA_HOME itself (CUDA_HOME above)
ENGINE_SYSTEM_PATH = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]  # directories
# Every kernel cache the engine's libraries write, as {environment variable: directory under STATE_DIR}: rendered in
# every vLLM and Ray unit so that a restart finds what the last start compiled (a cold FlashInfer JIT on a GB10 has
# taken ~17 min: vllm PR #45179). None may sit in TMPDIR, the unit's RuntimeDirectory (/run/vllm-<service>), which
# systemd wipes at every stop; `rehearse` reports each one's files before a warm restart (docs/first-gx10.md)
KERNEL_CACHES = {
    "VLLM_CACHE_ROOT": "cache/vllm",  # vLLM: torch.compile artifacts, FlashInfer autotune results (vllm/envs.py)
    "TORCHINDUCTOR_CACHE_DIR": "cache/inductor",  # torch Inductor's compiled graphs and kernels
    "TRITON_CACHE_DIR": "cache/triton",  # Triton's compiled kernels (Qwen3.8's Gated DeltaNet layers)
    # FlashInfer's JIT modules: <this>/.cache/flashinfer/<arch>/cached_ops (flashinfer/jit/env.py; default: $HOME)
    "FLASHINFER_WORKSPACE_BASE": "cache/flashinfer",
    # NVIDIA's CuTe DSL (nvidia-cutlass-dsl: FlashInfer's GDN prefill on SM12x); default TMPDIR/<user>/
    # cutlass_python_cache, i.e. the RuntimeDirectory: recompiled at every start without it
    "CUTE_DSL_CACHE_DIR": "cache/cute-dsl",
    "CUDA_CACHE_PATH": "cache/nv",  # the CUDA driver's JIT cache of PTX compiled for the GPU
}
VLLM_ENGINE_READY_TIMEOUT_S = 3600  # VLLM_ENGINE_READY_TIMEOUT_S: seconds vLLM waits for its engine to load (as
# long as a cold first start may take, HEALTH_COLD_READY_TIMEOUT_S below: vLLM must not give up before the gate does)
SERVICE_RESTART_SEC = 30  # RestartSec=: seconds between automatic restarts, s
SERVICE_START_LIMIT_INTERVAL_S = 3600  # StartLimitIntervalSec=: window for counting restarts, s
SERVICE_START_LIMIT_BURST = 3  # StartLimitBurst=: starts allowed in the window before systemd gives up
SERVICE_STOP_TIMEOUT_S = 120  # TimeoutStopSec=: seconds a stopping vLLM gets before SIGKILL
SERVICE_NOFILE = 65536  # LimitNOFILE=: open files per service
# DeviceAllow= device groups (rw) CUDA needs, as /proc/devices names them (preflight refuses one the box lacks): the
# open 580 driver registers /dev/nvidia0.. as "nvidia" and /dev/nvidiactl as "nvidiactl" (older drivers: nvidia-frontend)
NVIDIA_DEVICES = ["char-nvidia", "char-nvidiactl", "char-nvidia-uvm", "char-nvidia-caps"]
# --- settings validation: what check refuses unless told otherwise
LISTEN_ADDRESS_NOT_LOOPBACK_OK = False  # True: allow a non-loopback LISTEN_ADDRESS (vLLM then answers without TLS/token)

# --- readiness --------------------------------------------------------------------------------------------------
HEALTH_READY_TIMEOUT_S = 1800  # seconds a (re)started service may take to answer /v1/models (GB10: 2-15 min)
# The first start of a build and model on this box (its JIT caches empty: a new venv, or a model it never served) may
# take longer than a warm one, compiling kernels: on a GB10 the first cold load of an 80B NVFP4 MoE with an empty
# FlashInfer JIT cache fails vLLM's 600 s engine wait every time and the second (warm) one passes (vllm #48031);
# one NVFP4 GEMM module alone took ~13 min to JIT on SM12x (flashinfer #4110); a GB10 cold load with a fresh FlashInfer
# JIT took ~17 min (vllm PR #45179) and Laguna-sized weights loaded in 549 s (vllm #56824), as issue #39 reports them
# (neither figure was found in the searched text of those threads: to be replaced by the first GX10's, first-gx10.md):
# 1,020 + 549 = 1,569 s, doubled for margin and rounded up to the hour. Past HEALTH_READY_TIMEOUT_S such a start is
# kept only while its engine's journal advances (HEALTH_STALL_S); a warm restart keeps HEALTH_READY_TIMEOUT_S
HEALTH_COLD_READY_TIMEOUT_S = 3600  # seconds a cold first start may take to answer, while its log advances
# the longest a healthy cold start's journal stays silent: one JIT module builds without a line until it is done,
# and the 13 min one above is the longest in the field; 20 min with margin. Past HEALTH_READY_TIMEOUT_S, a cold start
# whose journal has no new line for this long is judged wedged and rolled back
HEALTH_STALL_S = 1200  # a cold start's longest silence in its journal before it is wedged, s
HEALTH_POLL_INTERVAL_S = 2  # seconds between readiness polls
HEALTH_JOURNAL_LINES = 40  # journal lines shown when a service fails its health check
HEALTH_REQUEST_TIMEOUT_S = 7200  # client timeout of the health check's real requests, s
# --- readiness probe timeout ---
HEALTH_PROBE_MAX_TOKENS = 8  # the health step's real chat completion through the proxy: tokens it asks for
HEALTH_LISTENER_TIMEOUT_S = 10  # curl --max-time of one on-box readiness try of 127.0.0.1:<port>/v1/models, s

# --- safe change: drained, gated, reversible rollouts ---
# A generation of 20-30K tokens is normal here; the 27B coder decodes ~20 tokens/s on a GX10 (273 GB/s over
# ~14 GB of weights read per token), so one that has just started needs ~1500 s: 1800 s lets it finish.
DRAIN_TIMEOUT_S = 1800  # longest wait for vllm:num_requests_running (+ waiting) to reach 0 before a restart, s
# The least each wait above needs on this box, from what their comments say it takes: `check` refuses a wait set
# below its floor (BOX_TIMEOUT_FLOOR_MODE = "fail"), or warns about it ("warn": the simulated Spark, group_data/sim.py)
BOX_TIMEOUT_FLOORS_S = {  # setting -> its floor, s
    "HEALTH_READY_TIMEOUT_S": 900,  # a GB10 loads a model in 2-15 min
    "HEALTH_COLD_READY_TIMEOUT_S": 2400,  # a cold first start: ~17 min of JIT + 549 s of Laguna weights (above)
    "ACCEPTANCE_VERDICT_TIMEOUT_S": 240,  # the quick acceptance run takes 2-4 min on a GX10
    "DRAIN_TIMEOUT_S": 1500,  # a generation that has just started needs ~1500 s to finish (above)
}
BOX_TIMEOUT_FLOOR_MODE = "fail"  # fail: a wait below its floor is refused | warn: it is reported and kept
DRAIN_RETRY_AFTER_S = 30  # Retry-After the proxy sends with its 503 while a served model drains, s
DRAIN_DIR = "/etc/nginx/sparkctl-drain"  # box: <served>.conf here = the proxy answers 503 for that model
ROLLOUT_RETRY_FAILED = False  # True: try again a candidate the box remembers as failed (or --data ...=True)
# `pyinfra inventory.py retire.py --limit <box>` refuses to retire the last box serving a served model (its pool's
# coder, or an embedder), as no other box in the inventory, outside the --limit, is recorded serving it ready in the
# gateway hand-off: clients of that model would get 503 everywhere. True (on purpose, for one run: --data
# RETIRE_LAST_OF_POOL=True) retires it anyway
RETIRE_LAST_OF_POOL = False
ROLLOUT_GATE_MAX_TOKENS = 4  # the box gate's one real completion on loopback (the model must produce tokens), tokens
ROLLOUT_GATE_REQUEST_TIMEOUT_S = 120  # that request's (and the embedders' one embedding's) timeout, s
ROLLOUT_WORKER_SETTLE_S = 10  # tensor-parallel: a headless worker must stay up this long after its start to pass, s
ROLLOUT_FAILED_KEEP = 20  # failed candidates remembered per service (hash, when, why, journal); older ones forgotten

# --- checkpoints (Hugging Face) ---------------------------------------------------------------------------------
HF_ENDPOINT = "https://huggingface.co"  # Hub (or mirror) the box downloads from
HF_DOWNLOAD_WORKERS = 8  # parallel file downloads per checkpoint
MODEL_LOCK_FILE = "models.lock.json"  # committed lock: catalog revision -> commit sha + file listing
DISK_HEADROOM_GIB = 20  # free space that must remain under MODEL_STORE after pending downloads, GiB
# True: this box has no route to the Hugging Face hub or the package index: it gets its checkpoints from the fleet's
# boxes (HF_HUB_OFFLINE) and its wheels from the control machine's wheelhouse (pip --no-index); per box: the host's
# data (SPARK_AIRGAPPED=spark-3,spark-4 for real boxes; `sim up --airgapped NAME` on the simulated Spark)
AIRGAPPED = False
# The fleet's checkpoint fan-out (docs/checkpoint-fanout.md): the box that downloads each checkpoint from the Hub
# when no box of the run holds it yet; every other box copies it from a box that does. "": the first box in
# inventory order that keeps it and is not AIRGAPPED; a box name: that box (for the checkpoints it keeps)
CHECKPOINT_SEED_BOX = ""
# ssh key (in SECRETS_DIR) the boxes copy checkpoints from each other with: on every box of a fleet it may run only a
# read-only rrsync of MODEL_STORE, and only from the inventory's boxes' addresses (theirs and their CX7 links')
CHECKPOINT_FANOUT_KEY = "fleet-sync"
# rsync --bwlimit of each box-to-box checkpoint copy, in KiB/s (1024 bytes a second); 0: the link's full rate. Cap
# it when a copy would crowd a serving box's LAN (a source keeps serving while it sends)
CHECKPOINT_FANOUT_BWLIMIT_KIB_S = 0
CATALOG_OVERRIDES = {}  # per-model field overrides of sparkctl/config/catalog.py (model key -> {field: value})

# --- TLS proxy (nginx) -----------------------------------------------------------------------------------------
PROXY_PORT = 443  # the one public port: TLS, bearer token, one path prefix per served model
PROXY_SERVER_NAME = "_"  # nginx server_name
PROXY_READ_TIMEOUT_S = 7200  # proxy_read_timeout: a 10-minute value once cut long reasoning silently, s
PROXY_SEND_TIMEOUT_S = 7200  # proxy_send_timeout / send_timeout, s
PROXY_TIMEOUT_FLOOR_S = 7200  # timeouts below this are warned about before deploy (7200 at least: the lesson above), s
PROXY_MAX_BODY_MB = 64  # client_max_body_size: a 262K-token prompt (~1 MB text) plus images, MiB
TLS_CERT_FILE = ""  # control-machine path of the server certificate chain (PEM); empty: generate a local CA
TLS_KEY_FILE = ""  # control-machine path of its private key (PEM)
TLS_SERVER_NAMES = []  # extra DNS names / IPs for a generated certificate (the host address is always in)
SECRETS_DIR = "secrets"  # control-machine directory (git-ignored) for api_token, hf_token and the generated PKI
# --- proxy allow-list: the only paths the proxy publishes ---
PROXY_ROUTES = {  # per model role: the only vLLM routes published below /<served name>/; every other path is 404
    # OpenAI chat/completions/models, the Responses and Anthropic Messages APIs coding agents speak, and the
    # server-root /tokenize and /version the bench and NIAH probe read through the proxy
    "coder": ["/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/responses", "/v1/messages",
              "/v1/messages/count_tokens", "/tokenize", "/version"],
    "embedder": ["/v1/embeddings", "/v1/models", "/version"],
}

# --- OOM guard --------------------------------------------------------------------------------------------------
EARLYOOM_MIN_FREE_PERCENT = 4  # earlyoom -m: act when available memory falls below this, %
# earlyoom matches these POSIX extended regexes against /proc/<pid>/comm (the name, at most 15 characters)
# --prefer: vLLM's own processes, killed first: the API server ("vllm", the script's name), its engine and workers
# ("VLLM::EngineCore", "VLLM::Worker_TP0"... cut to 15 characters), Ray actors with TP_BACKEND = "ray" ("ray::...");
# never a bare "python"/"python3": the deploy's own helpers (rollout.py, fetch_checkpoint.py) run under those names
EARLYOOM_PREFER = "^(vllm|VLLM::.+|ray::.+)$"
# --avoid: what the box needs to stay reachable and serving ("systemd-journal" is journald's comm)
EARLYOOM_AVOID = "^(systemd|systemd-journal|systemd-logind|systemd-udevd|dbus-daemon|sshd|sshd-session|nginx)$"
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
RAY_DASHBOARD = True  # the Ray dashboard on the head (127.0.0.1:8265, with its module processes); False: a minimal one
CX7_INTERFACES = ["enp1s0f1np1", "enP2p1s0f1np1"]  # the two "twin" netdevs of the linked QSFP port
CX7_HCAS = ["rocep1s0f1", "roceP2p1s0f1"]  # their RDMA devices (NCCL_IB_HCA lists both)
CX7_ADDRESSES = {  # per host: one address per twin interface (CIDR), each twin on its own subnet
    "spark-1": ["192.168.100.10/24", "192.168.101.10/24"],
    "spark-2": ["192.168.100.11/24", "192.168.101.11/24"],
}
CX7_NETPLAN_FILE = "/etc/netplan/40-cx7.yaml"  # netplan file written for the link (mode 0600)
CX7_MANAGE_NETPLAN = True  # write CX7_NETPLAN_FILE and `netplan apply` when it changes
# MTU of both twins, bytes (netplan `mtu:`, with CX7_MANAGE_NETPLAN); 0: leave the interfaces' own (1500 on a CX-7).
# At 1500 RoCE ran with an active MTU of 1024 B (NVIDIA's perftest output, ../shared/reference/spark-vllm.md §5); 9000
# gives RoCE its 4096-B MTU and TCP (Gloo, the checkpoint copy) jumbo frames. dgx-spark-playbooks issue #25 and PR
# #103 propose it for the two-Spark link (the DGX Station two-node playbook sets it). PR #103's 3.04 -> 23.74 GB/s
# all_gather busbw came from rebuilding NCCL at its release tag with both twins and MTU 9000 already set, so MTU
# 9000's own share is unmeasured (spark-vllm.md: unconfirmed for NCCL/RoCE on a Spark); LINK_MIN_BUSBW_GBPS judges it
CX7_MTU = 9000
# --- what the pair's engines get for NCCL over the link (tensor-parallel only: the coder on head and worker, the Ray
# units; replicas and split render exactly as without these) ---
# DeviceAllow= groups (rw, /proc/devices names) NCCL's RDMA transport opens: libibverbs' /dev/infiniband/uverbs<N>
# (char major 231, "infiniband_verbs"). Not "infiniband_mad" (umad/issm: subnet management) nor rdma_cm (a "misc"
# device of librdmacm, which NCCL does not use: it swaps its queue pairs' addresses over its own sockets). Without it
# the units' DevicePolicy=closed hides the HCAs and NCCL falls back to TCP sockets over the link
RDMA_DEVICES = ["char-infiniband_verbs"]
# LimitMEMLOCK= of the pair's engines: RDMA pins (registers) NCCL's buffers against RLIMIT_MEMLOCK (the units hold no
# CAP_IPC_LOCK; systemd's default is 8M); NVIDIA's two-Spark vLLM recipe runs with `--ulimit memlock=-1`
# (spark-vllm.md §5). "infinity", a size as systemd reads it (64M), or "": systemd's default
TP_MEMLOCK = "infinity"
# The RoCE GID index NCCL uses, rendered as NCCL_IB_GID_INDEX when >= 0; -1: not set, NCCL picks it (its default -1:
# the RoCE v2 GID of the HCA's IPv4 address; NCCL_IB_ROCE_VERSION_NUM 2, NCCL_IB_ADDR_FAMILY AF_INET). NVIDIA's
# two-Spark recipe sets none (its NCCL environment: spark-vllm.md §5), and dgxllm re-resolves it from sysfs at every
# start (../shared/reference/peers.md): a fixed index goes stale when the twins' addresses change
NCCL_IB_GID_INDEX = -1
# The NCCL library vLLM's own communicator loads (PyNcclCommunicator, the tensor-parallel all-reduce), rendered as
# VLLM_NCCL_SO_PATH (vllm/envs.py; vllm/utils/nccl.py) when set; "": torch's bundled one (libnccl.so.2 from the
# nvidia-nccl wheel). TP=2 runs hanging in NCCL after 20-55 min of load were fixed by the system NCCL (vllm #41725,
# #42354: ../shared/reference/fleet.md). DGX OS's: /usr/lib/aarch64-linux-gnu/libnccl.so.2 (the libnccl2 package;
# the deploy does not install it). torch.distributed's own process groups keep torch's NCCL
NCCL_SYSTEM_LIBRARY = ""
# --- the link probe (sparkctl/box/link_probe.py: one all-reduce across the pair, what a rehearsal runs) ---
LINK_PROBE_BYTES = 1073741824  # the all-reduce's buffer, bytes (1 GiB; nccl-tests' 16 GB froze a Spark: PR #103)
# (at most 4 GiB, a quarter of what froze a Spark: the buffer and NCCL's own copies sit beside what vLLM holds)
LINK_PROBE_ITERS = 20  # timed all-reduces, after 5 warm-up ones (nccl-tests' defaults: -n 20, -w 5)
LINK_PROBE_BACKEND = "nccl"  # torch.distributed backend of the probe: nccl (CUDA, the link's RDMA) | gloo (CPU, TCP)
# Bus bandwidth the probe must reach, GB/s (1e9 B/s; nccl-tests' busbw); 0: no floor. Above one twin's line rate
# (100 Gb/s = 12.5 GB/s: a pair on one twin, or on TCP, stays under it), below what both twins measured (PR #103:
# 23.74 GB/s all_gather; issue #25: 18.94-20.95 at MTU 1500); NVIDIA's cluster script passes a switched all_gather at
# 21.875 GB/s, a ring at 10 (spark-vllm.md §5)
LINK_MIN_BUSBW_GBPS = 15.0
CHECKPOINT_SYNC_KEY = "cx7-sync"  # tensor-parallel: ssh key (in SECRETS_DIR) the worker uses to copy checkpoints
GATEWAY_HANDOFF_DIR = "handoff"  # control machine: endpoints.json + Kubernetes manifests for the gateway
GATEWAY_NAMESPACE = "carouter"  # Kubernetes namespace of the rendered Service/EndpointSlice manifests
GATEWAY_K8S_VERSION = "1.30"  # Kubernetes schema version the manifests are validated against

# --- checkpoint copy over the link: the worker's checkpoints come from the head ---
CHECKPOINT_SYNC_USER = "root"  # tensor-parallel: head account the worker copies as (root only: its authorized_keys)
CHECKPOINT_SYNC_SSH_OPTIONS = ["BatchMode=yes", "StrictHostKeyChecking=accept-new"]  # ssh -o options of that copy

# --- tensor-parallel as one unit: the worker's rollout follows the head's over the link ---
TP_PEER_KEY = "cx7-peer"  # ssh key (in SECRETS_DIR) each box of the pair reads the other's rollout status with (the
#                           worker's transaction its head's, the head's watchdog and restart the worker's); on either
#                           box it may run only the read-only `rollout.py status coder` (forced command), only from
#                           the other box's link address
TP_PEER_CALL_TIMEOUT_S = 20  # one read of the other box's rollout status over the link (ssh), s

# --- bench probe and acceptance checks --------------------------------------------------------------------------
BENCH_STREAMS = [1, 2, 4, 8]  # concurrent streams swept by `sparkctl bench`
BENCH_WINDOW_S = 40  # decode measurement window, s
BENCH_MAX_TOKENS = 1024  # max_tokens per probe request
BENCH_PREFILL_TOKENS = 12288  # the fresh prefill after the decode window, tokens
BENCH_CLIENT_TIMEOUT_S = 7200  # bench/niah/evals client timeout; no retries, s
BENCH_IGNORE_EOS = False  # True: requests run to BENCH_MAX_TOKENS even past end-of-sequence (random-weight models)
# --- bench/niah settings -------------------------------------------------------------------------------------
BENCH_AGREEMENT_TOLERANCE = 0.05  # counter vs client tokens: largest relative gap outside the scrape bracket, fraction
BENCH_SETTLE_S = 1.0  # wait after every stream has its first token, before the decode window opens, s
BENCH_IDLE_TIMEOUT_S = 120  # longest wait for vLLM to have no request in flight between phases, s
NIAH_MAX_TOKENS = 4096  # NIAH answer budget per request (reasoning models think first), tokens

# --- the first hour on a box: `python -m sparkctl rehearse` (docs/first-gx10.md) ----------------------------------
REHEARSE_OUT_DIR = "rehearsal"  # control machine: the report goes to <this>/<UTC date>/ unless --out names a directory
REHEARSE_SSH_TIMEOUT_S = 60  # one read of a box's units, journals and /proc/meminfo over ssh, s
REHEARSE_DEVICE_CHECK_TIMEOUT_S = 1800  # one run of the box's device check over ssh (first CUDA init, Triton compiles), s
REHEARSE_LINK_PORT = 29502  # the link probe's rendezvous port on the head's CX7 address (not TP_MASTER_PORT's); its
# buffer, iterations and backend are LINK_PROBE_*, its floor LINK_MIN_BUSBW_GBPS (with sparkctl/box/link_probe.py)
REHEARSE_LINK_TIMEOUT_S = 600  # both ranks of the link probe must finish within this, s
# `rehearse --cold-warm`: the longest one start of the coder may take (the cold one, its kernel caches moved aside):
# a cold FlashInfer JIT on a GB10 has taken ~17 min (vllm PR #45179) and Laguna-sized weights 549 s to load (vllm
# #56824): 1,569 s, and more than double that for what neither report covers (Triton, CuTe DSL, CUDA graphs), s
REHEARSE_COLD_WARM_TIMEOUT_S = 3600

# --- monitoring: node exporter, box facts, scrape paths, alerts, watchdog ---------------------------------
MONITORING_PACKAGES = ["prometheus-node-exporter"]  # Debian/Ubuntu packages: the real node exporter
NODE_EXPORTER_PORT = 9100  # node exporter's TCP port, bound to LISTEN_ADDRESS only (scraped through the proxy)
NODE_EXPORTER_DEFAULTS_FILE = "/etc/default/prometheus-node-exporter"  # the package's ARGS= file its unit reads
NODE_EXPORTER_COLLECTORS = [  # the only collectors enabled (--collector.disable-defaults): a small, known set
    "meminfo", "pressure", "textfile", "filesystem", "netdev", "cpu", "loadavg", "stat", "time", "uname",
]
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"  # node exporter's textfile collector directory (*.prom files)
BOX_FACTS_INTERVAL_S = 15  # how often the timer writes the GPU / model store / certificate / rollout facts, s
NVIDIA_SMI = "nvidia-smi"  # the nvidia-smi the box-facts script runs (PATH lookup)
SCRAPE_NODE_PATH = "node"  # the node exporter's scrape path on the proxy: https://<box>/node/metrics
PROMETHEUS_JOB_NAME = "sparkctl"  # job name of the hand-off's scrape job (the alert rules select on it)
PROMETHEUS_SCRAPE_INTERVAL_S = 15  # scrape_interval of the hand-off's job, s
PROMETHEUS_SCRAPE_TIMEOUT_S = 10  # scrape_timeout of the hand-off's job, s
PROMETHEUS_TOKEN_FILE = "/etc/prometheus/secrets/sparkctl-scrape-token"  # where the cluster's Prometheus mounts it
PROMETHEUS_CA_FILE = "/etc/prometheus/secrets/sparkctl-ca.pem"  # where the cluster's Prometheus mounts the CA
ALERT_MODEL_DOWN_FOR_S = 120  # a served model's scrape failing this long fires SparkServedModelDown, s
ALERT_KV_USAGE_RATIO = 0.9  # vllm:kv_cache_usage_perc above this (0-1) ...
ALERT_KV_USAGE_FOR_S = 600  # ... for this long fires SparkKVCacheFull, s
ALERT_WAITING_FOR_S = 300  # requests waiting (vllm:num_requests_waiting > 0) this long fires SparkRequestsWaiting, s
ALERT_MEM_AVAILABLE_FLOOR_GIB = 6.0  # MemAvailable below this (unified memory: GPU + CPU) ..., GiB
ALERT_MEM_AVAILABLE_FOR_S = 120  # ... for this long fires SparkMemAvailableLow, s
ALERT_CERT_EXPIRY_DAYS = 21  # TLS certificate expiring within this fires SparkCertificateExpiring, days
ALERT_SPEC_ACCEPTANCE_FRACTION = 0.6  # mean acceptance length below this share of the catalog's tokens_per_step ...
ALERT_SPEC_ACCEPTANCE_WINDOW_S = 900  # ... over this rate window (with drafts flowing) fires SparkSpecAcceptanceLow, s
ALERT_FRONT_DOOR_DOWN_FOR_S = 60  # no healthy box behind a served model's routers (or no router answering) this
# long fires SparkFrontDoorDown (its one URL answers 503 meanwhile), s
ALERT_FOR_S = 300  # how long the store/rollout/acceptance conditions must hold before they fire, s
WATCHDOG_INTERVAL_S = 10  # seconds between the watchdog's checks of each service
WATCHDOG_STALL_S = 120  # work pending (running/waiting) and no engine step for this long = wedged, s
WATCHDOG_PROBE_IDLE_S = 60  # an idle engine gets a 1-token loopback probe this often, s
WATCHDOG_PROBE_TIMEOUT_S = 30  # the probe must answer within this (no answer while idle = wedged), s
WATCHDOG_HTTP_TIMEOUT_S = 5  # /health and /metrics read timeout, s
WATCHDOG_MAX_RESTARTS = 3  # restarts of one service within WATCHDOG_WINDOW_S before the watchdog gives up
WATCHDOG_WINDOW_S = 21600  # the restart-counting window (6 h, as the Spark community's watchdogs), s
# how a wedged service is restarted: through the deploy's own transaction unit (sparkctl-rollout-<svc>), drained at
# the proxy, restarted on its committed configuration, gated, recorded; a non-zero exit is a failed restart.
# Placeholders, filled per service by the watchdog: {service} (coder, ...), {unit} (vllm-<svc>.service), {port},
# {served}, {kind} (chat|embed), {rollout} (env prefix + python + SPARKCTL_HOME/bin/rollout.py), {limits} (the
# rollout's HEALTH_*/DRAIN_*/ROLLOUT_GATE_* values as options), {peer} (a tensor-parallel head's coder: how its
# restart reads the worker and how long it waits for it, so the pair restarts as one unit; empty elsewhere, and
# required in tensor-parallel); e.g. "systemctl restart {unit}" skips the rollout (refused in tensor-parallel)
WATCHDOG_RESTART_COMMAND = ("{rollout} restart {service} --port {port} --served {served} --kind {kind} {limits} "
                            "{peer} --reason watchdog --wait")
WATCHDOG_STOP_COMMAND = "systemctl stop {unit}"  # how a service is left down after the watchdog gave up
# exits 0 while a rollout transaction owns the service ({service} = coder, ...): the watchdog then leaves it alone
WATCHDOG_ROLLOUT_ACTIVE_COMMAND = "systemctl is-active --quiet sparkctl-rollout-{service}.service"
STATUS_SSH_TIMEOUT_S = 10  # `sparkctl status`: one ssh round trip per box must finish within this, s

# --- acceptance: a changed coder is kept only if it is as fast and as right as it should be ---------------------
# After a rollout that changed what the coder serves passed health, the box keeps its transaction open and waits for
# a verdict; the control side runs this quick acceptance through the proxy (the bench probe's own code, shorter)
# and sends commit or rollback. The regression thresholds below are PROVISIONAL until set from the gate's measured
# noise (tests/e2e/test_acceptance.py prints five accepted runs' spread of each figure).
ACCEPTANCE_ENABLED = True  # run the quick acceptance after health when the coder's configuration changed
ACCEPTANCE_MODE = "fail"  # fail: a failed figure rolls the flip back | warn: report it and keep the flip
ACCEPTANCE_VERDICT_TIMEOUT_S = 1800  # how long the box waits for a verdict before deciding alone (fail: roll
# back; warn: keep), s; the quick run below takes about 2-4 minutes on a GX10
ACCEPTANCE_HISTORY_FILE = "acceptance/history.jsonl"  # below STATE_DIR: the box's accepted runs, append-only JSON
# lines (root-only: 0600 in a 0700 folder); the first accepted run of a configuration is its baseline
ACCEPTANCE_WINDOW_S = 10  # decode window of the quick run, s (the full bench: BENCH_WINDOW_S)
ACCEPTANCE_STREAMS = [1, 4]  # concurrent streams of the quick run: 1 and N (the full bench: BENCH_STREAMS); its
# requests are the bench's (BENCH_MAX_TOKENS, BENCH_IGNORE_EOS, the codegen workload), so a full bench recorded with
# `bench --record-baseline` is a baseline it lines up with
ACCEPTANCE_SPEC_ENABLED = True  # check speculative-decoding acceptance against the catalog's floor
ACCEPTANCE_SPEC_FLOOR_FRACTION = 0.6  # fail when the mean acceptance length (tokens per step), or a figure the
# catalog measured (acceptance rate, a draft position's rate), is below this fraction of the catalog's figure
# (Qwen MTP 2.5 tokens per step -> 1.5; a draft that never matches gives 1.0)
ACCEPTANCE_DECODE_ENABLED = True  # compare decode tok/s per stream count with this box's baseline
ACCEPTANCE_DECODE_MAX_REGRESSION = 0.15  # fail when decode tok/s is more than this fraction below the baseline
ACCEPTANCE_PREFILL_ENABLED = True  # fresh prefills (prefix-cache hits must stay 0), compared with the baseline
ACCEPTANCE_PREFILL_TOKENS = 12288  # its prompt length, tokens (the full bench's BENCH_PREFILL_TOKENS)
ACCEPTANCE_PREFILL_REPEATS = 3  # fresh prompts of that length, each on an idle server; the median sample is judged
# (one sample is at the mercy of one scheduler hiccup; a 12K prefill takes seconds on the GX10, so 3 cost little)
ACCEPTANCE_PREFILL_MAX_REGRESSION = 0.15  # fail when prefill tok/s is more than this fraction below the baseline
# What decode and prefill are judged against (docs/acceptance.md), per figure the first that has it: this box's
# baseline of the same configuration and workload (the limits above); after a changed vLLM version, vLLM build (its
# venv) or checkpoint revision, the baseline of this box's closest previous configuration of the same model,
# workload and topology; the catalog's published figures (the write-up's probe on the production GX10); else the
# planner's roofline only, and the run is provisional (no yardstick until an operator confirms it: `bench confirm
# @ID`). Each has its own limits. None of these GX10 limits is measured yet (no GX10 was at hand).
ACCEPTANCE_PREVIOUS_DECODE_MAX_REGRESSION = 0.15  # fail when decode tok/s is more than this fraction below the
# previous configuration's baseline (an upgrade is judged as strictly as a rerun: it is the change that regresses)
ACCEPTANCE_PREVIOUS_PREFILL_MAX_REGRESSION = 0.15  # the same for fresh-prefill tok/s, fraction
ACCEPTANCE_PUBLISHED_DECODE_MAX_REGRESSION = 0.3  # fail when decode tok/s is more than this fraction below the
# catalog's published figure: wider than a baseline's, it was another box of the class and 40 s windows, not 10
ACCEPTANCE_PUBLISHED_PREFILL_MAX_REGRESSION = 0.3  # the same for fresh-prefill tok/s, fraction
# The fixed anchors, beside the moving reference above, in every verdict: this box's anchor for the model, topology
# and workload (its first confirmed baseline under any vLLM version, build or revision) and the catalog's published
# figures where they apply. Each step of a chain of upgrades may pass its own limit; the sum of them may not.
ACCEPTANCE_ANCHOR_DECODE_MAX_REGRESSION = 0.35  # fail when decode tok/s is more than this fraction below an anchor
# (cumulative: wider than one step's 0.15, a little wider than the published tolerance 0.3 a first flip passed)
ACCEPTANCE_ANCHOR_PREFILL_MAX_REGRESSION = 0.35  # the same for fresh-prefill tok/s, fraction
ACCEPTANCE_PAIR_MIN_SPEEDUP = 1.0  # a tensor-parallel pair's decode and prefill must reach this multiple of what one
# box of the same model measured (this box's history) or published (the catalog); 0: the operator accepts a pair
# slower than one box (the check is printed, not judged)
ACCEPTANCE_SPEC_MIN_TOKENS_PER_STEP = 1.1  # speculative decoding fails below this mean acceptance length (tokens
# per step), catalog floor or none: a draft accepting (almost) nothing costs its forward passes and gives nothing;
# 1.0: off (no speculation at all gives exactly 1)
ACCEPTANCE_ROOFLINE_FLOOR_FRACTION = 0.05  # with nothing measured to compare with: fail when decode tok/s is below
# this fraction of the planner's roofline at that stream count (0: off); the write-up's lowest is Laguna at 8
# streams, 6.8 % of its roofline (7.4 % at 4), so only a gross failure trips it
ACCEPTANCE_KV_ENABLED = True  # vLLM's reported KV tokens against the plan (health only warns about it)
ACCEPTANCE_KV_MAX_SHORTFALL = 0.25  # fail when vLLM reports fewer KV tokens than planned by more than this
# fraction (the plan's own estimate tolerance, PLAN_MEASURED_TOLERANCE; more KV than planned never fails)
ACCEPTANCE_NIAH_ENABLED = True  # one needle-in-a-haystack cell must pass
ACCEPTANCE_NIAH_LENGTH = 32768  # its context length, tokens
ACCEPTANCE_NIAH_DEPTH = 50  # its needle depth, % of the haystack
ACCEPTANCE_FAIL_ON_PROBLEMS = True  # a quick run whose own figures cannot be trusted (client and counter tokens
# disagree, the prefill was not fresh) fails the gate rather than passing on numbers nobody can read
ACCEPTANCE_CLOCK_SKEW_S = 300  # a record dated later than the judge's clock plus this is refused, and the deploy
# refuses to append a run when the box's clock and the control machine's disagree by more than this, s (NTP keeps
# both within a second; a clock minutes off is a box whose records would stay "the latest" for ever)

# --- the fleet: rollouts in waves (README "A fleet"; sparkctl/fleet/) ---------------------------------------------
# Batches of boxes a coder rollout takes, as Ansible's `serial:` reads them: a number of boxes or a percentage of the
# fleet (a tensor-parallel pair counts as one), each wave done before the next starts, the last size repeated until
# every box is done. The first must be 1 (the canary, judged by acceptance before any other box is touched), the
# sizes may not shrink, and the last must be the whole fleet ("100%").
ROLLOUT_WAVES = [1, "25%", "100%"]
# at most this many boxes of any one pool out of service at once: a number, or a percentage of the pool (at least
# one box, never the whole pool: a pool of two never loses both); NVIDIA Dynamo's default is 25 %
MAX_UNAVAILABLE = "25%"
MAX_FAIL_PERCENTAGE = 0  # failed boxes a wave may have, % of the boxes it rolled out (0-100); past it no further box
# is touched and the deploy names the boxes it did not roll out (Ansible's max_fail_percentage: 0 = stop at one)
# What one box's coder rollout takes on a GX10, [low, high] seconds, for `plan`'s wall-time estimate only:
# drain: 0 (idle) to one agent request's whole generation (the write-up: 462K output tokens over 50 BigCodeBench
# problems, ~9.2K a request, at ~14 tok/s per stream with eight in flight: ~660 s)
ROLLOUT_ESTIMATE_DRAIN_S = [0, 660]
ROLLOUT_ESTIMATE_LOAD_S = [120, 900]  # restart to serving: "GB10: 2-15 min" (HEALTH_READY_TIMEOUT_S above)
# the first rollout of a new build or model (cold JIT caches): the ~17 min GB10 cold load, up to that plus 549 s of
# Laguna-sized weights (HEALTH_COLD_READY_TIMEOUT_S above, with its sources)
ROLLOUT_ESTIMATE_COLD_LOAD_S = [1020, 1569]
ROLLOUT_ESTIMATE_ACCEPTANCE_S = [120, 240]  # the quick acceptance: "about 2-4 minutes on a GX10" (above)

# --- the front door: vLLM's router on the `gateway` host (README "A fleet") ------------------------------------
# Clients use https://<gateway>:GATEWAY_FRONT_PORT/<served>/v1/... with the same bearer token as the boxes. nginx
# checks the token and passes each served model's allow-listed routes to its own vllm-router (one process per
# served model: a router in regular mode balances one set of workers and does not route by the request's `model`);
# the router reaches each box through a loopback bridge (nginx again) that adds the token and verifies the box's
# certificate, so the router itself holds no secret and never sees vLLM's port.
GATEWAY_FRONT_PORT = 443  # the gateway's public TLS port (on a box that is also the gateway: not PROXY_PORT), TCP port
GATEWAY_PACKAGES = ["nginx", "python3-venv", "nftables"]  # Debian/Ubuntu packages the gateway host needs (nftables:
# the bridge's firewall below)
ROUTER_VERSION = "0.1.17"  # PyPI vllm-router release every router runs (its own venv per version)
ROUTER_HOME = "/opt/sparkctl-router"  # the router venvs (venvs/vllm-router-<version>) on the gateway host
ROUTER_USER = "vllm-router"  # system user every router runs as (no home, no shell, no secret readable)
ROUTER_POLICY = "cache_aware"  # --policy: random | round_robin | cache_aware | kv_aware | power_of_two |
# consistent_hash | sticky_least_loaded (vllm-router 0.1.17 --help); cache_aware keeps a session's growing prefix
# on the box that has it in its KV cache and falls back to the least loaded box when the load is unbalanced
ROUTER_PORT_BASE = 30000  # the routers' loopback ports: served models in name order get this, +1, ..., TCP port
ROUTER_METRICS_PORT_BASE = 29000  # their Prometheus ports (loopback; published on the front's scrape paths), TCP port
# each served model has a standby router too: nginx sends to it only while the primary does not answer, so the deploy
# restarts one, then the other, and no request is refused (the primary keeps the cache-aware state that routes)
ROUTER_STANDBY_PORT_BASE = 30100  # the standby routers' loopback ports, as ROUTER_PORT_BASE, TCP port
ROUTER_STANDBY_METRICS_PORT_BASE = 29100  # their Prometheus ports, TCP port
ROUTER_BRIDGE_PORT = 30999  # the loopback bridge the routers reach the boxes through (HTTP in, TLS out), TCP port
ROUTER_SCRAPE_PATH = "router"  # the routers' scrape paths on the front: /<this>/<served>/metrics (scrape token)
ROUTER_HEALTH_PATH = "/health"  # the health path the router asks each box for, below /<served> (vLLM's /health)
ROUTER_HEALTH_INTERVAL_S = 5  # --health-check-interval-secs: seconds between two health checks of one box, s
# Bounds of the routers' health settings: each wait at most 60 s, each threshold at most 10, and the health window,
# ROUTER_HEALTH_FAILURE_THRESHOLD x (ROUTER_HEALTH_INTERVAL_S + ROUTER_HEALTH_TIMEOUT_S), at most 120 s: a dead or hung
# box stays in every router's rotation that long, and the requests sent to it meanwhile fail or wait.
# vLLM's /health reads one flag (AsyncLLM.check_health: is the engine dead?); under load its answer waits only for the
# API server's event loop. On the simulated Spark, where the engines' work shares 2 cores with that loop, the slowest
# of 1,692 answers under 6 streams of 3,500 tokens was 0.956 s (group_data/sim.py). A GX10 runs the engine on the
# GPU and the API server on its own of 20 cores: 5 s is 5x the sim's slowest, and two in a row must fail (unmeasured
# on a GX10 under load: `rehearse` and the bench probe's streams are where to read it).
ROUTER_HEALTH_TIMEOUT_S = 5  # --health-check-timeout-secs: one health check's timeout (the box's nginx: the same), s
# (at most 60 s: 60x the slowest /health measured under load)
ROUTER_HEALTH_FAILURE_THRESHOLD = 2  # consecutive failed checks before a box is out of rotation (here: 10-15 s)
ROUTER_HEALTH_SUCCESS_THRESHOLD = 2  # consecutive passed checks before a box is back in rotation
# A rollout (and the watchdog's restart) first fails the box's router health path alone
# (DRAIN_DIR/<served>.unready.conf) so every router takes the box out of rotation while its API still serves, then
# waits this long before the drain's 503s: no client request through a router meets them. Set, not derived, to cover
# the routers' health window, ROUTER_HEALTH_FAILURE_THRESHOLD x (ROUTER_HEALTH_INTERVAL_S + ROUTER_HEALTH_TIMEOUT_S) =
# 2 x (5 + 5) = 20 s (a round of checks may take its timeout before the next interval starts); `check` refuses a value
# below that window.
# 0: no router in front of these boxes (no gateway): drain at once; `check` refuses 0 whenever GATEWAY_HOSTS names
# a gateway. Sent to every box whether or not a gateway is in the inventory (a box deploys the same with or without
# one). At most 240 s, twice the longest health window: every rollout waits it per box, and past the window it only
# slows the rollout, s
ROUTER_OUT_WAIT_S = 20
ROUTER_WORKER_STARTUP_TIMEOUT_S = 7200  # --worker-startup-timeout-secs: a starting router's wait for its boxes, s
# (at most 28,800 s, the longest generation, schema_types.py LONGEST_GENERATION_S: a 262,144-token answer at 10
# tokens/s; this one and the request, queue and stop timeouts below are bounded by it: past it a request is hung)
ROUTER_STARTUP_CHECK_INTERVAL_S = 1  # --worker-startup-check-interval: a (re)starting router's checks, s (its
# start-up waits for a healthy box: this bounds what a restart costs clients, who get the front's 503 meanwhile;
# at most 30 s)
ROUTER_RETRIES = 3  # --retry-max-retries: attempts of one request (the first included) on another box after an error
# (at most 10: each may wait the longest backoff below, at most 60,000 ms, longer than the health window)
ROUTER_RETRY_INITIAL_BACKOFF_MS = 100  # first wait before a retry, ms
ROUTER_RETRY_MAX_BACKOFF_MS = 2000  # longest wait between retries, ms
ROUTER_CB_FAILURE_THRESHOLD = 5  # circuit breaker: consecutive failures of one box that open its circuit
ROUTER_CB_SUCCESS_THRESHOLD = 2  # successes in half-open state that close it again
ROUTER_CB_TIMEOUT_S = 30  # how long an open circuit stays open before a half-open try, s (at most 600: it keeps a
# recovered box out of rotation that long)
ROUTER_CB_WINDOW_S = 60  # the window failures are counted in, s (at most 3600: older failures say nothing of now)
ROUTER_REQUEST_TIMEOUT_S = 7200  # --request-timeout-secs: longest request through the router (a long reasoning
# generation; a 10-minute timeout once cut them silently), s
ROUTER_QUEUE_TIMEOUT_S = 7200  # --queue-timeout-secs: longest wait in the router's queue when it is full, s
ROUTER_RESTART_RETRY_AFTER_S = 1  # Retry-After of the front's 503 while a router is not listening (restart), s
# (at most 60: a router restarts in seconds, 7-8 s measured for both of a served model's)
ROUTER_READY_TIMEOUT_S = 300  # the deploy's wait for a restarted router to listen (it does once a box is healthy), s
# (at most 1800: a GX10 loads a model within 15 minutes; HEALTH_READY_TIMEOUT_S's shipped 1800 s)
ROUTER_STOP_TIMEOUT_S = 7200  # TimeoutStopSec= of a router unit: on SIGTERM vllm-router stops listening and finishes
# the requests it holds (its twin takes new ones meanwhile); a long generation may take this long, s

# --- two front doors, one service (docs/two-front-doors.md) --------------------------------------------------
# Two or more GATEWAY_HOSTS deploy identical front doors. With GATEWAY_VIP set, clients keep one URL: keepalived
# (VRRP) holds the address on one gateway at a time and moves it when that gateway stops or its front door fails the
# health check below. Empty: no keepalived (one gateway exactly as before; several: each its own URL, balanced by the
# cluster through the hand-off's front-door Service). Every gateway must carry the same values (`check` refuses not).
GATEWAY_VIP = ""  # the front doors' virtual IPv4 address (in the gateways' subnet, no host's own), or "": none
GATEWAY_VIP_PREFIX_LEN = 24  # the VIP's prefix length: the subnet every gateway's address is in, bits
GATEWAY_VIP_INTERFACE = ""  # the gateways' network interface that carries the VIP and VRRP (e.g. "enP7s7")
KEEPALIVED_PACKAGES = ["keepalived"]  # Debian/Ubuntu packages a gateway with a VIP needs (keepalived >= 2.0: -t)
VRRP_ROUTER_ID = 51  # VRRP virtual router id, 1-255: unique among the VRRP groups on that network segment
VRRP_PASSWORD_FILE = "vrrp_password"  # the file in SECRETS_DIR holding VRRP's PASS authentication, 1-8 characters
# (it guards against a misconfigured neighbour's adverts, not an attacker: PASS travels in clear on the segment)
VRRP_PRIORITY_FIRST = 150  # VRRP priority of the first gateway in GATEWAY_HOSTS, 2-254: it holds the VIP first
VRRP_PRIORITY_STEP = 10  # each next gateway's priority is this much lower (the last must stay at 1 or more)
VRRP_ADVERT_INT_S = 1  # seconds between the master's adverts; a backup takes over after ~3 missed ones, s (at
# most 20: the VIP is then nowhere for a minute)
# No preemption: a gateway that comes back (rebooted, its front healthy again) stays backup, so the VIP moves once
# per failure and not back again: clients meet one move, and one router's cache_aware tree keeps the traffic.
VRRP_PREEMPT = False
# The health check keepalived runs on every gateway (vrrp_script): each served model's routers through the local nginx
# on 127.0.0.1:FRONT_HEALTH_PORT/<served>/health (the router's FRONT_HEALTH_ROUTER_PATH, the primary or its standby).
# FRONT_HEALTH_FALL failures in a row put the gateway in FAULT: it gives up the VIP and a backup takes it.
FRONT_HEALTH_PORT = 30998  # nginx's loopback health page of the front door (only with a VIP), TCP port
FRONT_HEALTH_ROUTER_PATH = "/liveness"  # the router's own health path (vllm-router: the process answers; not
# /readiness, which fails on every gateway at once when no box is healthy: the VIP would then be nowhere)
FRONT_HEALTH_INTERVAL_S = 2  # seconds between two runs of the check, s
FRONT_HEALTH_TIMEOUT_S = 2  # one run's timeout (each served model's request shares it), s
FRONT_HEALTH_FALL = 2  # failed runs in a row before the gateway gives up the VIP
# (each of the two waits above at most 30 s, FALL and RISE at most 10, and FRONT_HEALTH_FALL x (FRONT_HEALTH_INTERVAL_S
# + FRONT_HEALTH_TIMEOUT_S) at most 60 s: a failed front door keeps the VIP that long, every request through it fails)
FRONT_HEALTH_RISE = 2  # passed runs in a row before it may hold the VIP again
FRONT_HEALTH_SCRIPT = "/usr/local/lib/sparkctl/front-door-health"  # the check's script on the gateway
KEEPALIVED_CONF = "/etc/keepalived/keepalived.conf"  # keepalived's configuration (root-only 0600: it holds the password)
# The hand-off's front-door Service (k8s-front-doors.yaml): a client IP sticks to one gateway, so one router's
# cache_aware tree sees its sessions (Kubernetes Services offer ClientIP affinity only; a header hash needs a mesh)
FRONT_DOOR_AFFINITY_TIMEOUT_S = 10800  # sessionAffinityConfig.clientIP.timeoutSeconds, s
# --- the bridge serves the routers' user alone: an nftables owner match on the loopback output (docs/two-front-doors.md)
BRIDGE_FIREWALL_TABLE = "sparkctl_bridge"  # nftables table (family inet) the deploy owns on every gateway
BRIDGE_FIREWALL_FILE = "/etc/sparkctl/bridge-firewall.nft"  # its ruleset on the gateway, loaded by a oneshot unit
