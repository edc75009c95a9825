"""An index of a history file, so `bench judge` reads only the lines its verdict needs, whatever the history's length.

A box benchmarked daily for years leaves thousands of lines; a verdict reads a handful of them (its baseline, the
previous configuration's, the anchor, a pair's one-box bound). The index holds, per line, where it is in the file
(offset, length) and what the reference order selects on (history.config_key and workload_key's fields, the
history part's id, appended, baseline, provisional, confirms), never a figure. Judging (`lines_for`):

1. the index holds the byte length and the sha256 of the bytes it was built from (`stamp`). It is current when
   the file is those bytes. When the file grew (a deploy appended its verdict) and its first bytes hash, to the
   byte, to the stamp and end a line, only the appended lines are read, validated exactly as history.parse does
   and merged into the index (`_extend`): the prefix is hashed, never trusted on its size or mtime. Otherwise
   (missing, unreadable, another version; a history rewritten, truncated or edited anywhere) the index is rebuilt
   from the file, which reads and validates every line (a bad line is the same HistoryError);
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

import dataclasses
import hashlib
import json
import os
from pathlib import Path

from sparkctl.measure import history, reference

VERSION = 2  # of the index files' layout
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


def stamp(data: bytes) -> dict:
    """What the index was built from: the history's byte length and the sha256 of those bytes (hashlib over the raw
    bytes, no JSON: ~40 ms for 13 MB here)."""
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


@dataclasses.dataclass
class _PerKey:
    """Per key (configuration + workload), among the lines before the cut: where its lines are."""

    first: int  # its first line (any)
    newest: int | None = None  # its newest confirmed line
    first_baseline: int | None = None  # its first confirmed baseline
    last_baseline: int | None = None  # its last confirmed baseline

    def positions(self) -> set[int]:
        return {x for x in (self.first, self.newest, self.first_baseline, self.last_baseline) if x is not None}


def _count(out: dict[int, _PerKey], i: int, entry: list) -> None:
    """Line i (its entry) counted into the per-key summary out of the lines before it."""
    key, tag = entry[3], entry[4]
    k = out.setdefault(key, _PerKey(i))
    if tag.get("provisional"):  # never a yardstick (history.confirmed)
        return
    k.newest = i
    if tag["baseline"]:
        k.first_baseline = i if k.first_baseline is None else k.first_baseline
        k.last_baseline = i


def _per_key(entries: list[list], cut: int) -> dict[int, _PerKey]:
    out: dict[int, _PerKey] = {}
    for i in range(cut):
        _count(out, i, entries[i])
    return out


@dataclasses.dataclass
class Index:
    """A history's index. The summary (keys, ids, per key of the whole file, and the entries it names) is all a
    judgement of a new record reads; every line's entry is read only to judge a line of the history itself."""

    path: Path
    stamp: dict
    keys: list[dict]  # the distinct shapes (_shape without the history part) of the file's lines
    ids: list[str]  # every line's history id, in order
    summary: dict[int, _PerKey]  # per key, over the whole file
    named: dict[int, list]  # the entries of the lines the summary names: [n, offset, length, key, history part]
    lines_sha256: str  # of the lines file (every entry, one JSON line each), so that it is this summary's
    _entries: list[list] | None = None  # every non-blank line's entry, when read

    def entries(self) -> list[list]:
        if self._entries is None:
            try:
                data = _lines_path(self.path).read_bytes()
                if hashlib.sha256(data).hexdigest() != self.lines_sha256:
                    raise _Stale
                self._entries = [json.loads(x) for x in data.splitlines()]
            except (OSError, ValueError):
                raise _Stale from None
            if len(self._entries) != len(self.ids):
                raise _Stale
        return self._entries

    def entry(self, i: int) -> list:
        return self.named[i] if i in self.named else self.entries()[i]


def _entries_of(path: Path, data: bytes, base: int, keys: list[dict]) -> list[list]:
    """The entries of the lines of data from byte base (the start of a line), each read and validated exactly as
    history.parse reads a file (its errors, the file's own line numbers); a new shape is added to keys."""
    first = data[:base].count(b"\n") + 1
    tail = data[base:]
    lines = history.parse(tail, str(path), first, base)
    numbers = {json.dumps(k, sort_keys=True): j for j, k in enumerate(keys)}
    entries, offset, i = [], base, 0
    for n, raw in enumerate(tail.split(b"\n"), first):
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
    return entries


