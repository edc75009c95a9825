"""The rehearsal's one report: JSON (schema "sparkctl.rehearsal/1") and markdown, written side by side under
--out, to sit beside the write-up's tables. Every box has every section (docs/first-gx10.md's order); every
figure carries its value, what it was judged against, its verdict, the command or reading that measured it and
what a bad result means.

JSON: {"schema", "date", "command", "groups", "how" (the bench's workload, window, streams, prefill: how the
speed figures were measured), "boxes": [{"name", "role", "plan", "facts", "device", "link", "bench_record",
"cold_warm" (with --cold-warm: {"service", "unit", "cold_s", "warm_s", "error", "caches": {<variable>: {"dir",
"before_cold", "before_warm", "after_warm": {"files", "bytes"}}}, "commands"}, else null), "figures": [{"section",
"box", "name", "value", "against", "verdict", "how", "bad_means"}]}], "bad": ["<box>: <figure> (<value>)", ...]}.
"""

from __future__ import annotations

import json
from pathlib import Path

from sparkctl.rehearse.figures import BAD, NA, NOT_MEASURED, OK, SECTIONS, WARN

SCHEMA = "sparkctl.rehearsal/1"
VERDICTS = (OK, BAD, WARN, NOT_MEASURED, NA)


def assemble(boxes: list, meta: dict) -> dict:
    """The report of gathered BoxReports; meta: date, command, groups, how."""
    doc = {"schema": SCHEMA, **meta, "boxes": [b.to_dict() for b in boxes]}
    doc["bad"] = bad(doc)
    return doc


def bad(doc: dict) -> list[str]:
    """Every BAD figure, named: what the command's non-zero exit is about."""
    return [f"{f['box']}: {f['name']} ({f['value']})" for b in doc["boxes"] for f in b["figures"]
            if f["verdict"] == BAD]


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _counts(box: dict) -> dict[str, int]:
    return {v: sum(1 for f in box["figures"] if f["verdict"] == v) for v in VERDICTS}


def _summary(doc: dict) -> list[str]:
    lines = ["| box | role | " + " | ".join(VERDICTS) + " |", "|---|---|" + "---|" * len(VERDICTS)]
    for box in doc["boxes"]:
        counts = _counts(box)
        lines.append(f"| {box['name']} | {box['role']} | " + " | ".join(str(counts[v]) for v in VERDICTS) + " |")
    lines.append("")
    lines += [f"- BAD: {_cell(x)}" for x in doc["bad"]] or ["No figure is bad."]
    return lines


def _section(box: dict, key: str) -> list[str]:
    rows = [f for f in box["figures"] if f["section"] == key]
    lines = [f"### {box['name']}: {SECTIONS[key]}", ""]
    if not rows:
        return lines + ["Nothing measured for this section on this box (see the figures above).", ""]
    lines += ["| figure | value | against | verdict | measured by |", "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(_cell(f[k]) for k in ("name", "value", "against", "verdict", "how")) + " |"
              for f in rows]
    meanings = dict.fromkeys(f["bad_means"] for f in rows if f["bad_means"])
    return lines + [""] + [f"A bad result means: {m}" for m in meanings] + [""]


def markdown(doc: dict) -> str:
    how = doc.get("how") or {}
    lines = [f"# Rehearsal of {doc.get('date', '?')}", "",
             f"Command: `{doc.get('command', '?')}` (group data: {', '.join(doc.get('groups') or ['the default'])}).",
             f"Speed figures: {how.get('text', 'not measured (--skip-bench)')}.", "",
             "## Summary", "", *_summary(doc), ""]
    for box in doc["boxes"]:
        lines += [f"## {box['name']} ({box['role']})", ""]
        if box.get("bench_record"):
            lines += [f"Bench record: `{Path(box['bench_record']).name}` (beside this report).", ""]
        for key in SECTIONS:
            lines += _section(box, key)
    return "\n".join(lines).rstrip() + "\n"


def summary_table(doc: dict):
    """The terminal's summary: per box its role and how many figures have each verdict."""
    from rich.table import Table

    table = Table(title=f"rehearsal of {doc.get('date', '?')}")
    for col in ("box", "role", *VERDICTS):
        table.add_column(col)
    for box in doc["boxes"]:
        counts = _counts(box)
        table.add_row(box["name"], box["role"], *(str(counts[v]) for v in VERDICTS))
    return table


def write(doc: dict, out_dir: Path) -> tuple[Path, Path]:
    """rehearsal.md and rehearsal.json under out_dir (created)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    md, js = out_dir / "rehearsal.md", out_dir / "rehearsal.json"
    md.write_text(markdown(doc))
    js.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    return md, js
