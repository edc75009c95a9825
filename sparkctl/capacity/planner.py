"""The capacity planner's public surface, for callers outside sparkctl/capacity (the deploy's check, the health
table, the bench probe's roofline). The work is done in these modules:

    kv.py        vLLM's KV allocator maths: dtype bytes, a model's KV layout, blocks, groups and concurrency
    facts.py     a model's memory facts with their provenance: its checkpoint's files (the lock), or hand-typed
    box.py       the box: usable memory, OS reserve, embedders
    measured.py  what production measured (catalog facts, with their source and what was calibrated to them)
    plan.py      the plan: each coding model on the box (or on several Sparks), check_fits for the preflight
    report.py    the JSON (schema sparkctl.plan/1), the table `python -m sparkctl plan` prints, the refusal message
"""

from sparkctl.capacity.box import Box, EmbedderUse, box_from_data
from sparkctl.capacity.facts import model_layout
from sparkctl.capacity.kv import (
    KvCapacity,
    KvLayout,
    find_local_config,
    kv_capacity,
    layout_from_catalog,
    layout_from_config,
    load_config,
)
from sparkctl.capacity.plan import (
    TOPOLOGIES,
    BoxPlan,
    ModelPlan,
    Placement,
    PlanError,
    check_fits,
    coding_models,
    plan_box,
    plan_model,
)
from sparkctl.capacity.report import SCHEMA, plan_json
from sparkctl.config.quantities import GIB

__all__ = [
    "GIB", "KvCapacity", "KvLayout", "find_local_config", "kv_capacity", "layout_from_catalog", "layout_from_config",
    "load_config", "model_layout", "TOPOLOGIES", "Box", "BoxPlan", "EmbedderUse", "ModelPlan", "Placement", "PlanError", "box_from_data",
    "check_fits", "coding_models", "plan_box", "plan_model", "SCHEMA", "plan_json",
]
