"""The box's history of accepted runs (issue 12): what it measured, and its baseline per configuration.

Where: <STATE_DIR>/<ACCEPTANCE_HISTORY_FILE> on the box (default /var/lib/sparkctl/acceptance/history.jsonl),
root-only (the file 0600 in a 0700 folder). It lives on the box, so any control machine sees the same history.
What: append-only JSON lines; each line is a bench record (record.BenchRecord: workload, window, streams, model,
revision, vLLM version and build, box, date; a quick acceptance run also carries its `gate` part) plus a `history`
part: {"id": 12 hex of the record's sha256, "appended": UTC time, "baseline": bool, "source": "acceptance" | "bench",
"reference": what an accepted gate run was judged against (reference.Reference.tag; absent on older lines)}.
How: read and appended over ssh (HostConn.ssh_argv), the append under flock so two deploys cannot interleave lines.

Baselines. Runs line up only when they measured the same thing: the same configuration (box, model key, checkpoint
revision, vLLM version and build, tensor-parallel size: `config_key`) and the same workload (workload name, version and prompt-set hash, max_tokens,
ignore_eos, temperature: `workload_key`). The baseline of a configuration+workload is the last line of that key
marked baseline: the first accepted run writes one (nothing to compare with yet), and so does a full
`bench --record-baseline`. Later accepted runs are appended as plain history. What a run with no baseline of its
own is judged against (another configuration's baseline, published figures, the roofline) is reference.py's.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from sparkctl.measure.record import (
    BenchError,
    BenchRecord,
    utc_timestamp,
    validate_record,
)

SSH_TIMEOUT_S = 60  # one history read or append over ssh; the file is small, s


class HistoryTag(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str
    appended: str
    baseline: bool
    source: Literal["acceptance", "bench"]
    reference: dict | None = None  # {"kind", "name", "id"} of what the gate judged this run against


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


def record_id(rec: dict) -> str:
    body = {k: v for k, v in rec.items() if k != "history"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:12]


# ---------------------------------------------------------------------------------------------------- lines (pure)

def make_line(rec: dict, *, baseline: bool, source: str, reference: dict | None = None) -> dict:
    """rec as a history line; reference: what its verdict judged it against (Reference.tag), when it had one."""
    line = {k: v for k, v in rec.items() if k != "history"}
    line["history"] = {"id": record_id(rec), "appended": utc_timestamp(), "baseline": bool(baseline),
                       "source": source, **({"reference": reference} if reference else {})}
    return line


def parse(text: str, where: str = "history") -> list[dict]:
    """Every line of a history file, validated; a malformed line is an error naming its number (never skipped:
    a baseline silently lost would make the next regression pass unseen)."""
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
            HistoryLine.model_validate(obj)
        except (ValueError, ValidationError) as exc:
            first = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
            raise BenchError(f"{where} line {n}: not a sparkctl history line ({first})") from None
        out.append(validate_record(obj, f"{where} line {n}") | {"history": obj["history"]})
    return out


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
    """rec's baseline: the last line of its configuration+workload marked baseline, or None."""
    marked = [x for x in matching(lines, rec) if x["history"]["baseline"]]
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


def _ssh(host, command: str, stdin: str | None = None) -> str:
    argv = host.ssh_argv(command)
    try:
        r = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=SSH_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BenchError(f"{host.name}: the acceptance history is unreachable over ssh ({exc})") from None
    if r.returncode != 0:
        raise BenchError(f"{host.name}: `{command}` failed over ssh (exit {r.returncode}): {r.stderr.strip()[-300:]}")
    return r.stdout


def read(host, cfg) -> list[dict]:
    """The box's history (empty before its first accepted run)."""
    path = history_path(cfg)
    return parse(_ssh(host, read_command(path)), f"{host.name}:{path}")


def append(host, cfg, rec: dict, *, source: str, baseline: bool | None = None,
           reference: dict | None = None) -> dict:
    """Append rec to the box's history; baseline None: a baseline exactly when its key has none yet."""
    if baseline is None:
        baseline = baseline_for(read(host, cfg), rec) is None
    line = make_line(rec, baseline=baseline, source=source, reference=reference)
    _ssh(host, append_command(history_path(cfg)), stdin=serialize(line))
    return line


# ---------------------------------------------------------------------------------------------------- for people

def judged_against(line: dict) -> str:
    """The history table's "judged against" cell: the reference's kind and its history id ("-": not recorded, on
    a full bench or a line written before issue 20)."""
    ref = line["history"].get("reference") or {}
    if not ref:
        return "-"
    return f"{ref['kind']} {ref['id'][:8]}" if ref.get("id") else str(ref["kind"])


def _vllm_cell(key: dict) -> str:
    """The version, and the start of the build's venv hash (<version>-<hash>) when recorded."""
    build = key["vllm_build"]
    return f"{key['vllm_version']}" + (f" ({build.rsplit('-', 1)[-1][:6]})" if build else "")


def _row(x: dict) -> list[str]:
    runs = sorted(x.get("runs", []), key=lambda r: r["streams"])
    decode = ", ".join(f"{r['streams']}: {r['counter_tokens_per_s']:.1f}" for r in runs) or "-"
    prefill = ", ".join(f"{p['tokens_per_s']:.0f}" for p in x.get("prefill", []) if p.get("tokens_per_s")) or "-"
    sd = next((r["spec_decode"] for r in runs if r.get("spec_decode")), None) or {}
    rate = sd.get("acceptance_rate")
    key, work = config_key(x), workload_key(x)
    return [x["history"]["id"], str(x.get("date", ""))[:16], "gate" if x.get("gate") else "bench",
            "B" if x["history"]["baseline"] else "", str(key["model"]), str(key["revision"] or "?")[:8],
            _vllm_cell(key), work["workload"], f"{x.get('window_s')}", decode, prefill,
            "-" if rate is None else f"{rate:.0%}", judged_against(x)]




def history_table(lines: list[dict], title: str):
    """`bench history`: one row per line, oldest first; figures are the bench probe's (decode per stream count,
    fresh prefill, spec-decode acceptance at the lowest stream count), and what each gate run was judged against."""
    from rich.table import Table

    t = Table(title=title, caption="B = baseline of its configuration+workload; gate = a rollout's quick run; "
                                   "vLLM (build) = version (venv hash); judged against: baseline, previous "
                                   "(another build's or revision's baseline), published (the catalog's), none "
                                   "(roofline and KV plan only), off (speed comparisons switched off)")
    for col in ("id", "date", "kind", "B", "model", "revision", "vLLM (build)", "workload", "window s",
                "decode tok/s by streams", "prefill tok/s", "acceptance", "judged against"):
        t.add_column(col, justify="right" if col in ("window s", "prefill tok/s", "acceptance") else "left",
                     overflow="fold", min_width=12 if col == "id" else None)  # an id is typed back as @ID: never cut
    for x in lines:
        t.add_row(*_row(x))
    return t
