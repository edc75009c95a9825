"""An index of a history file, so `bench judge` reads only the lines its verdict needs, whatever the history's length.

A box benchmarked daily for years leaves thousands of lines; a verdict reads a handful of them (its baseline, the
previous configuration's, the anchor, a pair's one-box bound). The index holds, per line, where it is in the file
(offset, length) and what the reference order selects on (history.config_key and workload_key's fields, the
history part's id, appended, baseline, provisional, confirms), never a figure. Judging (`lines_for`):

1. the index is current when the file's size, mtime and the sha256 of its last line are the ones it was built
   from; otherwise (missing, stale, unreadable, another version) it is rebuilt from the file, which reads and
   validates every line exactly as history.parse does (a bad line is the same HistoryError);
2. per key (configuration + workload), the index says where its first and last confirmed baseline and its newest
   confirmed line are: from those, the lines the reference order can choose are found per key, never per line
   (`_candidates`: the rec's own key's last baseline, the closest other configuration's newest line and baseline,
   the first baseline of the anchor, a pair's one-box baseline; a handful of lines);
3. those lines are read from the file at their offsets and validated in full (HistoryLine); each must be the line
   the index says (its id, appended time, keys and flags) or the index is rebuilt and the lines read again: the
   index is never trusted over the history itself. The reference order then runs on them, as on the whole file.

The index lives in the user's cache (<XDG_CACHE_HOME or ~/.cache>/sparkctl/history-index/, named after the
history's path), never beside the history: judging leaves the history file byte-identical and its folder as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from sparkctl.measure import history, reference

VERSION = 1  # of the index file's layout
TAIL_BYTES = 1 << 16  # read from the end of the history to find its last line, bytes (a line is ~2 KB)
# the fields the reference order reads of a line (history.config_key, workload_key, confirmed, the history part)
SHAPE = {"model": ("key", "sha"), "box": ("name", "simulated", "tensor_parallel_size"),
         "workload": ("name", "version", "sha256")}
FLAT = ("revision", "vllm_version", "vllm_build", "max_tokens", "ignore_eos", "temperature")
TAG = ("id", "appended", "baseline", "source", "provisional", "confirms")


def _shape(line: dict) -> dict:
    out = {k: line[k] for k in FLAT if k in line}
    for part, fields in SHAPE.items():
        if isinstance(line.get(part), dict):
            out[part] = {f: line[part][f] for f in fields if f in line[part]}
    out["history"] = {k: line["history"][k] for k in TAG if k in line["history"]}
    return out


def cache_path(history_path: str | Path) -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    name = hashlib.sha256(str(Path(history_path).resolve()).encode()).hexdigest()[:24]
    return root / "sparkctl" / "history-index" / f"{name}.json"


def stamp(path: Path) -> dict:
    """What makes an index current: the file's size and mtime, and the sha256 of its last line."""
    st = path.stat()
    with path.open("rb") as f:
        f.seek(max(0, st.st_size - TAIL_BYTES))
        tail = f.read().rstrip(b"\n").rsplit(b"\n", 1)[-1]
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "last": hashlib.sha256(tail).hexdigest()}


@dataclass
class _PerKey:
    """Per key (configuration + workload), among the lines before the cut: where its lines are."""

    first: int  # its first line (any)
    newest: int | None = None  # its newest confirmed line
    first_baseline: int | None = None  # its first confirmed baseline
    last_baseline: int | None = None  # its last confirmed baseline

    def positions(self) -> set[int]:
        return {x for x in (self.first, self.newest, self.first_baseline, self.last_baseline) if x is not None}


def _per_key(entries: list[list], cut: int) -> dict[int, _PerKey]:
    out: dict[int, _PerKey] = {}
    for i in range(cut):
        key, tag = entries[i][3], entries[i][4]
        k = out.setdefault(key, _PerKey(i))
        if tag.get("provisional"):  # never a yardstick (history.confirmed)
            continue
        k.newest = i
        if tag["baseline"]:
            k.first_baseline = i if k.first_baseline is None else k.first_baseline
            k.last_baseline = i
    return out


@dataclass
class Index:
    """A history's index. The summary (keys, ids, per key of the whole file, and the entries it names) is all a
    judgement of a new record reads; every line's entry is read only to judge a line of the history itself."""

    path: Path
    stamp: dict
    keys: list[dict]  # the distinct shapes (_shape without the history part) of the file's lines
    ids: list[str]  # every line's history id, in order
    summary: dict[int, _PerKey]  # per key, over the whole file
    named: dict[int, list]  # the entries of the lines the summary names: [n, offset, length, key, history part]
    _entries: list[list] | None = None  # every non-blank line's entry, when read

    def entries(self) -> list[list]:
        if self._entries is None:
            try:
                cached = json.loads(_lines_path(self.path).read_text())
            except (OSError, ValueError):
                raise _Stale from None
            if not isinstance(cached, dict) or cached.get("stamp") != self.stamp:
                raise _Stale
            self._entries = cached["entries"]
        return self._entries

    def entry(self, i: int) -> list:
        return self.named[i] if i in self.named else self.entries()[i]


def build(path: Path) -> Index:
    """Every line read and validated (history.parse's errors), with where each is and its key."""
    st = stamp(path)
    data = path.read_bytes()
    lines = history.parse(data, str(path))
    keys, numbers, entries, offset, i = [], {}, [], 0, 0
    for n, raw in enumerate(data.split(b"\n"), 1):
        if raw.strip():
            shape = _shape(lines[i])
            tag = shape.pop("history")
            text = json.dumps(shape, sort_keys=True)
            if text not in numbers:
                numbers[text] = len(keys)
                keys.append(shape)
            entries.append([n, offset, len(raw), numbers[text], tag])
            i += 1
        offset += len(raw) + 1
    summary = _per_key(entries, len(entries))
    named = {j: entries[j] for k in summary.values() for j in k.positions()}
    index = Index(path, st, keys, [e[4]["id"] for e in entries], summary, named, entries)
    _save(index)
    return index


