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

Reading. Every line is parsed once into HistoryLine (record.BenchRecord's types: NaN, infinities, negative figures
and malformed cells refused); a line that is not UTF-8, not JSON or not a history line is an error naming the file,
the line and the field (HistoryError), never skipped: a baseline silently lost would make the next regression pass.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from sparkctl.measure.record import BenchError, BenchRecord, utc_timestamp

SSH_TIMEOUT_S = 60  # one history read or append over ssh; the file is small, s


class HistoryError(BenchError):
    """The box's history cannot be read: a verdict that depends on it fails, naming the file, line and field."""


class HistoryTag(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str
    appended: str
    baseline: bool
    source: Literal["acceptance", "bench", "confirm"]
    reference: dict | None = None  # {"kind", "name", "id"} of what the gate judged this run against
    provisional: bool = False  # judged on the roofline alone: no yardstick until confirmed
    confirms: str | None = None  # a confirmation line: the id of the provisional line it confirms


class HistoryLine(BenchRecord):
    history: HistoryTag


# ---------------------------------------------------------------------------------------------------- keys (pure)

def config_key(rec: dict) -> dict:
    """What the box ran: box, model key, checkpoint revision, vLLM version and build (its venv: None on records
    written before it was recorded, which so never pass for a recorded build), tensor-parallel size (records
    written before it was recorded ran on one box)."""
    model, box = rec.get("model") or {}, rec.get("box") or {}
    return {"box": box.get("name"), "model": model.get("key"),
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
              confirms: str | None = None) -> dict:
    """rec as a history line; reference: what its verdict judged it against (Reference.tag), when it had one;
    provisional: judged on the roofline alone (never a baseline); confirms: the provisional line this one confirms."""
    line = {k: v for k, v in rec.items() if k != "history"}
    line["history"] = {"id": record_id(rec, confirms), "appended": utc_timestamp(),
                       "baseline": bool(baseline) and not provisional, "source": source,
                       **({"reference": reference} if reference else {}),
                       **({"provisional": True} if provisional else {}), **({"confirms": confirms} if confirms else {})}
    return line


def decode(data: bytes, where: str = "history") -> str:
    """A history file's bytes as text; a byte that is not UTF-8 is named with its line and offset."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        n = data[:exc.start].count(b"\n") + 1
        raise HistoryError(f"{where} line {n}: not UTF-8 (byte {data[exc.start]:#04x} at offset {exc.start}); "
                           "the history cannot be read") from None


def _parse_line(raw: str, where: str) -> dict:
    try:
        obj = json.loads(raw)
    except ValueError as exc:
        raise HistoryError(f"{where}: not a sparkctl history line (not JSON: {exc})") from None
    try:
        return HistoryLine.model_validate(obj).model_dump(by_alias=True, exclude_unset=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        at = ".".join(str(p) for p in first["loc"]) or "line"
        raise HistoryError(f"{where}: not a sparkctl history line: {at}: {first['msg']} "
                           f"({exc.error_count()} problem(s))") from None


def parse(text: str | bytes, where: str = "history") -> list[dict]:
    """Every line of a history file, parsed once into HistoryLine's types; a malformed line is a HistoryError
    naming its number and field (never skipped)."""
    if isinstance(text, bytes):
        text = decode(text, where)
    return [_parse_line(raw, f"{where} line {n}") for n, raw in enumerate(text.splitlines(), 1) if raw.strip()]


def serialize(line: dict) -> str:
    HistoryLine.model_validate(line)
    text = json.dumps(line, sort_keys=True, separators=(",", ":"))
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


def _ssh(host, command: str, stdin: str | None = None) -> bytes:
    """The command's stdout as bytes (a history is decoded by `decode`, which names a bad byte's line)."""
    argv = host.ssh_argv(command)
    try:
        r = subprocess.run(argv, input=None if stdin is None else stdin.encode(), capture_output=True,
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


def append(host, cfg, rec: dict, *, source: str, baseline: bool | None = None,
           reference: dict | None = None, provisional: bool = False, confirms: str | None = None) -> dict:
    """Append rec to the box's history; baseline None: a baseline exactly when its key has none yet (a
    provisional line never is one)."""
    if baseline is None:
        baseline = not provisional and baseline_for(read(host, cfg), rec) is None
    line = make_line(rec, baseline=baseline, source=source, reference=reference, provisional=provisional,
                     confirms=confirms)
    _ssh(host, append_command(history_path(cfg)), stdin=serialize(line))
    return line


def confirm(host, cfg, line_id: str) -> dict:
    """An operator's confirmation of a provisional line (`bench confirm @ID`): appended as its own line, the
    baseline of its configuration and workload when that has none, so it becomes a yardstick from now on."""
    lines = read(host, cfg)
    target = find(lines, line_id)
    tid = target["history"]["id"]
    if confirmed(target):
        raise BenchError(f"history line {tid} is not provisional: nothing to confirm")
    if any(x["history"].get("confirms") == tid for x in lines):
        raise BenchError(f"history line {tid} is already confirmed")
    body = {k: v for k, v in target.items() if k != "history"}
    return append(host, cfg, body, source="confirm", baseline=baseline_for(lines, target) is None,
                  reference=target["history"].get("reference"), confirms=tid)


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
