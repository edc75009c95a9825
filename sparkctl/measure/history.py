"""The box's history of accepted runs: what it measured, and its baseline per configuration.

Where: <STATE_DIR>/<ACCEPTANCE_HISTORY_FILE> on the box (default /var/lib/sparkctl/acceptance/history.jsonl),
root-only (the file 0600 in a 0700 folder). It lives on the box, so any control machine sees the same history.
What: append-only JSON lines; each line is a bench record (record.BenchRecord: workload, window, streams, model,
revision, vLLM version and build, box, date; a quick acceptance run also carries its `gate` part) plus a `history`
part: {"id": 12 hex of the record's sha256, "appended": UTC time, "baseline": bool, "source": "acceptance" | "bench"
| "confirm", "reference": what an accepted gate run was judged against (reference.Reference.tag; absent on older
lines), "provisional": true on a run judged on the roofline alone (absent: false), "confirms": on a confirmation
line, the id of the provisional line it confirms}.
How: read and appended over ssh (HostConn.ssh_argv), the append under flock so two deploys cannot interleave lines.

Baselines. Runs line up only when they measured the same thing: the same configuration (box, model key, checkpoint
revision, vLLM version and build, tensor-parallel size: `config_key`) and the same workload (workload name, version and prompt-set hash, max_tokens,
ignore_eos, temperature: `workload_key`). The baseline of a configuration+workload is the last line of that key
marked baseline: the first accepted run writes one (nothing to compare with yet), and so does a full
`bench --record-baseline`. Later accepted runs are appended as plain history. What a run with no baseline of its
own is judged against (another configuration's baseline, published figures, the roofline) is reference.py's.

Provisional runs. A run judged on the roofline alone (nothing measured to compare with) is appended provisional: it
is never a baseline, an anchor or a previous configuration, so it never silently becomes the yardstick. An operator
confirms it (`bench confirm @ID`), which appends a confirmation line: the same record, its own id, a baseline when
its key has none. The operator, not later runs that agree: runs of a slow configuration agree with each other just
as well, and only someone who knows what the box should do can say a figure no reference judged is right.

Reading. Every line is parsed once into HistoryLine (record.BenchRecord's types: NaN, infinities, figures beyond
record.MAX_FIGURE, negative figures and malformed cells refused); a line that is not UTF-8, not JSON or not a history
line is an error naming the file, the line, the field and how to repair it (HistoryError), never skipped: a baseline
silently lost would make the next regression pass. The same types are checked before a line is appended, so a line
that could not be read back is never written, and a run already recorded (its id) is not appended again. An append
(the deploy's, `bench --record-baseline`'s, `bench confirm`'s) also refuses a record that is no evidence on this box
(evidence.py: the judge's own refusals) and a box whose clock disagrees with the control machine's by more than
ACCEPTANCE_CLOCK_SKEW_S; the line records both clocks. `bench judge` reads a history file through its index
(history_index.py).

Repair (`bench history --repair`): a history an older version wrote (a NaN line, before they were refused) has its
unreadable lines moved into <file>.unreadable-<time>, the rest kept in order, the original kept as
<file>.before-repair-<time>; the new file replaces the old one atomically, under the appenders' lock, and only when
nothing was appended since it was read.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import shlex
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from sparkctl.measure import evidence
from sparkctl.measure.record import (BenchError, BenchRecord, Date, first_error, unrepresentable, utc_timestamp,
                                     validate_record)

SSH_TIMEOUT_S = 60  # one history read or append over ssh; the file is small, s
REPAIR_HINT = ("To repair it: `python -m sparkctl bench history --repair [--box NAME]` moves every unreadable line "
               "into a file next to the history (the original kept beside it) and keeps the rest "
               "(docs/acceptance.md#repairing-a-history)")


class HistoryError(BenchError):
    """The box's history cannot be read: a verdict that depends on it fails, naming the file, line and field."""


# what a gate run was judged against (reference.Reference.kind; reference.KINDS is this tuple)
REFERENCE_KINDS = ("baseline", "previous", "published", "none", "off", "anchor", "published anchor", "one box")


class ReferenceTag(BaseModel):
    """reference.Reference.tag(): the kind, the name the verdict gave it, the history id of its line (or None)."""

    model_config = ConfigDict(strict=True, extra="forbid")
    kind: Literal[REFERENCE_KINDS]
    name: str
    id: str | None


