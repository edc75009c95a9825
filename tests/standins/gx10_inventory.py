"""@fake-connector inventories for tests/deploy/test_deploy_fake.py: the real group data (gx10), scripted facts.

FAKE_KIND (environment) picks the box: "dgx" (DGX OS: driver and CUDA present) or "ubuntu" (plain Ubuntu 24.04,
nothing NVIDIA installed) or "x86" (not a GX10).
"""

import json
import os

_kind = os.environ.get("FAKE_KIND", "dgx")
_exists = "user=root group=root mode=-rw-r--r-- atime=0 mtime=0 ctime=0 size=10 '{}'"
_responses = {
    "uname -m": "x86_64" if _kind == "x86" else "aarch64",
    "uname -s": "Linux",
    "cat /etc/os-release": ["PRETTY_NAME=\"Ubuntu 24.04.3 LTS\"", "ID=ubuntu", "VERSION_ID=\"24.04\""],
    "df -B1": "900000000000",
    "command -v useradd": "/usr/sbin/useradd",
    "/proc/meminfo": "127600000",  # MemTotal in kB: 121.7 GiB, a GX10's unified memory as the kernel reports it
    # the box-side rollout (sparkctl/box/rollout.py): started, then followed until it records its result
    "rollout.py apply": '{"txn": "fake-txn", "attached": false}',
    "rollout.py follow": '@@ {"offset": 0, "running": false, "done": true, "result": {"rc": 0, "outcome": "ready"}}',
    # the link probe a tensor-parallel pair runs before its swap (sparkctl/box/link_probe.py): each rank's JSON line,
    # its bus bandwidth FAKE_LINK_BUSBW GB/s (default 23.7: dgx-spark-playbooks PR #103's two-Spark NCCL figure)
    "link_probe.py": json.dumps({"rank": 0, "world": 2, "backend": "nccl", "device": "cuda:0", "bytes": 1073741824,
                                 "iters": 20, "warmup": 5, "seconds": 0.09,
                                 "algbw_gbps": float(os.environ.get("FAKE_LINK_BUSBW", "23.7")) / 2 * 2,
                                 "busbw_gbps": float(os.environ.get("FAKE_LINK_BUSBW", "23.7"))}),
    # the gateway's bridge firewall once loaded (tasks/gateway.py BridgeTable), as nft lists it
    "nft list table inet": ["table inet sparkctl_bridge {", "\tchain output {",
                            '\t\toifname "lo" tcp dport 30999 meta skuid != 999 reject with tcp reset', "\t}", "}"],
}
# the box-side retire (sparkctl/box/retire_services.py, retire.py's deploy): FAKE_RETIRE="" not retired yet, "retired" already
# retired, "owned" a rollout owns the coder now
_responses["retire_services.py apply"] = '{"txn": "fake-retire", "attached": false}'
_responses["retire_services.py follow"] = ('@@ {"offset": 0, "running": false, "done": true, "result": {"outcome": "retired", '
                                  '"rc": 0, "message": "out of the routers, drained (0 in flight after 3.2 s), '
                                  'coder stopped and disabled"}}')
_responses["retire_services.py status"] = {
    "retired": '{"retired": {"at": "2026-12-03T02:00:00Z", "units": ["vllm-coder.service"]}, "units": {'
               '"vllm-coder.service": {"active": false, "enabled": false}}, "owned": [], "running": false}',
    "owned": '{"retired": null, "units": {}, "owned": ["coder"], "running": false}',
}.get(os.environ.get("FAKE_RETIRE", ""), "{}")
# the stale step (tasks/stale.py): FAKE_STALE="" nothing installed beyond the configuration, "spare" a service
# embed-old installed but no longer configured, "owned" ... and a rollout owns it (the box's run refuses),
# "embedders" the coder and both embedders installed (a box that served them all before)
_installed = {"embedders": ["/etc/sparkctl/vllm-coder.env", "/etc/systemd/system/vllm-embed-qwen3.service",
                            "/etc/sparkctl/vllm-embed-qwen3.env", "/etc/systemd/system/vllm-embed-bge-m3.service",
                            "/etc/sparkctl/vllm-embed-bge-m3.env"]}.get(os.environ.get("FAKE_STALE", ""))
if os.environ.get("FAKE_STALE"):
    _stale_result = {"spare": '"outcome": "removed", "rc": 0, "served": ["embed-old"], "message": "out of the routers, '
                              'drained (0 in flight after 1.5 s), embed-old stopped, disabled and removed (no longer '
                              'configured here)"',
                     "embedders": '"outcome": "removed", "rc": 0, "served": ["embed-qwen3", "embed-bge-m3"], '
                                  '"message": "embed-qwen3+embed-bge-m3 stopped, disabled and removed"',
                     "owned": '"outcome": "retire-refused", "rc": 9, "message": "not removing embed-old (no longer '
                              'configured here): a rollout or restart owns embed-old now"'}[os.environ["FAKE_STALE"]]
    _responses = {"vllm-*.env.next; do": _installed or ["/etc/systemd/system/vllm-embed-old.service",
                                                        "/etc/sparkctl/vllm-coder.env", "/etc/sparkctl/vllm-embed-old.env"],
                  "retire_services.py apply --stale": '{"txn": "fake-stale", "attached": false}',
                  "retire_services.py follow --stale": '@@ {"offset": 0, "running": false, "done": true, "result": {'
                                              + _stale_result + '}}', **_responses}
