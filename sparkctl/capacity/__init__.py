"""The memory arithmetic that chose the model: vLLM's KV allocator maths, the plan for a box (and two), its report,
and what vLLM itself reports about its KV cache (startup log, /metrics) set beside the plan.

May import: sparkctl.config, sparkctl.errors. No pyinfra, no network.
"""