class Clocks(BaseModel):
    """What the append read before appending (evidence.clocks): both UTC, ISO 8601, to the second."""

    model_config = ConfigDict(strict=True, extra="forbid")
    box: Date
    control: Date


class HistoryTag(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    id: str
    appended: Date
    baseline: bool
    source: Literal["acceptance", "bench", "confirm"]
    reference: ReferenceTag | None = None  # what the gate judged this run against
    provisional: bool = False  # judged on the roofline alone: no yardstick until confirmed
    confirms: str | None = None  # a confirmation line: the id of the provisional line it confirms
    clocks: Clocks | None = None  # the box's and the control machine's clocks when it was appended (absent: older)


class HistoryLine(BenchRecord):
    history: HistoryTag


# ---------------------------------------------------------------------------------------------------- keys (pure)

def config_key(rec: dict) -> dict:
    """What the box ran: box and its kind (simulated or real: never one's baseline for the other), model key,
    checkpoint revision, vLLM version and build (its venv: None on records written before it was recorded, which so
    never pass for a recorded build), tensor-parallel size (records written before it was recorded ran on one box)."""
    model, box = rec.get("model") or {}, rec.get("box") or {}
    return {"box": box.get("name"), "simulated": box.get("simulated"), "model": model.get("key"),
            "revision": rec.get("revision") or model.get("sha"), "vllm_version": rec.get("vllm_version"),
            "vllm_build": rec.get("vllm_build"), "tensor_parallel_size": box.get("tensor_parallel_size") or 1}


def workload_key(rec: dict) -> dict:
    """What the requests were: same prompts, same length bound, same sampling."""
    w = rec.get("workload") or {}
    return {"workload": f"{w.get('name')}-v{w.get('version')}", "sha256": w.get("sha256"),
            "max_tokens": rec.get("max_tokens"), "ignore_eos": rec.get("ignore_eos"),
            "temperature": rec.get("temperature")}


def mismatch(a: dict, b: dict) -> list[str]:
    """Why records a and b must not be lined up figure by figure (empty: they may)."""
    out = []
    for name, key in (("configuration", config_key), ("workload", workload_key)):
        ka, kb = key(a), key(b)
        for field in ka:
            if ka[field] != kb[field]:
                out.append(f"{name} differs in {field}: {ka[field]!r} vs {kb[field]!r}")
    return out


def record_id(rec: dict, confirms: str | None = None) -> str:
    body = {k: v for k, v in rec.items() if k != "history"}
    salt = f"confirms {confirms}" if confirms else ""  # a confirmation line is its own line, with its own id
    return hashlib.sha256((json.dumps(body, sort_keys=True) + salt).encode()).hexdigest()[:12]


def confirmed(line: dict) -> bool:
    """Whether a line may be a yardstick: every line but a provisional one (its confirmation line is another)."""
    return not line["history"].get("provisional")


# ---------------------------------------------------------------------------------------------------- lines (pure)

def make_line(rec: dict, *, baseline: bool, source: str, reference: dict | None = None, provisional: bool = False,
              confirms: str | None = None, clocks: dict | None = None) -> dict:
    """rec as a history line; reference: what its verdict judged it against (Reference.tag), when it had one;
    provisional: judged on the roofline alone (never a baseline); confirms: the provisional line this one confirms;
    clocks: the box's and the control machine's when it was appended (evidence.clocks)."""
    line = {k: v for k, v in rec.items() if k != "history"}
    line["history"] = {"id": record_id(rec, confirms), "appended": utc_timestamp(),
                       "baseline": bool(baseline) and not provisional, "source": source,
                       **({"reference": reference} if reference else {}),
                       **({"provisional": True} if provisional else {}), **({"confirms": confirms} if confirms else {}),
                       **({"clocks": clocks} if clocks else {})}
    return line


def decode(data: bytes, where: str = "history", first: int = 1, base: int = 0) -> str:
    """A history file's bytes as text; a byte that is not UTF-8 is named with its line and offset (data is the
    file's tail from byte base, line first, when only appended lines are read: history_index)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        n = data[:exc.start].count(b"\n") + first
        raise HistoryError(f"{where} line {n}: not UTF-8 (byte {data[exc.start]:#04x} at offset "
                           f"{base + exc.start}); the history cannot be read") from None


def validate_line(obj, where: str) -> dict:
    """obj as a HistoryLine's plain dict; refused (HistoryError naming where and the field) when it is not one or
    holds a number that is not finite or beyond a float's range."""
    bad = unrepresentable(obj)
    if bad:
        raise HistoryError(f"{where}: not a sparkctl history line: {bad}")
    try:
        return HistoryLine.model_validate(obj).model_dump(by_alias=True, exclude_unset=True)
    except ValidationError as exc:
        raise HistoryError(f"{where}: not a sparkctl history line: {first_error(exc, 'line')}") from None


def _parse_line(raw: str, where: str) -> dict:
    try:
        obj = json.loads(raw)
    except ValueError as exc:
        raise HistoryError(f"{where}: not a sparkctl history line (not JSON: {exc})") from None
    return validate_line(obj, where)


def parse(text: str | bytes, where: str = "history", first: int = 1, base: int = 0) -> list[dict]:
    """Every line of a history file, parsed once into HistoryLine's types; a malformed line is a HistoryError
    naming its number and field and how to repair the file (never skipped). first and base: text is the file's
    tail from line first, byte base (history_index reads only the lines appended since it was built)."""
    try:
        if isinstance(text, bytes):
            text = decode(text, where, first, base)
        return [_parse_line(raw, f"{where} line {n}") for n, raw in enumerate(text.splitlines(), first)
                if raw.strip()]
    except HistoryError as exc:
        raise HistoryError(f"{exc}. {REPAIR_HINT}") from None


def serialize(line: dict) -> str:
    """line as one strict JSON line; refused when it is no valid history line (a figure that is not finite or not
    within MAX_FIGURE never reaches the box's history, so it never becomes a baseline)."""
    validate_line(line, f"history line {line.get('history', {}).get('id', '')}".strip())
    text = json.dumps(line, sort_keys=True, separators=(",", ":"), allow_nan=False)
    if "\n" in text:
        raise BenchError("a history line must be one line")
    return text + "\n"


def matching(lines: Iterable[dict], rec: dict) -> list[dict]:
    """The lines that measured the same configuration and workload as rec, oldest first."""
    return [x for x in lines if not mismatch(x, rec)]


def baseline_for(lines: Iterable[dict], rec: dict) -> dict | None:
    """rec's baseline: the last confirmed line of its configuration+workload marked baseline, or None."""
    marked = [x for x in matching(lines, rec) if x["history"]["baseline"] and confirmed(x)]
    return marked[-1] if marked else None


def select(lines: Iterable[dict], *, box: str | None = None, model: str | None = None) -> list[dict]:
    return [x for x in lines if (box is None or config_key(x)["box"] == box)
            and (model is None or config_key(x)["model"] == model)]


def find(lines: Iterable[dict], line_id: str) -> dict:
    hits = [x for x in lines if x["history"]["id"].startswith(line_id)]
    if len(hits) != 1:
        raise BenchError(f"history id {line_id!r} matches {len(hits)} lines (expected exactly one)")
    return hits[0]


# ---------------------------------------------------------------------------------------------------- on the box

def history_path(cfg) -> str:
    """<STATE_DIR>/<ACCEPTANCE_HISTORY_FILE> (cfg: the typed settings; the schema keeps the file relative)."""
    return f"{cfg.STATE_DIR.rstrip('/')}/{cfg.ACCEPTANCE_HISTORY_FILE}"


def read_command(path: str) -> str:
    q = shlex.quote(path)
    return f"if [ -f {q} ]; then cat {q}; fi"


def append_command(path: str) -> str:
    """Shell command appending stdin to the history: folder 0700, file 0600, root-owned, one writer at a time."""
    folder = shlex.quote(path.rsplit("/", 1)[0])
    q = shlex.quote(path)
    return (f"umask 077 && mkdir -p {folder} && chmod 0700 {folder} && "
            f"flock {folder}/.lock sh -c 'cat >> {q}' && chmod 0600 {q}")


def _ssh(host, command: str, stdin: str | bytes | None = None) -> bytes:
    """The command's stdout as bytes (a history is decoded by `decode`, which names a bad byte's line)."""
    argv = host.ssh_argv(command)
    try:
        r = subprocess.run(argv, input=stdin.encode() if isinstance(stdin, str) else stdin, capture_output=True,
                           timeout=SSH_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HistoryError(f"{host.name}: the acceptance history is unreachable over ssh ({exc})") from None
    if r.returncode != 0:
        err = r.stderr.decode("utf-8", "replace").strip()[-300:]
        raise HistoryError(f"{host.name}: `{command}` failed over ssh (exit {r.returncode}): {err}")
    return r.stdout


def read(host, cfg) -> list[dict]:
    """The box's history (empty before its first accepted run)."""
    path = history_path(cfg)
    return parse(_ssh(host, read_command(path)), f"{host.name}:{path}")


def control_now() -> float:
    """The control machine's clock, UTC seconds (a function so a test can set it apart from the box's)."""
    return time.time()


def box_clock(host) -> tuple[float, float, float]:
    """(the box's clock, the control machine's at the middle of the read, the read's round trip), UTC seconds."""
    t0 = control_now()
    out = _ssh(host, "date -u +%s").decode("ascii", "replace").strip()
    t1 = control_now()
    try:
        return float(out), (t0 + t1) / 2, t1 - t0
    except ValueError:
        raise HistoryError(f"{host.name}: the box's clock cannot be read (`date -u +%s` said {out[:80]!r})") from None


def _host_config(host, cfg):
    """cfg as a HostConfig (typed settings and catalog, which bound a record: evidence.Bounds): as given when it is
    one, else read through the check layer as every entry point reads its settings."""
    if hasattr(cfg, "catalog"):
        return cfg
    from sparkctl.check.load import host_config

    return host_config(cfg.model_dump(), host.name, host.address)


def append(host, cfg, rec: dict, *, source: str, baseline: bool | None = None,
           reference: dict | None = None, provisional: bool = False, confirms: str | None = None) -> dict:
    """Append rec to the box's history (cfg: the typed settings, or a HostConfig); baseline None: a baseline exactly
    when its key has none yet (a provisional line never is one). Refused when its run is already recorded (one id,
    one run), when rec is not evidence on this box (evidence.check, evidence.same_kind: the judge's own refusals),
    and when the box's clock and the control machine's disagree by more than ACCEPTANCE_CLOCK_SKEW_S; the line
    records both clocks."""
    config = _host_config(host, cfg)
    cfg = config.cfg
    where = f"{host.name}:{history_path(cfg)}"
    lines = read(host, cfg)
    box_s, control_s, round_trip = box_clock(host)
    tag = evidence.clocks(box_s, control_s, cfg.ACCEPTANCE_CLOCK_SKEW_S, round_trip, where)
    body = {k: v for k, v in rec.items() if k != "history"}
    key = config_key(body)
    evidence.check(validate_record(body, where), evidence.Bounds.of(
        config, key["model"], key["tensor_parallel_size"],
        now=_dt.datetime.fromtimestamp(control_s, _dt.timezone.utc), where=where), where)
    evidence.same_kind(body, evidence.history_kinds(lines), where)
    if baseline is None:
        baseline = not provisional and baseline_for(lines, rec) is None
    line = make_line(rec, baseline=baseline, source=source, reference=reference, provisional=provisional,
                     confirms=confirms, clocks=tag)
    text = serialize(line)  # a line that is no valid history line is refused before the box is touched
    _refuse_repeated_id(lines, line["history"]["id"], where)
    _ssh(host, append_command(history_path(cfg)), stdin=text)
    return line


def _refuse_repeated_id(lines: list[dict], line_id: str, where: str) -> None:
    """Ids are how lines are named (@ID, a confirmation's `confirms`, a verdict's reference): two lines under one
    id would let one stand for the other."""
    n = next((n for n, x in enumerate(lines, 1) if x["history"]["id"] == line_id), None)
    if n is not None:
        raise BenchError(f"{where}: run {line_id} is already recorded (line {n}); a run is recorded once")


def measured(line: dict) -> set[tuple[str, int]]:
    """What a record measured: ("decode", stream count) and ("prefill", prompt tokens) of every figure it has."""
    return ({("decode", int(r["streams"])) for r in line.get("runs", [])}
            | {("prefill", int(p["target_tokens"])) for p in line.get("prefill", []) if p.get("tokens_per_s")})


def confirm(host, cfg, line_id: str) -> dict:
    """An operator's confirmation of a provisional line (`bench confirm @ID`): appended as its own line, so it
    becomes a yardstick from now on; the baseline of its configuration and workload when that has none, or when
    that baseline lacks a figure the run measured (the stream set or prefill length changed since: its new figures
    were what no reference judged, and later runs must be judged against them)."""
    lines = read(host, cfg)
    target = find(lines, line_id)
    tid = target["history"]["id"]
    if confirmed(target):
        raise BenchError(f"history line {tid} is not provisional: nothing to confirm")
    if any(x["history"].get("confirms") == tid for x in lines):
        raise BenchError(f"history line {tid} is already confirmed")
    body = {k: v for k, v in target.items() if k != "history"}
    base = baseline_for(lines, target)
    return append(host, cfg, body, source="confirm", baseline=base is None or not measured(target) <= measured(base),
                  reference=target["history"].get("reference"), confirms=tid)


# ---------------------------------------------------------------------------------------------------- repair

@dataclass(frozen=True)
class Moved:
    """A line `bench history --repair` moved aside: its number in the original file, its text, why."""

    number: int
    raw: bytes
    why: str

    def tag(self) -> dict:
        """Its history part, as far as its JSON still says ({}: none)."""
        try:
            tag = json.loads(self.raw).get("history")
        except (ValueError, AttributeError):
            return {}
        return tag if isinstance(tag, dict) else {}

    def describe(self) -> str:
        """"line 2 (id 1a2b3c4d5e6f, a baseline): <why>"."""
        tag = self.tag()
        what = ", ".join(([f"id {tag['id']}"] if isinstance(tag.get("id"), str) else [])
                         + (["a baseline"] if tag.get("baseline") is True else []))
        return f"line {self.number}{f' ({what})' if what else ''}: {self.why}"


def split_readable(data: bytes, where: str) -> tuple[bytes, list[Moved]]:
    """(the readable lines of a history file, in order, each ending in a newline; the lines that are not: not
    UTF-8, not JSON, not a history line). Blank lines are neither."""
    kept, moved = [], []
    for n, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        at = f"{where} line {n}"
        try:
            _parse_line(raw.decode("utf-8"), at)
        except UnicodeDecodeError as exc:
            moved.append(Moved(n, raw, f"not UTF-8 (byte {raw[exc.start]:#04x} at column {exc.start + 1})"))
            continue
        except HistoryError as exc:
            moved.append(Moved(n, raw, str(exc).removeprefix(f"{at}: ")))
            continue
        kept.append(raw + b"\n")
    return b"".join(kept), moved


def aside_command(aside: str) -> str:
    """Shell command writing stdin (the moved lines) to a new root-only file next to the history."""
    return f"umask 077 && cat > {shlex.quote(aside)}"


def replace_command(path: str, backup: str, aside: str, digest: str) -> str:
    """Shell command, under the appenders' lock: when the history is still the file that was read (its sha256),
    copy it to `backup`, then write stdin (the kept lines) to a temporary file moved over it (atomic); otherwise
    change nothing and drop `aside`."""
    folder = path.rsplit("/", 1)[0]
    q, b, a, t = (shlex.quote(x) for x in (path, backup, aside, f"{path}.repairing"))
    script = (f'if [ "$(sha256sum < {q} | cut -d " " -f 1)" != {digest} ]; then rm -f {a}; '
              'echo "the history changed while it was repaired (a run was appended): nothing was replaced, '
              f'repair again" >&2; exit 3; fi; cp -p {q} {b} && cat > {t} && chmod 0600 {t} && mv -f {t} {q}')
    return f"umask 077 && flock {shlex.quote(folder + '/.lock')} sh -c {shlex.quote(script)}"


@dataclass(frozen=True)
class Repair:
    path: str
    kept: int  # lines kept in the history
    moved: list[Moved]
    aside: str | None = None  # where the moved lines are (None: nothing moved)
    backup: str | None = None  # the original file, as it was


def repair(host, cfg) -> Repair:
    """`bench history --repair`: move every line of the box's history that cannot be read (a NaN an older version
    wrote, a cut line, a byte that is not UTF-8) into <history>.unreadable-<time>, keep the rest in order, the
    original kept as <history>.before-repair-<time>; nothing changes when every line reads."""
    path = history_path(cfg)
    data = _ssh(host, read_command(path))
    kept, moved = split_readable(data, f"{host.name}:{path}")
    if not moved:
        return Repair(path, kept.count(b"\n"), [])
    stamp = utc_timestamp().replace("-", "").replace(":", "")
    aside, backup = f"{path}.unreadable-{stamp}", f"{path}.before-repair-{stamp}"
    _ssh(host, aside_command(aside), stdin=b"".join(m.raw + b"\n" for m in moved))
    _ssh(host, replace_command(path, backup, aside, hashlib.sha256(data).hexdigest()), stdin=kept)
    return Repair(path, kept.count(b"\n"), moved, aside, backup)


# ---------------------------------------------------------------------------------------------------- for people

def judged_against(line: dict) -> str:
    """The history table's "judged against" cell: the reference's kind and its history id ("-": not recorded, on
    a full bench or a line written before references were recorded); a provisional run says so."""
    ref = line["history"].get("reference") or {}
    said = "-" if not ref else f"{ref['kind']} {ref['id'][:8]}" if ref.get("id") else str(ref["kind"])
    return f"{said} (provisional)" if not confirmed(line) else said


def _mark(x: dict, confirmations: set[str]) -> str:
    """The B column: B a baseline, P a provisional run not yet confirmed, P+ one an operator confirmed."""
    if not confirmed(x):
        return "P+" if x["history"]["id"] in confirmations else "P"
    return "B" if x["history"]["baseline"] else ""


def _kind(x: dict) -> str:
    confirms = x["history"].get("confirms")
    return f"confirms {confirms[:8]}" if confirms else "gate" if x.get("gate") else "bench"


def _vllm_cell(key: dict) -> str:
    """The version, and the start of the build's venv hash (<version>-<hash>) when recorded."""
    build = key["vllm_build"]
    return f"{key['vllm_version']}" + (f" ({build.rsplit('-', 1)[-1][:6]})" if build else "")


def _row(x: dict, confirmations: set[str] = frozenset()) -> list[str]:
    runs = sorted(x.get("runs", []), key=lambda r: r["streams"])
    decode = ", ".join(f"{r['streams']}: {r['counter_tokens_per_s']:.1f}" for r in runs) or "-"
    prefill = ", ".join(f"{p['tokens_per_s']:.0f}" for p in x.get("prefill", []) if p.get("tokens_per_s")) or "-"
    sd = next((r["spec_decode"] for r in runs if r.get("spec_decode")), None) or {}
    rate = sd.get("acceptance_rate")
    key, work = config_key(x), workload_key(x)
    return [x["history"]["id"], str(x.get("date", ""))[:16], _kind(x), _mark(x, confirmations), str(key["model"]),
            str(key["revision"] or "?")[:8], _vllm_cell(key), work["workload"], f"{x.get('window_s')}", decode, prefill,
            "-" if rate is None else f"{rate:.0%}", judged_against(x)]




def history_table(lines: list[dict], title: str):
    """`bench history`: one row per line, oldest first; figures are the bench probe's (decode per stream count,
    fresh prefill, spec-decode acceptance at the lowest stream count), and what each gate run was judged against."""
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=title, caption="B = baseline of its configuration+workload; P = provisional (judged on the "
                                   "roofline alone; no yardstick until `bench confirm @ID`), P+ = confirmed by a "
                                   "later `confirms <id>` line; gate = a rollout's quick run; "
                                   "vLLM (build) = version (venv hash); judged against: baseline, previous "
                                   "(another build's or revision's baseline), published (the catalog's), none "
                                   "(roofline and KV plan only), off (speed comparisons switched off)")
    for col in ("id", "date", "kind", "B", "model", "revision", "vLLM (build)", "workload", "window s",
                "decode tok/s by streams", "prefill tok/s", "acceptance", "judged against"):
        t.add_column(col, justify="right" if col in ("window s", "prefill tok/s", "acceptance") else "left",
                     overflow="fold", min_width=12 if col == "id" else None)  # an id is typed back as @ID: never cut
    confirmations = {x["history"]["confirms"] for x in lines if x["history"].get("confirms")}
    for x in lines:
        t.add_row(*(escape(c) for c in _row(x, confirmations)))
    return t
