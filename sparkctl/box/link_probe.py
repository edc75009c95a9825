#!/usr/bin/env python3
"""On each box of a tensor-parallel pair (the standard library, plus torch from the box's vLLM venv): one all-reduce
across the pair, timed, its bus bandwidth printed as one JSON object on stdout. A rehearsal runs it on both boxes at
once, rank 0 on the head; so does the deploy before a pair's swap (tasks/rollout.py link_before_swap, its command
from sparkctl/render/link.py probe_argv), and refuses the swap below LINK_MIN_BUSBW_GBPS.

    <venv>/bin/python link_probe.py --rank R --world 2 --master ADDR --port P --bytes N --iters K --backend B
                                    [--warmup W] [--timeout-s T]

--rank        this box's rank (0: the head, whose --master address the other joins)
--world       how many ranks take part (2: the pair)
--master      the head's CX7 address (the TCP rendezvous, torch.distributed's tcp:// init)
--port        the rendezvous port on it (a free one: not TP_MASTER_PORT while the pair's vLLM serves)
--bytes       the all-reduce's buffer in bytes (LINK_PROBE_BYTES), float32: rounded down to a multiple of 4
--iters       timed all-reduces (LINK_PROBE_ITERS), after --warmup untimed ones (default 5: nccl-tests' -w)
--backend     nccl (CUDA: over the link's RDMA when NCCL_IB_HCA names the HCAs) or gloo (CPU, TCP sockets):
              LINK_PROBE_BACKEND (gloo on the simulated Spark)
--timeout-s   how long the rendezvous and each collective may take (default 300), s

Run it with the pair's coder environment (its env file: NCCL_SOCKET_IFNAME, NCCL_IB_HCA, GLOO_SOCKET_IFNAME ...) so
it measures the path vLLM uses. Before a swap it runs beside the pair's serving engines on unified memory: it holds a
CUDA context and the buffer (LINK_PROBE_BYTES, allocated twice at most; nccl-tests' 16 GB froze a Spark:
dgx-spark-playbooks PR #103), so keep LINK_PROBE_BYTES small against the box's headroom.

stdout, one line: {"rank", "world", "backend", "device", "bytes", "iters", "warmup", "seconds" (mean of one timed
all-reduce, s), "algbw_gbps", "busbw_gbps"} (GB/s = 1e9 B/s); on failure {"rank", "error"} and exit code 1; a
usage error exits 2 (argparse). busbw is nccl-tests' (doc/PERFORMANCE.md): algbw = bytes / seconds, busbw = algbw x
2(n-1)/n for an all-reduce, the figure comparable with the link's line rate whatever the rank count. The control
side judges it against LINK_MIN_BUSBW_GBPS: a rehearsal with judge() below (pure: no torch), the deploy with
sparkctl/render/link.py judge_pair (both ranks).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time

GB = 1e9  # nccl-tests' GB/s
FLOAT32_BYTES = 4
DEFAULT_WARMUP = 5  # nccl-tests' -w default
DEFAULT_TIMEOUT_S = 300.0


def bus_bandwidth(nbytes: int, seconds: float, world: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s of one all-reduce of `nbytes` over `world` ranks that took `seconds` (nccl-tests)."""
    if nbytes <= 0 or seconds <= 0 or world < 1:
        raise ValueError(f"bytes {nbytes}, seconds {seconds} and world {world} must be > 0")
    algbw = nbytes / seconds / GB
    return algbw, algbw * 2 * (world - 1) / world


def judge(result: dict, floor_gbps: float) -> tuple[bool, str]:
    """Whether a probe's result reaches the floor (LINK_MIN_BUSBW_GBPS, GB/s; 0: no floor), and why, in words."""
    if "error" in result:
        return False, f"rank {result.get('rank', '?')}: the probe failed: {result['error']}"
    busbw = float(result["busbw_gbps"])
    what = (f"rank {result['rank']}: busbw {busbw:.2f} GB/s ({result['backend']}, {result['bytes']:,} bytes, "
            f"{result['iters']} iterations)")
    if floor_gbps <= 0:
        return True, f"{what}; no floor (LINK_MIN_BUSBW_GBPS = 0)"
    if busbw < floor_gbps:
        return False, f"{what} is below LINK_MIN_BUSBW_GBPS = {floor_gbps:g} GB/s"
    return True, f"{what} reaches LINK_MIN_BUSBW_GBPS = {floor_gbps:g} GB/s"


def timed(all_reduce, sync, iters: int, warmup: int, clock=time.perf_counter) -> float:
    """Mean seconds of one all_reduce() over `iters` after `warmup` untimed ones; sync() waits until the device has
    finished (CUDA kernels run asynchronously) and lines the ranks up before the clock starts."""
    for _ in range(warmup):
        all_reduce()
    sync()
    start = clock()
    for _ in range(iters):
        all_reduce()
    sync()
    return (clock() - start) / iters


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="an all-reduce across a tensor-parallel pair, its bus bandwidth as JSON")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--master", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--bytes", type=int, required=True)
    p.add_argument("--iters", type=int, required=True)
    p.add_argument("--backend", choices=("nccl", "gloo"), required=True)
    p.add_argument("--warmup", type=int, default=DEFAULT_WARMUP)
    p.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S)
    a = p.parse_args(argv)
    if not 0 <= a.rank < a.world or a.bytes < FLOAT32_BYTES or a.iters < 1 or a.warmup < 0 or a.timeout_s <= 0:
        p.error("need 0 <= --rank < --world, --bytes >= 4, --iters >= 1, --warmup >= 0, --timeout-s > 0")
    return a


def run(a: argparse.Namespace) -> dict:
    """The all-reduce itself (torch.distributed; imported here: the pure parts above need no torch)."""
    import torch
    import torch.distributed as dist

    cuda = a.backend == "nccl"
    if cuda:
        torch.cuda.set_device(0)  # one GPU per box (a GB10)
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    dist.init_process_group(a.backend, init_method=f"tcp://{a.master}:{a.port}", rank=a.rank, world_size=a.world,
                            timeout=datetime.timedelta(seconds=a.timeout_s))
    try:
        numel = a.bytes // FLOAT32_BYTES
        tensor = torch.ones(numel, dtype=torch.float32, device=device)

        def sync():
            if cuda:
                torch.cuda.synchronize()
            dist.barrier()

        seconds = timed(lambda: dist.all_reduce(tensor), sync, a.iters, a.warmup)
    finally:
        dist.destroy_process_group()
    nbytes = numel * FLOAT32_BYTES
    algbw, busbw = bus_bandwidth(nbytes, seconds, a.world)
    return {"rank": a.rank, "world": a.world, "backend": a.backend, "device": str(device), "bytes": nbytes,
            "iters": a.iters, "warmup": a.warmup, "seconds": seconds, "algbw_gbps": algbw, "busbw_gbps": busbw}


def main(argv: list[str]) -> int:
    a = parse(argv)
    try:
        result = run(a)
    except Exception as exc:  # noqa: BLE001 - one JSON line the rehearsal reads, whatever failed
        print(json.dumps({"rank": a.rank, "error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 1
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
