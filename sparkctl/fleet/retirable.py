"""Whether boxes may be retired (`pyinfra inventory.py retire.py --limit <box>`), decided before any box is touched.

Refused: half of a tensor-parallel pair (the pair is one engine: retiring one box stops the other's), and the last
box serving a served model (its pool's coder, or an embedder) unless RETIRE_LAST_OF_POOL is true. A served model
still has a box when some inventory box outside the retired ones serves it (each box's own settings say what it
serves) and, when the gateway hand-off exists, is recorded there serving it ready: a box retired before, or one in the
middle of a rollout, is recorded not ready, so two retires in a row cannot empty a pool.

Pure: no pyinfra, no I/O; the glue (tasks/retire.py) reads the settings and the hand-off.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkctl.fleet.placement import Fleet

ALLOW = "RETIRE_LAST_OF_POOL"


@dataclass(frozen=True)
class RetireCheck:
    refusals: tuple[str, ...]  # each a whole sentence naming what to do instead; none: the retire may go on
    notes: tuple[str, ...]  # what the decision rested on (a missing hand-off, a last box retired on purpose)


def split_pairs(fleet: Fleet, retiring: set[str]) -> list[str]:
    """A tensor-parallel pair with one box retiring and the other not."""
    out = []
    for placed in fleet.pools:
        if not placed.pool.tensor_parallel:
            continue
        for unit in placed.units:
            if set(unit) & retiring and not set(unit) <= retiring:
                limits = " ".join(f"--limit {b}" for b in unit)
                out.append(f"{' and '.join(unit)} are one tensor-parallel engine (pool {placed.pool.name!r}): "
                           f"retiring one stops the other; retire both at once ({limits})")
    return out


def serving_elsewhere(name: str, fleet: Fleet, retiring: set[str], served: dict[str, tuple[str, ...]],
                      ready: dict[str, set[str]] | None) -> tuple[list[str], list[str]]:
    """(boxes outside `retiring` that serve `name` and are ready for it, those that serve it but are not ready)."""
    others = [b for b in fleet.hosts if b not in retiring and name in served.get(b, ())]
    if ready is None:
        return others, []
    return [b for b in others if b in ready.get(name, set())], [b for b in others if b not in ready.get(name, set())]


def last_of(name: str, boxes: list[str], fleet: Fleet, not_ready: list[str]) -> str:
    """Why retiring `boxes` leaves `name` on no box, and what to do."""
    pool = fleet.pool_of(boxes[0]).pool
    where = f"pool {pool.name!r} ({pool.setting})" if name == pool.served_name else "the inventory"
    why = (f"{', '.join(not_ready)} {'is' if len(not_ready) == 1 else 'are'} recorded not ready for it in the "
           f"gateway hand-off (retired, or in a rollout)") if not_ready else f"{where} has no other box serving it"
    return (f"retiring {', '.join(boxes)} leaves no box serving {name!r}: {why}, so its clients would get 503 "
            f"everywhere. Add a box and deploy it first, or retire anyway, on purpose: --data {ALLOW}=True")


def check_retire(fleet: Fleet, retiring: list[str], served: dict[str, tuple[str, ...]],
                 ready: dict[str, set[str]] | None, allow_last: bool) -> RetireCheck:
    """served: each inventory box's served names (a tensor-parallel worker: none); ready: the hand-off's boxes
    ready per served name (None: there is no hand-off); allow_last: RETIRE_LAST_OF_POOL."""
    gone = set(retiring)
    refusals, notes = split_pairs(fleet, gone), []
    if ready is None:
        notes.append("no gateway hand-off yet: every other box that serves a model is taken to serve it")
    names = dict.fromkeys(n for b in fleet.hosts if b in gone for n in served.get(b, ()))
    for name in names:
        up, not_ready = serving_elsewhere(name, fleet, gone, served, ready)
        if up:
            continue
        boxes = [b for b in fleet.hosts if b in gone and name in served.get(b, ())]
        if allow_last:
            notes.append(f"{', '.join(boxes)}: the last box serving {name!r}, retired on purpose ({ALLOW}=True)")
        else:
            refusals.append(last_of(name, boxes, fleet, not_ready))
    return RetireCheck(tuple(refusals), tuple(notes))
