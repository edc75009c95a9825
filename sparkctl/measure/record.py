"""The bench JSON record (schema "sparkctl.bench/1"): its pydantic model, what makes its figures untrustworthy,
and reading and writing it.

The model is what `bench compare`, `load_record`, the acceptance judge and the box's history check a record
against, strictly (pydantic's strict mode, extra fields forbidden): a figure written as a string is refused, never
read as a number, and a field the model does not name is refused, never carried along (a typo'd key would
otherwise leave the figure it meant "not measured" and keep a stranger). It names every field the probe writes;
fields added after the first records were written are optional. What no record can hold whatever its box is
refused here too: a rate outside [0, 1], fewer than one token per step, a date that is not ISO 8601 with its
timezone. What needs the box's settings and catalog to bound (tok/s against the roofline, tokens per step against
the draft length, the date against the clock, the workload against its registry) is evidence.py's.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from sparkctl.config.lock import cache_dirname
from sparkctl.errors import SparkctlError

SCHEMA = "sparkctl.bench/1"
# the largest magnitude a measured figure (tok/s, tokens, requests, seconds, a fraction) may have: none a box measures
# comes near it (a GB10 decodes hundreds to a few thousand tok/s, the sim's tiny models ~1e5 at their roofline;
# a KV cache holds ~1e6 tokens; a window lasts minutes). Beyond it a figure is a corrupt record, and kept as a
# baseline it would fail every later run (1e308 prints as "+inf %"); unitless
MAX_FIGURE = 1e9


def _finite(x: int | float) -> int | float:
    try:
        finite = math.isfinite(x)
    except OverflowError:  # an integer beyond a float's range
        finite = False
    if not finite:
        raise ValueError(f"{x:.6g} is not a finite number" if isinstance(x, float) else
                         f"{str(x)[:12]}... ({len(str(x))} digits) is beyond a float's range")
    if abs(x) > MAX_FIGURE:
        raise ValueError(f"{x:.6g} is beyond the sane range of a measured figure (at most {MAX_FIGURE:g})")
    return x


def _measured(x: int | float) -> int | float:
    if _finite(x) < 0:
        raise ValueError(f"{x} is negative: no rate, count or duration is")
    return x


# kept as written: 40 stays 40 (the reports print it), 40.5 stays 40.5. NaN and infinities are refused everywhere
# (one NaN baseline would fail every later run "vs nan"); a measured figure is also never negative
Signed = Annotated[int | float, AfterValidator(_finite)]
Number = Annotated[int | float, AfterValidator(_measured)]
Count = Annotated[int, Field(ge=0, le=MAX_FIGURE)]
Positive = Annotated[int, Field(gt=0, le=MAX_FIGURE)]  # a stream count, a prompt or context length
Rate = Annotated[int | float, Field(ge=0, le=1)]  # a fraction of drafted tokens accepted: [0, 1]
Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]  # 64 lowercase hex digits


def parse_date(text: str) -> _dt.datetime:
    """An ISO 8601 date and time with its timezone ("2026-12-01T10:00:00Z", "...+01:00") as an aware datetime;
    ValueError naming what is wrong (a date without a timezone could be any of 26 hours)."""
    try:
        when = _dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 date and time (e.g. 2026-12-01T10:00:00Z)") from None
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"{text!r} has no timezone (e.g. 2026-12-01T10:00:00Z)")
    return when


def _date(text: str) -> str:
    parse_date(text)
    return text


Date = Annotated[str, AfterValidator(_date)]  # kept as written (a record's id is the sha256 of its text)


class BenchError(SparkctlError):
    """The probe could not measure (server refused, counters missing, endpoint unreachable), or a bench record
    cannot be read."""


def utc_timestamp() -> str:
    """Now, UTC, to the second, ISO 8601 with a Z: the `date` of bench and NIAH records."""
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


class _Part(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class Workload(_Part):
    name: str
    version: Positive
    prompts: Count | None = None
    sha256: Sha256 | None = None


class Checkpoint(_Part):
    repo: str | None = None
    revision: str | None = None
    sha: str | None = None


class Model(Checkpoint):
    key: str
    title: str | None = None
    served_name: str | None = None
    draft: Checkpoint | None = None
    speculative: dict | None = None
    kv_cache_dtype: str | None = None
    max_model_len: Count | None = None


class Box(_Part):
    name: str | None = None
    address: str | None = None
    simulated: bool | None = None
    usable_memory_gib: Number | None = None
    memory_bandwidth_gbps: Number | None = None
    tensor_parallel_size: Count | None = None  # 2: this box is the head of a two-box tensor-parallel pair


class SpecDecode(_Part):
    drafts: Number | None = None
    draft_tokens: Number | None = None
    accepted_tokens: Number | None = None
    acceptance_rate: Rate | None = None
    tokens_per_step: Annotated[int | float, Field(ge=1, le=MAX_FIGURE)] | None = None  # 1 + accepted / drafts
    mean_draft_length: Number | None = None
    per_position_acceptance: dict[str, Rate] | None = None


class Run(_Part):
    """One decode window (maths.window_result)."""

    streams: Positive
    counter_tokens_per_s: Number
    window_s: Number | None = None
    counter_tokens: Number | None = None
    client_tokens: Count | None = None
    client_tokens_per_s: Number | None = None
    per_stream_tokens_per_s: Number | None = None
    client_tokens_bracket: list[Count] | None = None
    client_vs_counter: Signed | None = None
    counter_outside_bracket: Signed | None = None
    agree: bool | None = None
    client_count_method: str | None = None
    roofline_tokens_per_s: Number | None = None
    roofline_pct: Number | None = None
    spec_decode: SpecDecode | None = None
    requests_started: Count | None = None
    requests_finished: Count | None = None
    requests_errored: Count | None = None
    ttft_s_mean: Number | None = None
    scrape_s: list[Number] | None = None


class Prefill(_Part):
    """One fresh prefill (maths.prefill_result, or maths.prefill_failure with its error)."""

    target_tokens: Positive
    error: str | None = None
    prompt_tokens: Count | None = None
    ttft_s: Number | None = None
    tokens_per_s: Number | None = None
    server_prefill_s: Number | None = None
    server_tokens_per_s: Number | None = None
    prompt_tokens_delta: Number | None = None
    prefix_cache_queries_delta: Number | None = None
    prefix_cache_hits_delta: Number | None = None
    prompt_tokens_cached_delta: Number | None = None
    fresh: bool | None = None
    token_count_source: str | None = None
    samples_tokens_per_s: list[Number | None] | None = None  # prefill_repeats > 1: every sample's rate


class KvCell(_Part):
    """vLLM's reported KV capacity beside the plan's (quick.read_kv)."""

    planned_tokens: Count | None = None
    measured_tokens: Count | None = None


class NiahCell(_Part):
    """The gate's one NIAH cell (niah.run_cell's dict): what the verdict reads of it."""

    length: Positive
    depth: Annotated[int | float, Field(ge=0, le=100)]
    passed: bool
    skipped: bool = False
    error: str | None = None
    answer: str | None = None
    needle_value: str = Field(min_length=1)  # what the answer is scored against: a cell without it is no cell
    needle_key: str | None = None
    trial: Count | None = None
    prompt_tokens: Count | None = None
    finish_reason: str | None = None
    elapsed_s: Number | None = None


class Gate(_Part):
    """Present only on a rollout's quick acceptance run (sparkctl/measure/quick.py): its short window and few
    streams are not the full bench's, so nobody reads one as the other."""

    kind: Literal["acceptance"]
    window_s: Number
    streams: list[Positive]
    prefill_tokens: list[Positive] = []
    prefill_repeats: Count | None = None  # fresh prompts per length, the median sample reported
    kv: KvCell | None = None  # vLLM's reported KV capacity against the plan
    niah: NiahCell | None = None  # the one NIAH cell