def _lines_path(history_path: Path) -> Path:
    return cache_path(history_path).with_suffix(".lines.json")


def _save(index: Index) -> None:
    """Best effort: an index that cannot be written is rebuilt next time, never an error."""
    summary = {"version": VERSION, "stamp": index.stamp, "keys": index.keys, "ids": index.ids,
               "summary": {str(k): [v.first, v.newest, v.first_baseline, v.last_baseline]
                           for k, v in index.summary.items()},
               "named": {str(i): e for i, e in index.named.items()}}
    try:
        for target, doc in ((_lines_path(index.path), {"stamp": index.stamp, "entries": index._entries}),
                            (cache_path(index.path), summary)):  # the summary last: it says the lines are there
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(doc))
            os.replace(tmp, target)
    except OSError:
        pass


def load(path: Path) -> Index:
    """The history's index: the cached one when current, else rebuilt (and cached)."""
    st = stamp(path)
    try:
        cached = json.loads(cache_path(path).read_text())
        if cached.get("version") == VERSION and cached.get("stamp") == st:
            return Index(path, st, cached["keys"], cached["ids"],
                         {int(k): _PerKey(*v) for k, v in cached["summary"].items()},
                         {int(i): e for i, e in cached["named"].items()})
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        pass
    return build(path)


class _Stale(Exception):
    """The index is not the history's (a line not where or what it says, its parts out of step): rebuilt."""


def _read_line(index: Index, i: int) -> dict:
    """Line i read at its offset and validated in full; _Stale when it is not the line the index says."""
    n, offset, length, key, tag = index.entry(i)
    with index.path.open("rb") as f:
        f.seek(offset)
        raw = f.read(length)
    try:
        obj = json.loads(raw.decode("utf-8"))
        if obj["history"]["id"] != tag["id"] or obj["history"]["appended"] != tag["appended"]:
            raise _Stale
    except (ValueError, KeyError, TypeError):
        raise _Stale from None
    line = history.validate_line(obj, f"{index.path} line {n}")
    if _shape(line) != {**index.keys[key], "history": tag}:  # what it was selected on is what the line says
        raise _Stale
    return line


def _cut(index: Index, rec: dict) -> int:
    """How many lines come before rec's own (judge_cli.lines_before, on the index): all when it is not in it."""
    tag = rec.get("history") or {}
    rid = tag.get("id") if tag else history.record_id(rec)
    if rid not in set(index.ids):
        return len(index.ids)
    entries = index.entries()
    if tag:
        mine = (tag.get("id"), tag.get("appended"))
        return next((i for i, e in enumerate(entries) if (e[4]["id"], e[4]["appended"]) == mine), len(entries))
    return index.ids.index(rid)


def _candidates(index: Index, keys: dict[int, _PerKey], rec: dict) -> list[int]:
    """The positions, in order, of every line the reference order can select for rec: a superset of what
    baseline_for (rec's key's last baseline), previous_for (the newest line of the keys that changed the fewest
    fields, and its key's last baseline), anchor_for (the first baseline of the keys that may change) and
    pair_line (the newest one-box baseline) choose, worked out per key, never per line."""
    one_box = {**rec, "box": {**(rec.get("box") or {}), "tensor_parallel_size": 1}}
    out, previous, anchors, pairs = set(), [], [], []
    for key, where in keys.items():
        fields = reference.changed(index.keys[key], rec)
        if fields == [] and where.last_baseline is not None:
            out.add(where.last_baseline)
        if fields and where.newest is not None:
            previous.append((len(fields), -where.newest, where))
        if fields is not None and where.first_baseline is not None:
            anchors.append(where.first_baseline)
        if reference.changed(index.keys[key], one_box) is not None and where.last_baseline is not None:
            pairs.append(where.last_baseline)
    if previous:
        closest = min(previous, key=lambda p: p[:2])[2]
        out |= {closest.newest, *([closest.last_baseline] if closest.last_baseline is not None else [])}
    out |= {min(anchors)} if anchors else set()
    out |= {max(pairs)} if pairs else set()
    return sorted(out)


def _kinds(index: Index, keys: dict[int, _PerKey]) -> dict:
    """evidence.history_kinds of the lines before the cut, from the index: each kind's first line."""
    firsts: dict = {}
    for key, where in keys.items():
        kind = (index.keys[key].get("box") or {}).get("simulated")
        firsts[kind] = min(firsts.get(kind, where.first), where.first)
    return {kind: f"line {index.entry(i)[0]}, id {index.entry(i)[4]['id']}"
            for kind, i in sorted(firsts.items(), key=lambda f: f[1])}


def lines_for(path: Path, rec: dict) -> tuple[list[dict], dict, int]:
    """(the history lines rec's verdict reads, before rec's own line when it is one (judge_cli.lines_before): the
    candidates of _candidates, each read in full and checked against its entry; evidence.history_kinds of every
    line before it; how many lines there are before it)."""
    for attempt in (0, 1):
        try:
            index = load(path) if attempt == 0 else build(path)
            cut = _cut(index, rec)
            keys = index.summary if cut == len(index.ids) else _per_key(index.entries(), cut)
            lines = [_read_line(index, i) for i in _candidates(index, keys, rec)]
            return lines, _kinds(index, keys), cut
        except _Stale:
            continue
    raise history.HistoryError(f"{path}: the history changed while it was judged; judge it again")