def _lines_bytes(entries: list[list]) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in entries)


def build(path: Path, data: bytes | None = None) -> Index:
    """Every line read and validated (history.parse's errors), with where each is and its key."""
    data = path.read_bytes() if data is None else data
    keys: list[dict] = []
    entries = _entries_of(path, data, 0, keys)
    summary = _per_key(entries, len(entries))
    named = {j: entries[j] for k in summary.values() for j in k.positions()}
    lines = _lines_bytes(entries)
    index = Index(path, stamp(data), keys, [e[4]["id"] for e in entries], summary, named,
                  hashlib.sha256(lines).hexdigest(), entries)
    _save(index, lines)
    return index


def _extend(path: Path, data: bytes, old: Index, new_stamp: dict) -> Index:
    """old, the index of data's first old.stamp["size"] bytes (the caller checked their sha256), with the lines
    appended since: only those are read and validated. _Stale when old's lines file is not its own."""
    lines = _lines_path(path).read_bytes()
    if hashlib.sha256(lines).hexdigest() != old.lines_sha256 or not all(
            j in old.named for k in old.summary.values() for j in k.positions()):
        raise _Stale
    keys = list(old.keys)
    new = _entries_of(path, data, old.stamp["size"], keys)
    summary = {k: dataclasses.replace(v) for k, v in old.summary.items()}
    for i, e in enumerate(new, len(old.ids)):
        _count(summary, i, e)
    named = {j: old.named[j] if j < len(old.ids) else new[j - len(old.ids)]
             for k in summary.values() for j in k.positions()}
    lines += _lines_bytes(new)
    index = Index(path, new_stamp, keys, old.ids + [e[4]["id"] for e in new], summary, named,
                  hashlib.sha256(lines).hexdigest())
    _save(index, lines)
    return index


def _lines_path(history_path: Path) -> Path:
    return cache_path(history_path).with_suffix(".lines.jsonl")


def _save(index: Index, lines: bytes) -> None:
    """Best effort: an index that cannot be written is rebuilt next time, never an error."""
    summary = {"version": VERSION, "stamp": index.stamp, "keys": index.keys, "ids": index.ids,
               "summary": {str(k): [v.first, v.newest, v.first_baseline, v.last_baseline]
                           for k, v in index.summary.items()},
               "named": {str(i): e for i, e in index.named.items()}, "lines_sha256": index.lines_sha256}
    try:
        for target, doc in ((_lines_path(index.path), lines),
                            (cache_path(index.path), json.dumps(summary).encode())):  # the summary last
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(doc)
            os.replace(tmp, target)
    except OSError:
        pass


def _cached(path: Path) -> Index | None:
    try:
        cached = json.loads(cache_path(path).read_text())
        if cached.get("version") != VERSION:
            return None
        return Index(path, dict(cached["stamp"]), cached["keys"], cached["ids"],
                     {int(k): _PerKey(*v) for k, v in cached["summary"].items()},
                     {int(i): e for i, e in cached["named"].items()}, cached["lines_sha256"])
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        return None


def load(path: Path) -> Index:
    """The history's index: the cached one when it was built from exactly these bytes; extended by the appended
    lines alone when the history grew and its first bytes are, to the byte (sha256), the ones it was built from
    and end a line; else rebuilt from every line (a rewritten, truncated or edited history). Cached in each case."""
    data = path.read_bytes()
    cached = _cached(path)
    size = cached.stamp.get("size") if cached else None
    if isinstance(size, int) and 0 <= size <= len(data):
        digest = hashlib.sha256(memoryview(data)[:size])
        if digest.hexdigest() == cached.stamp.get("sha256"):
            if size == len(data):
                return cached
            if data[size - 1:size] in (b"\n", b""):  # the indexed bytes end a line: the rest are new lines
                digest.update(memoryview(data)[size:])
                try:
                    return _extend(path, data, cached, {"size": len(data), "sha256": digest.hexdigest()})
                except (_Stale, OSError, LookupError, TypeError):  # an index not its own: rebuilt
                    pass
    return build(path, data)


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
