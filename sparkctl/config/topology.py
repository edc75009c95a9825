"""How a pair of Sparks serves: which services run on which box, and the distributed-engine flags for each.

replicas         every box serves the same models; each is an independent endpoint (capacity adds up)
split            each box serves its own CODING_MODEL (host data); the gateway routes by model
tensor-parallel  one coding model over both boxes with vLLM's own multi-node support: native
                 (--nnodes/--node-rank/--master-addr, --headless worker, worker started first) or Ray
                 (`ray start` head/worker units, --distributed-executor-backend ray). Only the head serves
                 the API and sits behind the proxy; it also runs the embedders.
Pure logic (no pyinfra): the deploy passes the inventory's ordered host names, or, for a box of a FLEET_POOLS
tensor-parallel pool, its pair's (sparkctl.check.load.with_pool).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkctl.config.schema import GroupData
from sparkctl.errors import SettingError



@dataclass(frozen=True)
class Role:
    topology: str
    name: str  # "single" | "replica" | "split" | "head" | "worker"
    rank: int = 0  # node rank in tensor-parallel
    head: str = ""  # inventory name of the tensor-parallel head
    head_address: str = ""  # the head's CX7 address (no prefix length)
    pair: tuple[str, ...] = ()  # tensor-parallel: the pair's inventory names, head first (its peers, nobody else)
    address: str = ""  # this box's CX7 address
    coder_args: tuple[str, ...] = ()  # distributed-engine flags added to the coder's own
    env: dict = field(default_factory=dict)  # NCCL / Gloo / VLLM_HOST_IP environment of the coder

    @property
    def serves_api(self) -> bool:
        return self.name != "worker"

    @property
    def tensor_parallel(self) -> bool:
        return self.name in ("head", "worker")


def cx7_address(cfg: GroupData, host: str, index: int = 0) -> str:
    addrs = cfg.CX7_ADDRESSES.get(host)
    if not addrs:
        raise SettingError(f"CX7_ADDRESSES[{host!r}]", None, "the CX7 link address(es) of every tensor-parallel host")
    return addrs[min(index, len(addrs) - 1)].split("/")[0]


def twins(cfg: GroupData, host: str) -> None:
    """With CX7_MANAGE_NETPLAN, the netplan file gives each CX7_INTERFACES twin its own address: one each."""
    addrs = cfg.CX7_ADDRESSES.get(host) or []
    if cfg.CX7_MANAGE_NETPLAN and len(addrs) != len(cfg.CX7_INTERFACES):
        raise SettingError(f"CX7_ADDRESSES[{host!r}]", addrs, f"one address (CIDR) per CX7_INTERFACES entry "
                           f"({len(cfg.CX7_INTERFACES)}: {', '.join(cfg.CX7_INTERFACES)}), each twin on its own subnet",
                           "Or set CX7_MANAGE_NETPLAN = False and configure the link yourself")


def distributed_env(cfg: GroupData, host: str, head: str) -> dict:
    """The environment NCCL, Gloo and vLLM need to use the CX7 link (both twins for RDMA; a GID index and the
    system NCCL when set)."""
    ifname = cfg.CX7_INTERFACES[0]
    env = {"NCCL_SOCKET_IFNAME": ifname, "GLOO_SOCKET_IFNAME": ifname, "TP_SOCKET_IFNAME": ifname,
           "VLLM_HOST_IP": cx7_address(cfg, host), "MASTER_ADDR": cx7_address(cfg, head),
           "NCCL_IGNORE_CPU_AFFINITY": "1"}
    if cfg.CX7_HCAS:
        env.update(NCCL_IB_HCA=",".join(cfg.CX7_HCAS), NCCL_IB_DISABLE="0")
        if cfg.NCCL_IB_GID_INDEX >= 0:  # -1: NCCL picks the RoCE v2 IPv4 GID itself
            env["NCCL_IB_GID_INDEX"] = str(cfg.NCCL_IB_GID_INDEX)
    else:
        env["NCCL_IB_DISABLE"] = "1"
    if cfg.NCCL_SYSTEM_LIBRARY:  # vLLM's own communicator loads this NCCL instead of torch's (vllm/utils/nccl.py)
        env["VLLM_NCCL_SO_PATH"] = cfg.NCCL_SYSTEM_LIBRARY
    if cfg.TP_BACKEND == "ray":
        # RAY_ADDRESS: the head's vLLM joins the cluster of the ray-head unit (else ray.init starts one of its own)
        env.update(RAY_memory_monitor_refresh_ms="0", RAY_NODE_IP_ADDRESS=cx7_address(cfg, host),
                   RAY_ADDRESS=f"{cx7_address(cfg, head)}:{cfg.RAY_PORT}")
    return env


def role_of(cfg: GroupData, host: str, hosts: list[str]) -> Role:
    """This host's part in the configured topology; cfg: the typed settings (schema.GroupData, which already
    allows only the known SPARK_TOPOLOGY and TP_BACKEND values); hosts = the inventory's gx10 hosts in order (a
    tensor-parallel pool's box: its pair)."""
    topology = cfg.SPARK_TOPOLOGY
    if topology == "tensor-parallel":
        return _tensor_parallel(cfg, host, hosts)
    return Role(topology, "single" if len(hosts) < 2 else ("split" if topology == "split" else "replica"))


def _tensor_parallel(cfg: GroupData, host: str, hosts: list[str]) -> Role:
    if len(hosts) < 2:
        raise SettingError("SPARK_TOPOLOGY", cfg.SPARK_TOPOLOGY, "replicas or split for a single box",
                           f"tensor-parallel needs two hosts in the inventory, found {hosts}")
    if len(hosts) != 2:
        raise SettingError("SPARK_TOPOLOGY", cfg.SPARK_TOPOLOGY, "exactly two hosts for tensor-parallel",
                           f"found {hosts}")
    head = cfg.TP_HEAD or hosts[0]  # empty: the first host
    if head not in hosts:
        raise SettingError("TP_HEAD", head, hosts)
    rank = 0 if host == head else 1
    pair = (head, *(h for h in hosts if h != head))
    for box in pair:  # each box lets only the other in over the link (tasks/link.py): both need an address
        cx7_address(cfg, box)
        twins(cfg, box)
    env = distributed_env(cfg, host, head)
    head_ip = cx7_address(cfg, head)
    if cfg.TP_BACKEND == "native":
        args = ("--tensor-parallel-size", "2", "--nnodes", "2", "--node-rank", str(rank),
                "--master-addr", head_ip, "--master-port", str(cfg.TP_MASTER_PORT),
                "--distributed-executor-backend", "mp")
    else:  # Ray: the head's vLLM schedules both boxes' GPUs through the ray cluster; the worker runs only ray
        args = ("--tensor-parallel-size", "2", "--distributed-executor-backend", "ray") if rank == 0 else ()
    return Role(cfg.SPARK_TOPOLOGY, "head" if rank == 0 else "worker", rank=rank, head=head, head_address=head_ip,
                pair=pair, address=cx7_address(cfg, host), coder_args=args, env=env)
