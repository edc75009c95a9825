"""One vLLM service as the validated settings define it, and where its checkpoint lives on the box.

A value object shared by validation (sparkctl.config.settings builds it) and rendering (sparkctl.render.units
writes it out).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkctl.config.catalog import ModelSpec
from sparkctl.config.lock import LockedCheckpoint


@dataclass(frozen=True)
class Service:
    """One vLLM server on the box."""

    name: str  # short name: "coder", "embed-qwen3", ...
    role: str  # CODER or EMBEDDER
    model: ModelSpec
    served_name: str  # OpenAI model id; also the proxy path prefix
    port: int  # 127.0.0.1 port
    kv_cache_bytes: int  # --kv-cache-memory-bytes, plain integer bytes
    checkpoint: LockedCheckpoint
    draft: LockedCheckpoint | None = None
    extra_args: tuple[str, ...] = ()  # topology flags (tensor-parallel ranks), added after the model's own
    headless: bool = False  # a tensor-parallel worker: no API server, not behind the proxy
    extra_env: dict = field(default_factory=dict)  # topology environment (NCCL/Gloo interfaces, VLLM_HOST_IP)
    tensor_parallel: bool = False  # one engine of a tensor-parallel pair: NCCL over the CX7 link (RDMA devices)

    @property
    def unit(self) -> str:
        return f"vllm-{self.name}.service"

    @property
    def env_file(self) -> str:
        return f"vllm-{self.name}.env"


def snapshot_path(model_store: str, cp: LockedCheckpoint) -> str:
    """Where huggingface_hub puts a complete snapshot of a locked commit under MODEL_STORE."""
    return f"{model_store}/hub/{cp.cache_dirname()}/snapshots/{cp.sha}"