class BenchRecord(_Part):
    schema_: Literal[SCHEMA] = Field(alias="schema")  # a later version gets its own model
    date: Date
    workload: Workload
    window_s: Number
    model: Model
    runs: list[Run]
    prefill: list[Prefill] = []
    streams: list[Positive] | None = None
    max_tokens: Count | None = None
    temperature: Number | None = None
    ignore_eos: bool | None = None
    revision: str | None = None
    vllm_version: str | None = None
    vllm_build: str | None = None  # the venv it ran from, <version>-<hash> (labels.build_labels); absent on old records
    box: Box | None = None
    endpoint: str | None = None
    max_model_len: Count | None = None
    served_model_root: str | None = None
    served_sha: str | None = None
    roofline_single_stream_tokens_per_s: Number | None = None
    problems: list[str] = []
    gate: Gate | None = None  # a rollout's acceptance run; absent on a full bench

    @field_validator("runs")
    @classmethod
    def _one_window_per_stream_count(cls, runs: list[Run]) -> list[Run]:
        _refuse_repeats([r.streams for r in runs], "decode windows at {} streams", "stream count")
        return runs

    @field_validator("prefill")
    @classmethod
    def _one_prefill_per_length(cls, prefill: list[Prefill]) -> list[Prefill]:
        _refuse_repeats([p.target_tokens for p in prefill], "prefills of {} tokens", "prompt length")
        return prefill


def _refuse_repeats(keys: list[int], what: str, one: str) -> None:
    """Two figures under one key: judging one would silently drop the other, so neither is read."""
    for i, k in enumerate(keys):
        if k in keys[:i]:
            raise ValueError(f"two {what.format(k)} (items {keys.index(k)} and {i}): a record holds one per {one}, "
                             "and judging one would silently drop the other")


