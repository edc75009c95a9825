"""Checkpoint fan-out: who fetches each locked checkpoint from the Hub, and who copies it from which box, in which
round (the deploy's checkpoints step runs the rounds in order, one pyinfra operation each; tasks/checkpoints.py).

Per checkpoint (repo@sha): the boxes of this run that keep it and already hold it verified are its first holders.
When none does, one box downloads it from the Hub in round 0 (the seed: CHECKPOINT_SEED_BOX when it keeps it, else
the first box in inventory order that is not AIRGAPPED). Then, round after round, every holder gives it to one box
still without it (its tensor-parallel peer first, over the CX7 link; then the next in inventory order), so the
holders double each round: a tree, not a queue behind one sender. The Hub serves each distinct checkpoint at most
once per run; N boxes take ceil(log2 N) copy rounds.

Each copy lists its sources in the order the box tries them: the planned holder, then every other box that holds
it by then, then the Hub, unless the receiver is AIRGAPPED. The box's copy script (sparkctl/box/fetch_checkpoint.py
--copy) skips a source that holds no verified copy of that commit and falls back to the next, saying which.

Refused (SettingError naming the setting and the box): CHECKPOINT_SEED_BOX not a box of the inventory, or an
AIRGAPPED one; an AIRGAPPED box that keeps a checkpoint no box with a route to the Hub keeps (and no box holds).

Pure: no pyinfra, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkctl.config.settings import Settings
from sparkctl.errors import SettingError

HUB = "hub"  # a source that is not a box: HF_ENDPOINT


@dataclass(frozen=True)
class Box:
    """One box of the run, as the fan-out sees it."""

    name: str
    address: str  # where the other boxes reach its ssh (the inventory's address)
    keeps: tuple[str, ...]  # the checkpoints it keeps, as "repo@sha"
    holds: tuple[str, ...] = ()  # of those, the ones it already holds verified (its marker exists)
    airgapped: bool = False  # AIRGAPPED: no route to the Hub
    peer: str = ""  # its tensor-parallel pair's other box ("" if none)
    link_address: str = ""  # its own CX7 address: where its peer reaches it over the link ("" if none)


@dataclass(frozen=True)
class Source:
    box: str  # a box name, or HUB
    address: str = ""  # where the receiver reaches it (its CX7 address for its peer, else its inventory address)
    link: bool = False  # over the pair's CX7 link

    def describe(self) -> str:
        if self.box == HUB:
            return "the Hub"
        where = [self.address] if self.address != self.box else []
        return f"{self.box} ({', '.join(where + (['CX7 link'] if self.link else []))})" if where or self.link else self.box


@dataclass(frozen=True)
class Fetch:
    """One box getting one checkpoint in one round: from sources[0], else the next ones in order."""

    box: str
    checkpoint: str  # "repo@sha"
    round: int  # 0: from the Hub (the seed); 1, 2, ...: copied from a box
    sources: tuple[Source, ...]

    @property
    def from_hub(self) -> bool:
        return self.sources[0].box == HUB


@dataclass(frozen=True)
class Plan:
    fetches: tuple[Fetch, ...]
    held: dict[str, tuple[str, ...]] = field(default_factory=dict)  # box -> the checkpoints it already holds

    @property
    def rounds(self) -> int:
        """Rounds 0..rounds-1 (0 when nothing is fetched)."""
        return max((f.round for f in self.fetches), default=-1) + 1

    def of(self, box: str, round_: int) -> list[Fetch]:
        return [f for f in self.fetches if f.box == box and f.round == round_]

    def hub_fetches(self) -> int:
        return sum(f.from_hub for f in self.fetches)


def key_of(cp) -> str:
    """A locked checkpoint as the fan-out names it: repo@sha."""
    return f"{cp.repo}@{cp.sha}"


def box_of(s: Settings, address: str, holds: tuple[str, ...] = ()) -> Box:
    """A box as its own deploy derives it (`s`): what it keeps, whether it is AIRGAPPED, its pair's link."""
    name = s.host_name
    links = [a.split("/")[0] for a in s.cfg.CX7_ADDRESSES.get(name, [])]
    peer = next((b for b in s.role.pair if b != name), "") if s.role.tensor_parallel else ""
    return Box(name=name, address=address or name, keeps=tuple(key_of(cp) for cp in s.checkpoints), holds=holds,
               airgapped=s.cfg.AIRGAPPED, peer=peer, link_address=links[0] if links else "")