if _kind == "dgx":
    _responses["nvidia-smi --query-gpu"] = "NVIDIA GB10, 12.1, 580.95.05"
    _responses["/etc/dgx-release"] = _exists.format("/etc/dgx-release")
    _responses["/usr/local/cuda-13.0/bin/nvcc"] = _exists.format("/usr/local/cuda-13.0/bin/nvcc")
    # tasks/facts.py DeviceGroups: /proc/devices of the open 580 driver once nvidia-modprobe -u -c=0 ran
    # (FAKE_PROC_DEVICES: another answer, comma-separated lines)
    _responses["/proc/devices"] = os.environ["FAKE_PROC_DEVICES"].split(",") if "FAKE_PROC_DEVICES" in os.environ \
        else ["C mem", "C nvidia", "C nvidiactl", "C nvidia-caps", "C nvidia-uvm", "B sd"]
# tasks/facts.py PlannedHolds: what the box's vLLM services hold now by their live env files (FAKE_HOLDS: its lines,
# comma-separated, e.g. "HOLDS embed-qwen3 30.0 active"); none by default (a first install)
if os.environ.get("FAKE_HOLDS"):
    _responses["SPARKCTL_PLANNED_GIB="] = os.environ["FAKE_HOLDS"].split(",")
if os.environ.get("FAKE_ROLLOUT_AWAITS") in ("1", "serving"):  # the coder passes its gate and waits for its verdict
    _responses = {"rollout.py follow coder": '@@ {"offset": 0, "running": true, "done": false, "result": null, '
                  '"awaiting": true, "candidate": "c0ffee", "verdict_deadline": 1900000000}', **_responses}
if os.environ.get("FAKE_ROLLOUT_AWAITS") == "serving":  # ... and it was serving before: a flip, not a first install
    _responses = {"rollout.py status": '{"coder": {"active": true, "applied": "0ld", "wanted": "c0ffee", '
                  '"running": false, "phase": "", "failed": null, "last": null}}', **_responses}
_data = {"fake_delay": 0, "fake_delay_jitter": 0, "fake_responses": _responses,
         "HEALTH_READY_TIMEOUT_S": 0,  # no box answers a fake connector: fail the health step at once
         "BOX_TIMEOUT_FLOOR_MODE": "warn",  # ... which is far below what a real box needs: warned about, kept
         "MODEL_LOCK_FILE": "tests/fixtures/fake.lock.json",
         "SECRETS_DIR": os.environ.get("SPARKCTL_TEST_SECRETS", "secrets")}
_pair = {"CX7_ADDRESSES": {"@fake/spark-1": ["192.168.100.10/24", "192.168.101.10/24"],
                           "@fake/spark-2": ["192.168.100.11/24", "192.168.101.11/24"]},
         "GATEWAY_HANDOFF_DIR": os.environ.get("SPARKCTL_TEST_HANDOFF", "handoff")}
if os.environ.get("FAKE_HOSTS") == "2":  # two Sparks; FAKE_MODELS="laguna-s-2.1,qwen3.8-27b" sets each one's model
    _models = os.environ.get("FAKE_MODELS", "").split(",")
    gx10 = [(f"@fake/spark-{i + 1}", {**_data, **_pair, **({"CODING_MODEL": _models[i]} if _models[0] else {})})
            for i in range(2)]
    if os.environ.get("FAKE_ROLLOUT_FAILS") == "1":  # every coder rollout fails its gate and rolls back
        for _name, data in gx10:
            data["fake_responses"] = {"rollout.py follow coder": '@@ {"offset": 0, "running": false, "done": true, '
                                      '"result": {"rc": 3, "outcome": "rolled-back", "message": "ROLLED BACK"}}',
                                      **_responses}
elif os.environ.get("FAKE_HOSTS") == "3":  # three Sparks, FAKE_POOLS (JSON) their FLEET_POOLS
    _links = {**_pair["CX7_ADDRESSES"], "@fake/spark-3": ["192.168.100.12/24", "192.168.101.12/24"]}
    _fleet = {**_data, **_pair, "CX7_ADDRESSES": _links, "FLEET_POOLS": json.loads(os.environ["FAKE_POOLS"])}
    gx10 = [(f"@fake/spark-{i + 1}", dict(_fleet)) for i in range(3)]
    for _name, data in gx10:  # FAKE_COMMITTED: the boxes whose coder serves a committed configuration (a flip);
        if _name.split("/")[1] in os.environ.get("FAKE_COMMITTED", "").split(","):  # the others: first installs
            data["fake_responses"] = {"rollout.py status": '{"coder": {"active": true, "applied": "0ld", "wanted": '
                                      '"c0ffee", "running": false, "phase": "", "failed": null, "last": null}}',
                                      **_responses}
else:
    gx10 = [("@fake/gx10", _data)]
for _name, _host_data in gx10:  # FAKE_AIRGAPPED="spark-2": those boxes' host data AIRGAPPED = True (SPARK_AIRGAPPED)
    if _name.split("/")[-1] in os.environ.get("FAKE_AIRGAPPED", "").split(","):
        _host_data["AIRGAPPED"] = True
if os.environ.get("FAKE_GATEWAY"):  # the front door: "1" a host of its own, "box" the (first) box is the gateway too
    _handoff = {"GATEWAY_HANDOFF_DIR": os.environ.get("SPARKCTL_TEST_HANDOFF", "handoff")}
    if os.environ["FAKE_GATEWAY"] == "box":
        gx10[0][1].update(_handoff, GATEWAY_FRONT_PORT=8443)
        gateway = [gx10[0][0]]
    else:
        gateway = [("@fake/gateway", {**_data, **_handoff})]