def unrepresentable(obj, path: str = "") -> str | None:
    """Where a record (any part of it, fields the model does not name included) holds a number that is no finite
    JSON double: NaN, an infinity, an integer beyond a float's range ("runs.0.x: ..."), else None. `--json` and
    every reader that converts it would fail on it."""
    if isinstance(obj, dict):
        found = (unrepresentable(v, f"{path}.{k}" if path else str(k)) for k, v in obj.items())
    elif isinstance(obj, list):
        found = (unrepresentable(v, f"{path}.{i}" if path else str(i)) for i, v in enumerate(obj))
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        try:
            return None if math.isfinite(float(obj)) else f"{path or 'record'}: {obj} is not a finite number"
        except OverflowError:
            return f"{path or 'record'}: an integer of {len(str(obj))} digits is beyond a float's range"
    else:
        return None
    return next((x for x in found if x), None)


def validate_record(record: dict, where: str = "bench record") -> dict:
    """The record checked against BenchRecord, as a plain dict of what it holds (absent fields stay absent)."""
    bad = unrepresentable(record)
    if bad:
        raise BenchError(f"{where}: not a sparkctl bench record of schema {SCHEMA!r}: {bad}")
    try:
        model = BenchRecord.model_validate(record)
    except ValidationError as exc:
        raise BenchError(f"{where}: not a sparkctl bench record of schema {SCHEMA!r}: {first_error(exc, 'record')}"
                         ) from None
    return model.model_dump(by_alias=True, exclude_unset=True)


def first_error(exc: ValidationError, whole: str) -> str:
    """"<field>: <value> <why>" of a validation's first error, then how many there were: the field, the value
    and the bound, as a refusal names them."""
    errors = exc.errors()
    first = errors[0]
    loc = [str(p) for p in first["loc"]]
    union = bool(loc) and (loc[-1] in _UNION_MEMBERS or "[" in loc[-1])  # int | float: one error per member
    if union:
        loc.pop()
    at = ".".join(loc) or whole
    value = "" if first["type"] == "missing" else f" = {_shown(first.get('input'))}"
    why = (f"a number, not {_json_type(first.get('input'))} (read strictly: never converted)" if union
           else first["msg"])
    problems = len({tuple(str(p) for p in e["loc"][:len(loc)]) for e in errors}) if union else len(errors)
    return f"{at}{value}: {why} ({problems} problem(s))"


_UNION_MEMBERS = ("int", "float", "str", "bool")


def _json_type(value) -> str:
    return {str: "a string", bool: "true or false", dict: "an object", list: "a list", type(None): "null"}.get(
        type(value), type(value).__name__)


def _shown(value) -> str:
    text = json.dumps(value) if isinstance(value, (str, int, float, bool, type(None))) else type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def load_record(path: str | Path) -> dict:
    try:
        rec = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise BenchError(f"{path}: not a readable bench record ({exc})") from None
    if not isinstance(rec, dict):
        raise BenchError(f"{path}: not a sparkctl bench record (a JSON {type(rec).__name__}, not an object)")
    return validate_record(rec, str(path))


def write_record(record: dict, path: str | Path) -> Path:
    """Any record (bench or NIAH) as indented JSON, its folder created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def served_sha(model_root: str | None) -> str | None:
    """The commit a vLLM serves, from its model path (.../snapshots/<40 hex>), or None."""
    m = re.search(r"/snapshots/([0-9a-f]{40})(?:/|$)", model_root or "")
    return m.group(1) if m else None


def _checkpoint_problems(record: dict) -> list[str]:
    """The server runs another checkpoint or commit than the record's labels say."""
    problems = []
    repo = (record.get("model") or {}).get("repo")
    root = record.get("served_model_root")
    if repo and root and "/snapshots/" in root and f"{cache_dirname(repo)}/" not in root:
        problems.append(f"the server runs {root}, not the configured checkpoint {repo}: labels would be wrong")
    sha = record.get("served_sha")
    if sha and record.get("revision") and sha != record["revision"]:
        problems.append(f"the server runs commit {sha}, the lock file says {record['revision']}")
    return problems


def _disagreement(run: dict) -> str:
    gap = run.get("counter_outside_bracket")
    lo, hi = run.get("client_tokens_bracket") or (None, None)
    why = "no counter movement" if gap is None else \
        f"{100 * gap:+.1f} % outside the client's {lo}-{hi} tokens, counter {run.get('counter_tokens'):g}"
    return f"{run['streams']} streams: client and counter tokens disagree ({why})"


def _prefill_problem(p: dict) -> str | None:
    if p.get("error"):
        return f"prefill {p['target_tokens']}: {p['error']}"
    if not p.get("fresh"):
        return (f"prefill {p['target_tokens']}: prefix cache hit {p['prefix_cache_hits_delta']:g} "
                "tokens, the prompt was not fresh")
    return None


def check_record(record: dict) -> list[str]:
    """Why a record's figures cannot be trusted (empty: they can)."""
    problems = _checkpoint_problems(record)
    problems += [_disagreement(run) for run in record.get("runs", []) if not run.get("agree")]
    problems += [why for why in map(_prefill_problem, record.get("prefill", [])) if why]
    return problems
