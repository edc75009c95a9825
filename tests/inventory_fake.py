"""@fake-connector inventories for tests/test_deploy_fake.py: the real group data (gx10), scripted facts.

FAKE_KIND (environment) picks the box: "dgx" (DGX OS: driver and CUDA present) or "ubuntu" (plain Ubuntu 24.04,
nothing NVIDIA installed) or "x86" (not a GX10).
"""

import os

_kind = os.environ.get("FAKE_KIND", "dgx")
_exists = "user=root group=root mode=-rw-r--r-- atime=0 mtime=0 ctime=0 size=10 '{}'"
_responses = {
    "uname -m": "x86_64" if _kind == "x86" else "aarch64",
    "uname -s": "Linux",
    "cat /etc/os-release": ["PRETTY_NAME=\"Ubuntu 24.04.3 LTS\"", "ID=ubuntu", "VERSION_ID=\"24.04\""],
    "df -B1": "900000000000",
    "command -v useradd": "/usr/sbin/useradd",
}
if _kind == "dgx":
    _responses["nvidia-smi --query-gpu"] = "NVIDIA GB10, 12.1, 580.95.05"
    _responses["/etc/dgx-release"] = _exists.format("/etc/dgx-release")
    _responses["/usr/local/cuda-13.0/bin/nvcc"] = _exists.format("/usr/local/cuda-13.0/bin/nvcc")
_data = {"fake_delay": 0, "fake_delay_jitter": 0, "fake_responses": _responses,
         "HEALTH_READY_TIMEOUT_S": 0,  # no box answers a fake connector: fail the health step at once
         "MODEL_LOCK_FILE": "tests/fixtures/fake.lock.json",
         "SECRETS_DIR": os.environ.get("SPARKCTL_TEST_SECRETS", "secrets")}
gx10 = [("@fake/gx10", _data)]
