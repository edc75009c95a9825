"""The bench record for people: the terminal tables of one run, the side-by-side comparison of two, the plot."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def _fmt(v, spec: str = ".1f", none: str = "-") -> str:
    return none if v is None else format(v, spec)


def _part(rec: dict, key: str) -> dict:
    """A nested object of a record (model, box, workload), empty when the record has none."""
    return rec.get(key) or {}


def run_label(rec: dict) -> str:
    rev = (rec.get("revision") or "")[:8]
    return f"{_part(rec, 'model').get('key', '?')}{'@' + rev if rev else ''} {str(rec.get('date', ''))[:10]}"


def _workload_label(rec: dict) -> str:
    w = _part(rec, "workload")
    return f"{w.get('name', '?')}-v{w.get('version', '?')}"


def _box_name(rec: dict):
    return _part(rec, "box").get("name")


def differences(a: dict, b: dict) -> list[str]:
    """What makes two records not directly comparable, in words for the table header."""
    out = []
    if (_workload_label(a), _part(a, "workload").get("sha256")) != \
            (_workload_label(b), _part(b, "workload").get("sha256")):
        out.append(f"WORKLOADS DIFFER: {_workload_label(a)} vs {_workload_label(b)}")
    if a.get("window_s") != b.get("window_s"):
        out.append(f"WINDOWS DIFFER: {a.get('window_s')} s vs {b.get('window_s')} s")
    for key in ("max_tokens", "ignore_eos", "temperature"):
        if a.get(key) != b.get(key):
            out.append(f"{key} differs: {a.get(key)} vs {b.get(key)}")
    if _box_name(a) != _box_name(b):
        out.append(f"boxes differ: {_box_name(a)} vs {_box_name(b)}")
    return out


def _runs_by_streams(rec: dict) -> dict[int, dict]:
    return {int(r["streams"]): r for r in rec.get("runs", [])}


def _prefill_by_target(rec: dict) -> dict[int, dict]:
    return {int(p["target_tokens"]): p for p in rec.get("prefill", [])}


def _decode_cell(run: dict | None) -> str:
    if run is None:
        return "-"
    pct = run.get("roofline_pct")
    if pct is None:
        return f"{run['counter_tokens_per_s']:.1f}"
    return f"{run['counter_tokens_per_s']:.1f} ({pct:.0f}%)" if pct >= 1 else \
        f"{run['counter_tokens_per_s']:.1f} ({pct:.2g}%)"


def _decode_row(run: dict) -> list[str]:
    sd = run.get("spec_decode") or {}
    per_pos = ", ".join(f"{v:.2f}" for v in (sd.get("per_position_acceptance") or {}).values())
    gap = run.get("client_vs_counter")
    return [str(run["streams"]), _decode_cell(run), _fmt(run.get("per_stream_tokens_per_s")),
            _fmt(run.get("client_tokens_per_s")),
            ("-" if gap is None else f"{100 * gap:+.1f}%") + ("" if run.get("agree") else " !"),
            _fmt(sd.get("acceptance_rate"), ".0%"), _fmt(sd.get("tokens_per_step"), ".2f"),
            per_pos or "-", str(run.get("requests_finished", "-"))]


def _prefill_row(pf: dict) -> list[str]:
    if pf.get("error"):
        return [str(pf["target_tokens"]), "-", "-", pf["error"], "-", "-"]
    samples = pf.get("samples_tokens_per_s") or []
    rate = _fmt(pf.get("tokens_per_s"), ".0f") + (f" (median of {len(samples)})" if len(samples) > 1 else "")
    return [str(pf["target_tokens"]), _fmt(pf.get("prompt_tokens"), "d"), _fmt(pf.get("ttft_s"), ".3f"),
            rate, _fmt(pf.get("server_tokens_per_s"), ".0f"), _fmt(pf.get("prefix_cache_hits_delta"), ".0f")]


def _table(columns: Sequence[str], rows, **kw):
    """A rich table of right-aligned columns."""
    from rich.table import Table

    t = Table(**kw)
    for col in columns:
        t.add_column(col, justify="right")
    for row in rows:
        t.add_row(*row)
    return t


def record_tables(rec: dict) -> list:
    """The terminal tables of one probe run: decode, and prefill when the run measured any (--no-prefill: none)."""
    title = (f"{run_label(rec)} on {_part(rec, 'box').get('name', '?')}  vLLM {rec.get('vllm_version') or '?'}  "
             f"{_workload_label(rec)}  window {rec.get('window_s')} s")
    decode = _table(("streams", "tok/s (roofline)", "per stream", "client tok/s", "client vs counter",
                     "acceptance", "tokens/step", "per-position", "reqs done"),
                    map(_decode_row, rec.get("runs", [])), title=title,
                    caption="tok/s from vllm:generation_tokens_total; (x%) of the planner's decode roofline")
    if not rec.get("prefill"):
        return [decode]
    prefill = _table(("target", "prompt tokens", "TTFT s", "tok/s", "server tok/s", "prefix-cache hits"),
                     map(_prefill_row, rec["prefill"]), title="prefill (fresh prompt, max_tokens 1)")
    return [decode, prefill]


def _ratio(x, y) -> str:
    return f"{y / x:.2f}x" if x and y else "-"


def _identity_rows(a: dict, b: dict) -> list[tuple[str, str, str, str]]:
    """What was measured, and when."""
    return [("model", _part(a, "model").get("key", "?"), _part(b, "model").get("key", "?"), ""),
            ("locked revision", (a.get("revision") or "?")[:12], (b.get("revision") or "?")[:12], ""),
            ("vLLM", str(a.get("vllm_version")), str(b.get("vllm_version")), ""),
            ("box", str(_box_name(a)), str(_box_name(b)), ""),
            ("date", str(a.get("date")), str(b.get("date")), "")]


def _paired(xs: dict, ys: dict) -> list[tuple]:
    """(key, x or None, y or None) for every key of either map, ascending: the rows of a side-by-side table."""
    return [(n, xs.get(n), ys.get(n)) for n in sorted(set(xs) | set(ys))]


def _decode_rows(a: dict, b: dict) -> list[tuple[str, str, str, str]]:
    return [(f"decode tok/s, {n} stream{'s' if n > 1 else ''}", _decode_cell(x), _decode_cell(y),
             _ratio(x and x["counter_tokens_per_s"], y and y["counter_tokens_per_s"]))
            for n, x, y in _paired(_runs_by_streams(a), _runs_by_streams(b))]


def _spec_cell(sd: dict) -> str:
    return f"{_fmt(sd.get('acceptance_rate'), '.0%')} / {_fmt(sd.get('tokens_per_step'), '.2f')}"


def _spec_rows(a: dict, b: dict) -> list[tuple[str, str, str, str]]:
    """Speculative decoding at each stream count either run measured it."""
    rows = []
    for n, x, y in _paired(_runs_by_streams(a), _runs_by_streams(b)):
        sx, sy = (x or {}).get("spec_decode") or {}, (y or {}).get("spec_decode") or {}
        if sx or sy:
            rows.append((f"acceptance / tokens per step, {n}", _spec_cell(sx), _spec_cell(sy), ""))
    return rows


def _prefill_cell(p: dict) -> str:
    return p.get("error") or _fmt(p.get("tokens_per_s"), ".0f")


def _prefill_rows(a: dict, b: dict) -> list[tuple[str, str, str, str]]:
    return [(f"prefill tok/s, {f'{n // 1024}K' if n % 1024 == 0 else n} prompt", _prefill_cell(x or {}),
             _prefill_cell(y or {}), _ratio((x or {}).get("tokens_per_s"), (y or {}).get("tokens_per_s")))
            for n, x, y in _paired(_prefill_by_target(a), _prefill_by_target(b))]


def compare_rows(a: dict, b: dict) -> list[tuple[str, str, str, str]]:
    """(row label, A, B, B/A) for the side-by-side table."""
    return _identity_rows(a, b) + _decode_rows(a, b) + _spec_rows(a, b) + _prefill_rows(a, b)


def compare_table(a: dict, b: dict, name_a: str = "A", name_b: str = "B"):
    from rich.table import Table

    diffs = differences(a, b)
    title = f"{name_a}: {run_label(a)}  vs  {name_b}: {run_label(b)}"
    if diffs:
        title += "\n" + "\n".join(f"[bold red]{d}[/]" for d in diffs)
    else:
        title += f"\nsame workload {_workload_label(a)}, same {a.get('window_s')} s window"
    t = Table(title=title)
    t.add_column("")
    t.add_column(name_a, justify="right")
    t.add_column(name_b, justify="right")
    t.add_column(f"{name_b}/{name_a}", justify="right")
    for row in compare_rows(a, b):
        t.add_row(*row)
    return t


def plot_records(records: Sequence[dict], path: str | Path, labels: Sequence[str] | None = None) -> Path:
    """PNG: aggregate decode tokens/s (counter) against streams, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    all_streams: set[int] = set()
    for i, rec in enumerate(records):
        runs = sorted(rec.get("runs", []), key=lambda r: r["streams"])
        xs = [r["streams"] for r in runs]
        all_streams.update(xs)
        label = labels[i] if labels else f"{run_label(rec)} ({_workload_label(rec)}, {rec.get('window_s')} s)"
        ax.plot(xs, [r["counter_tokens_per_s"] for r in runs], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(all_streams) or [1])
    ax.set_xticklabels([str(x) for x in sorted(all_streams)] or ["1"])
    ax.set_xlabel("concurrent streams")
    ax.set_ylabel("aggregate decode tokens/s (vLLM counter)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("sparkctl bench: decode throughput")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
