"""Which setting produced a rendered line a validator refused: change each setting in turn, render the file again
with the same function, and keep the settings whose change changes that line. Of those, the ones the operator
changed (they differ from the shipped group data) come first: a line reading two settings is blamed on the one
that is not as shipped. Used by check/render.py only when a validator refused something.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable

from pydantic import BaseModel

from sparkctl.check.rules import Shipped
from sparkctl.config.schema import GroupData

_SKIP = object()


def perturbed(value):
    """A different value of the same shape (every leaf changed), or _SKIP when there is none to make."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, (list, tuple)) and value:
        return type(value)(perturbed(v) for v in value)
    if isinstance(value, dict) and value:
        return {k: perturbed(v) for k, v in value.items()}
    if isinstance(value, BaseModel):
        return value.model_copy(update={f: perturbed(getattr(value, f)) for f in type(value).model_fields})
    return _SKIP


def _line_changed(before: list[str], after: list[str], line: int | None) -> bool:
    """Whether line (1-based; None: any) of `before` is replaced or removed in `after`."""
    if line is None:
        return before != after
    return any(tag in ("replace", "delete") and i1 <= line - 1 < i2
               for tag, i1, i2, _j1, _j2 in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes())


def culprits(render: Callable[[GroupData], str], cfg: GroupData, line: int | None, shipped: Shipped) -> list[str]:
    """The settings whose value the given line of render(cfg) depends on, the ones the operator changed first."""
    before = render(cfg).splitlines()
    found = []
    for name in type(cfg).model_fields:
        other = perturbed(getattr(cfg, name))
        if other is _SKIP:
            continue
        try:
            after = render(cfg.model_copy(update={name: other})).splitlines()
        except Exception:  # noqa: BLE001 - a value the render cannot take says nothing about this line
            continue
        if _line_changed(before, after, line):
            found.append(name)
    return sorted(found, key=lambda n: not shipped.changed(n, getattr(cfg, n)))


def describe(value):
    """A setting's value as group data writes it (a nested model as its mapping)."""
    return value.model_dump() if isinstance(value, BaseModel) else value
