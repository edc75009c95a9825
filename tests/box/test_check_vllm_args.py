"""vLLM's start-time checks (sparkctl/box/check_vllm_args.py start_time_checks) against STAND-IN vLLM modules:
vLLM itself is not installed on the control machine (the e2e scenarios run the real one on the simulated Spark).
The stand-ins are pydantic dataclasses shaped as vLLM 0.32's configs are, so the checks' use of pydantic (field
metadata, "before" validators) runs for real."""

from __future__ import annotations

import sys
import types
from typing import Annotated, Literal

import pytest
from pydantic import Field, field_validator
from pydantic.dataclasses import dataclass

from sparkctl.box.check_vllm_args import start_time_checks


@dataclass
class SpeculativeConfig:
    num_speculative_tokens: Annotated[int, Field(ge=1)] = 1
    method: Literal["mtp", "eagle"] | None = None
    draft_model_config: dict | None = None

    @field_validator("method", mode="before")
    @classmethod
    def _lower(cls, value):
        return value.lower() if isinstance(value, str) else value


@dataclass
class ModelConfig:
    max_model_len: int | None = Field(default=None, gt=0)
    seed: int | None = Field(default=None, ge=0)  # has its own validator: not checked again

    @field_validator("seed")
    @classmethod
    def _seed(cls, value):
        return value


@dataclass
class CacheConfig:
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = 0.9


@dataclass
class ParallelConfig:
    tensor_parallel_size: Annotated[int, Field(ge=1)] = 1


@dataclass
class SchedulerConfig:
    max_num_seqs: int | None = Field(default=None, ge=1)


@pytest.fixture
def vllm_standin(monkeypatch):
    registry = lambda names: types.SimpleNamespace(list_registered=lambda: names)  # noqa: E731
    modules = {"vllm": {}, "vllm.reasoning": {"ReasoningParserManager": registry(["qwen3"])},
               "vllm.tool_parsers": {"ToolParserManager": registry(["qwen3_coder"])},
               "vllm.config": {"SpeculativeConfig": SpeculativeConfig, "ModelConfig": ModelConfig,
                               "CacheConfig": CacheConfig, "ParallelConfig": ParallelConfig,
                               "SchedulerConfig": SchedulerConfig},
               "vllm.config.parallel": {"DistributedExecutorBackend": Literal["ray", "mp", "uni",
                                                                             "external_launcher"]}}
    for name, attrs in modules.items():
        monkeypatch.setitem(sys.modules, name, types.SimpleNamespace(**attrs))


def ns(**kw):
    base = dict(tool_call_parser=None, reasoning_parser=None, distributed_executor_backend=None, nnodes=1,
                speculative_config=None, max_model_len=None, seed=None, gpu_memory_utilization=0.9,
                tensor_parallel_size=1, max_num_seqs=None)
    return types.SimpleNamespace(**{**base, **kw})


def test_a_sound_serve_line_has_no_start_time_problem(vllm_standin):
    assert start_time_checks(ns(tool_call_parser="qwen3_coder", reasoning_parser="qwen3", max_model_len=8192,
                                speculative_config={"method": "MTP", "num_speculative_tokens": 2})) == []


def test_every_start_time_problem_is_named(vllm_standin):
    got = start_time_checks(ns(tool_call_parser="nope", reasoning_parser="nope", tool_parser_plugin=None,
                               distributed_executor_backend="nccl", nnodes=2,
                               speculative_config={"method": "medusa", "bogus": 1, "draft_model_config": {},
                                                   "num_speculative_tokens": 0},
                               max_model_len=0, seed=-1, gpu_memory_utilization=1.5))
    assert got[:4] == ["unknown --tool-call-parser 'nope'", "unknown --reasoning-parser 'nope'",
                       "unknown --distributed-executor-backend 'nccl'",
                       "--nnodes > 1 needs --distributed-executor-backend mp (vLLM's native multi-node)"]
    assert got[4].startswith("--speculative-config.method='medusa': ")
    assert got[5:7] == ["--speculative-config: unknown key 'bogus'",
                        "--speculative-config: unknown key 'draft_model_config'"]
    assert got[7].startswith("--speculative-config.num_speculative_tokens=0: ")
    assert got[8] == "--speculative-config.num_speculative_tokens=0: must be a positive integer"
    assert [g.split("=")[0] for g in got[9:]] == ["--max-model-len", "--gpu-memory-utilization"]  # not --seed


def test_a_parser_plugin_brings_its_own_names(vllm_standin):
    assert start_time_checks(ns(tool_call_parser="mine", tool_parser_plugin="/opt/p.py")) == []
