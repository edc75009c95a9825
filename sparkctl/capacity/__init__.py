"""The memory arithmetic that chose the model: vLLM's KV allocator maths (kv.py), the box (box.py), what production
measured (measured.py), the plan for a box and for two and its refusal (plan.py), its report (report.py: JSON, table),
their public surface for other folders (planner.py), what vLLM itself reports about its KV cache after a rollout
(vllm_reported.py), and the versioned vLLM venv a configuration runs from (venv.py). `python -m sparkctl plan`
prints it from sparkctl/plan/.

May import: sparkctl.config, sparkctl.errors. No pyinfra, no network.
"""
