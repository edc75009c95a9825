"""The bench record for people: the terminal tables of one run, the side-by-side comparison of two, the plot."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def _fmt(v, spec: str = ".1f", none: str = "-") -> str:
    return none if v is None else format(v, spec)


def run_label(rec: dict) -> str:
    m = rec.get("model") or {}
    rev = (rec.get("revision") or "")[:8]
    return f"{m.get('key', '?')}{'@' + rev if rev else ''} {str(rec.get('date', ''))[:10]}"


def _workload_label(rec: dict) -> str:
    w = rec.get("workload") or {}
    return f"{w.get('name', '?')}-v{w.get('version', '?')}"


def differences(a: dict, b: dict) -> list[str]:
    """What makes two records not directly comparable, in words for the table header."""
    out = []
    if _workload_label(a) != _workload_label(b) or (a.get("workload") or {}).get("sha256") != \
            (b.get("workload") or {}).get("sha256"):
        out.append(f"WORKLOADS DIFFER: {_workload_label(a)} vs {_workload_label(b)}")
    if a.get("window_s") != b.get("window_s"):
        out.append(f"WINDOWS DIFFER: {a.get('window_s')} s vs {b.get('window_s')} s")
    for key, name in (("max_tokens", "max_tokens"), ("ignore_eos", "ignore_eos"), ("temperature", "temperature")):
        if a.get(key) != b.get(key):
            out.append(f"{name} differs: {a.get(key)} vs {b.get(key)}")
    if (a.get("box") or {}).get("name") != (b.get("box") or {}).get("name"):
        out.append(f"boxes differ: {(a.get('box') or {}).get('name')} vs {(b.get('box') or {}).get('name')}")
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


def record_tables(rec: dict) -> list:
    """The terminal tables of one probe run: decode, and prefill when the run measured any (--no-prefill: none)."""
    from rich.table import Table

    t = Table(title=f"{run_label(rec)} on {(rec.get('box') or {}).get('name', '?')}  "
                    f"vLLM {rec.get('vllm_version') or '?'}  {_workload_label(rec)}  window {rec.get('window_s')} s",
              caption="tok/s from vllm:generation_tokens_total; (x%) of the planner's decode roofline")
    for col in ("streams", "tok/s (roofline)", "per stream", "client tok/s", "client vs counter",
                "acceptance", "tokens/step", "per-position", "reqs done"):
        t.add_column(col, justify="right")
    for run in rec.get("runs", []):
        sd = run.get("spec_decode") or {}
        per_pos = ", ".join(f"{v:.2f}" for v in (sd.get("per_position_acceptance") or {}).values())
        gap = run.get("client_vs_counter")
        t.add_row(str(run["streams"]), _decode_cell(run), _fmt(run.get("per_stream_tokens_per_s")),
                  _fmt(run.get("client_tokens_per_s")),
                  ("-" if gap is None else f"{100 * gap:+.1f}%") + ("" if run.get("agree") else " !"),
                  _fmt(sd.get("acceptance_rate"), ".0%"), _fmt(sd.get("tokens_per_step"), ".2f"),
                  per_pos or "-", str(run.get("requests_finished", "-")))
    if not rec.get("prefill"):
        return [t]
    p = Table(title="prefill (fresh prompt, max_tokens 1)")
    for col in ("target", "prompt tokens", "TTFT s", "tok/s", "server tok/s", "prefix-cache hits"):
        p.add_column(col, justify="right")
    for pf in rec.get("prefill", []):
        if pf.get("error"):
            p.add_row(str(pf["target_tokens"]), "-", "-", pf["error"], "-", "-")
            continue
        samples = pf.get("samples_tokens_per_s") or []
        rate = _fmt(pf.get("tokens_per_s"), ".0f") + (f" (median of {len(samples)})" if len(samples) > 1 else "")
        p.add_row(str(pf["target_tokens"]), _fmt(pf.get("prompt_tokens"), "d"), _fmt(pf.get("ttft_s"), ".3f"),
                  rate, _fmt(pf.get("server_tokens_per_s"), ".0f"),
                  _fmt(pf.get("prefix_cache_hits_delta"), ".0f"))
    return [t, p]


def compare_rows(a: dict, b: dict) -> list[tuple[str, str, str, str]]:
    """(row label, A, B, B/A) for the side-by-side table."""
    rows: list[tuple[str, str, str, str]] = []

    def ratio(x, y) -> str:
        return f"{y / x:.2f}x" if x and y else "-"

    rows.append(("model", (a.get("model") or {}).get("key", "?"), (b.get("model") or {}).get("key", "?"), ""))
    rows.append(("locked revision", (a.get("revision") or "?")[:12], (b.get("revision") or "?")[:12], ""))
    rows.append(("vLLM", str(a.get("vllm_version")), str(b.get("vllm_version")), ""))
    rows.append(("box", str((a.get("box") or {}).get("name")), str((b.get("box") or {}).get("name")), ""))
    rows.append(("date", str(a.get("date")), str(b.get("date")), ""))
    ra, rb = _runs_by_streams(a), _runs_by_streams(b)
    for n in sorted(set(ra) | set(rb)):
        x, y = ra.get(n), rb.get(n)
        rows.append((f"decode tok/s, {n} stream{'s' if n > 1 else ''}", _decode_cell(x), _decode_cell(y),
                     ratio(x and x["counter_tokens_per_s"], y and y["counter_tokens_per_s"])))
    for n in sorted(set(ra) | set(rb)):
        x, y = (ra.get(n) or {}).get("spec_decode") or {}, (rb.get(n) or {}).get("spec_decode") or {}
        if x or y:
            rows.append((f"acceptance / tokens per step, {n}",
                         f"{_fmt(x.get('acceptance_rate'), '.0%')} / {_fmt(x.get('tokens_per_step'), '.2f')}",
                         f"{_fmt(y.get('acceptance_rate'), '.0%')} / {_fmt(y.get('tokens_per_step'), '.2f')}", ""))
    pa, pb = _prefill_by_target(a), _prefill_by_target(b)
    for n in sorted(set(pa) | set(pb)):
        x, y = pa.get(n) or {}, pb.get(n) or {}
        rows.append((f"prefill tok/s, {f'{n // 1024}K' if n % 1024 == 0 else n} prompt",
                     x.get("error") or _fmt(x.get("tokens_per_s"), ".0f"),
                     y.get("error") or _fmt(y.get("tokens_per_s"), ".0f"),
                     ratio(x.get("tokens_per_s"), y.get("tokens_per_s"))))
    return rows


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