def seed_box(value: str, boxes: list[Box]) -> None:
    """CHECKPOINT_SEED_BOX: "" or a box of the inventory with a route to the Hub."""
    names = [b.name for b in boxes]
    if not value:
        return
    if value not in names:
        raise SettingError("CHECKPOINT_SEED_BOX", value, f'"" (the first box that keeps it) or a box of the inventory '
                           f'({", ".join(names)})')
    if next(b for b in boxes if b.name == value).airgapped:
        raise SettingError("CHECKPOINT_SEED_BOX", value, "a box that is not AIRGAPPED: the seed downloads from the "
                           f"Hub, and {value} has no route to it")


def plan(boxes: list[Box], seed: str = "") -> Plan:
    """The fan-out of every checkpoint the boxes keep; boxes in inventory order (the order decides ties)."""
    seed_box(seed, boxes)
    by_name = {b.name: b for b in boxes}
    keys = sorted({k for b in boxes for k in b.keeps})
    fetches: list[Fetch] = []
    for key in keys:
        fetches += _fan_out(key, [b for b in boxes if key in b.keeps], by_name, seed)
    held = {b.name: tuple(k for k in b.keeps if k in b.holds) for b in boxes}
    return Plan(fetches=tuple(fetches), held=held)


def _source(receiver: Box, holder: Box) -> Source:
    if receiver.peer == holder.name and holder.link_address:
        return Source(holder.name, holder.link_address, link=True)
    return Source(holder.name, holder.address)


def _fan_out(key: str, keepers: list[Box], by_name: dict[str, Box], seed: str) -> list[Fetch]:
    holders = [b for b in keepers if key in b.holds]
    missing = [b for b in keepers if key not in b.holds]
    out: list[Fetch] = []
    if missing and not holders:
        first = _seed_of(key, keepers, seed)
        out.append(Fetch(first.name, key, 0, (Source(HUB),)))
        holders, missing = [first], [b for b in missing if b is not first]
    round_ = 1
    while missing:
        pairs = _pairs(holders, missing)
        for holder, receiver in pairs:
            others = [_source(receiver, h) for h in holders if h is not holder]
            hub = () if receiver.airgapped else (Source(HUB),)
            out.append(Fetch(receiver.name, key, round_, (_source(receiver, holder), *others, *hub)))
        holders = holders + [r for _h, r in pairs]
        round_ += 1
    return out


def _pairs(holders: list[Box], missing: list[Box]) -> list[tuple[Box, Box]]:
    """(holder, receiver) of one round, each holder giving to one box (removed from `missing`): its tensor-parallel
    peer first (the CX7 link), then the next box in inventory order."""
    pairs: list[tuple[Box, Box]] = []
    free = list(holders)
    for holder in holders:
        peer = next((b for b in missing if b.name == holder.peer), None)
        if peer is not None:
            pairs.append((holder, peer))
            missing.remove(peer)
            free.remove(holder)
    for holder in free:
        if not missing:
            break
        pairs.append((holder, missing.pop(0)))
    return pairs


def _seed_of(key: str, keepers: list[Box], seed: str) -> Box:
    named = next((b for b in keepers if b.name == seed), None)
    if named is not None:
        return named
    reachable = [b for b in keepers if not b.airgapped]
    if not reachable:
        box = keepers[0]
        raise SettingError(f"AIRGAPPED of {box.name}", True,
                           f"a box with a route to the Hub that keeps {key}: {', '.join(b.name for b in keepers)} "
                           f"keep{'s' if len(keepers) == 1 else ''} it and every one is AIRGAPPED, so no reachable "
                           "source can provide it",
                           "Keep it on a box that reaches the Hub (CODER_KV_CACHE_GIB, EMBEDDERS), set AIRGAPPED = "
                           "False for one of them, or place it on one box first (its verified copy is then a source)")
    return reachable[0]


def reachable(box: Box, missing: tuple[str, ...], boxes: list[Box]) -> None:
    """The deploy's own check of one box, knowing only what that box holds (each box reads its own markers): an
    AIRGAPPED box missing a checkpoint that no box of the run with a route to the Hub keeps is refused."""
    if not box.airgapped:
        return
    for key in missing:
        keepers = [b.name for b in boxes if key in b.keeps]
        if not any(key in b.keeps and not b.airgapped for b in boxes):
            raise SettingError(f"AIRGAPPED of {box.name}", True,
                               f"a box with a route to the Hub in this run that keeps {key}, which {box.name} does "
                               f"not hold yet: {', '.join(keepers)} keep it and every one is AIRGAPPED, so no "
                               "reachable source can provide it",
                               "Deploy with a box that reaches the Hub and keeps it (no --limit that leaves it out)")


def rounds_for(boxes: int) -> int:
    """Copy rounds after the seed's download for `boxes` boxes that all keep a checkpoint: ceil(log2 boxes)."""
    rounds, holders = 0, 1
    while holders < boxes:
        holders, rounds = holders * 2, rounds + 1
    return rounds
