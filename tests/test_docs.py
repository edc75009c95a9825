"""The README stays short and the documentation holds together: every relative link in README.md and docs/*.md
points to a file that exists, every #anchor to a heading that is there, and a code comment that sends the reader to
a section (`README "X"`, `docs/operating.md "X"`) names one that is in that file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sparkctl import REPO_ROOT

README = REPO_ROOT / "README.md"
DOCS = sorted((REPO_ROOT / "docs").glob("*.md"))
README_MAX_LINES = 220  # a newcomer reads it in ten minutes; the manual lives in docs/
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def prose(path: Path) -> str:
    """The file without its fenced code blocks (a `[x](y)` or `# x` inside one is not markdown)."""
    return FENCE.sub("", path.read_text())


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation (backticks, quotes, `…`) dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(path: Path) -> list[str]:
    return [m.strip() for m in re.findall(r"^#+ (.*)$", prose(path), re.M)]


def anchors(path: Path) -> set[str]:
    """Every heading's anchor, a repeated one numbered as GitHub numbers it (x, x-1, x-2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for h in headings(path):
        s = slug(h)
        out.add(s if s not in seen else f"{s}-{seen[s]}")
        seen[s] = seen.get(s, 0) + 1
    return out


def test_the_slug_is_githubs():
    assert slug("What happens when…") == "what-happens-when"
    assert slug("…vLLM's engine hangs while `/health` still says 200") == \
        "vllms-engine-hangs-while-health-still-says-200"
    assert slug("Acceptance: a flip is kept only if") == "acceptance-a-flip-is-kept-only-if"


def test_the_readme_is_short():
    assert len(README.read_text().splitlines()) <= README_MAX_LINES


def test_the_readme_maps_every_docs_file():
    text = README.read_text()
    assert DOCS, "docs/ holds the manual"
    assert [d.name for d in DOCS if f"(docs/{d.name})" not in text] == []


@pytest.mark.parametrize("doc", [README, *DOCS], ids=lambda p: p.relative_to(REPO_ROOT).as_posix())
def test_every_relative_link_and_anchor_resolves(doc):
    links = [t for t in LINK.findall(prose(doc)) if not re.match(r"[a-z]+:", t)]
    broken = []
    for target in links:
        file_part, _, anchor = target.partition("#")
        path = (doc.parent / file_part).resolve() if file_part else doc
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and (path.suffix != ".md" or anchor not in anchors(path)):
            broken.append(f"{target}: no heading with anchor #{anchor} in {path.name}")
    assert broken == []


def sections() -> dict[str, list[str]]:
    """Where each documentation file's headings are: {"README": [...], "docs/operating.md": [...], ...}."""
    out = {"README": headings(README)}
    out.update({f"docs/{d.name}": headings(d) for d in DOCS})
    return out


def test_every_section_a_comment_names_exists():
    """A unit file, docstring or comment that sends the reader to a section names one that is in that file."""
    where = sections()
    sources = [*REPO_ROOT.glob("sparkctl/**/*.py"), *REPO_ROOT.glob("tasks/*.py"), *REPO_ROOT.glob("templates/*.j2"),
               *REPO_ROOT.glob("group_data/*.py"), REPO_ROOT / "deploy.py"]
    cited = {(p.relative_to(REPO_ROOT).as_posix(), doc, name) for p in sources
             for doc, name in re.findall(r'(README|docs/[\w-]+\.md) \\?"([^"\\]+)\\?"', p.read_text())}
    assert cited, "the pattern finds the references"
    missing = []
    for path, doc, name in sorted(cited):
        if not any(h == name or h.startswith((name + ":", name + " (")) for h in where.get(doc, [])):
            now = [d for d, hs in where.items() if name in hs]
            missing.append(f"{path} cites {doc} \"{name}\"" + (f": it is in {now[0]} now" if now else ""))
    assert missing == []


# --- docs/first-gx10.md: the first hour on a real GX10 says what the code and the plan say ---------------------------


def test_the_first_hour_follows_the_rehearsals_sections_in_order():
    from sparkctl.rehearse.figures import SECTIONS

    found = headings(REPO_ROOT / "docs" / "first-gx10.md")
    at = [next((i for i, h in enumerate(found) if h.startswith(s)), None) for s in SECTIONS.values()]
    assert None not in at and at == sorted(at), dict(zip(SECTIONS.values(), at))
    assert "Rehearsal on the simulated Spark" in found


def test_the_first_hours_figures_are_the_plans_and_the_write_ups():
    """Every production figure the page quotes is what the planner and the catalog hold for a real GX10."""
    from sparkctl.capacity import planner
    from sparkctl.check.load import load
    from sparkctl.measure import reference
    from sparkctl.measure.thresholds import Thresholds

    text = (REPO_ROOT / "docs" / "first-gx10.md").read_text()
    config = load(["all", "gx10"])
    cfg, t = config.cfg, Thresholds.from_settings(config.cfg)
    qwen, laguna = (planner.plan_box(cfg, config.catalog, coding_model=k).model(k)
                    for k in ("qwen3.8-27b", "laguna-s-2.1"))
    box = qwen.box
    want = [f"{qwen.resident_gib:.1f} GiB (measured", f"| {qwen.kv_gib:.1f} GiB | {qwen.footprint_gib:.1f} GiB |",
            f"{laguna.resident_gib:.1f} GiB (estimate) | {laguna.kv_gib:.1f} GiB | {laguna.footprint_gib:.1f} GiB",
            f"{qwen.kv_tokens_measured:,} tokens", f"estimates {laguna.kv_tokens_estimate:,}",
            f"roofline for Qwen at\nMTP depth 3 is {qwen.roofline_tokens_per_s:.1f} tok/s",
            f"{box.usable_gib - box.os_reserve_gib - box.embedders_gib - qwen.footprint_gib:.1f} GiB beyond the OS reserve",
            f"with Laguna {box.usable_gib - box.os_reserve_gib - box.embedders_gib - laguna.footprint_gib:.1f}"]
    for e in box.embedders:
        want.append(f"{e.resident_gib:.1f} GiB (calibrated) | {e.kv_gib:.1f} GiB | {e.total_gib:.1f} GiB")
    pub = reference.published_of(config.catalog["qwen3.8-27b"])
    for n, rate in pub.decode.items():
        pct = 100 * rate / (n * qwen.roofline_tokens_per_s)
        want.append(f"| {n} | {rate:g}{' tok/s' if n == 1 else ''} | {pct:.0f} % | "
                    f"{rate * (1 - t.published_decode_max_regression):.1f} |")
    want.append(f"{pub.prefill[12288]:,.0f} tok/s | | {pub.prefill[12288] * (1 - t.published_prefill_max_regression):,.0f}")
    want.append(f"--port {cfg.REHEARSE_LINK_PORT} --bytes")
    lpub = reference.published_of(config.catalog["laguna-s-2.1"])
    want.append(f"{lpub.decode[1]:g} tok/s ({100 * lpub.decode[1] / laguna.roofline_tokens_per_s:.0f} % of its "
                f"{laguna.roofline_tokens_per_s:.1f})")
    want.append(f"{lpub.decode[8]:g} ({100 * lpub.decode[8] / (8 * laguna.roofline_tokens_per_s):.1f} %)")
    qwen_spec = config.catalog["qwen3.8-27b"].memory
    want.append(f"`ACCEPTANCE_SPEC_MIN_TOKENS_PER_STEP` ({t.spec_min_tokens_per_step:g}) and "
                f"{t.spec_floor_fraction:g} x the\n  catalog's tokens per step "
                f"({t.spec_floor_fraction * qwen_spec.tokens_per_step:g} for Qwen)")
    from sparkctl.capacity import admission

    starts = {(s.service, s.start): s for s in admission.walk(cfg, *admission.configured_engines(cfg, config.catalog))}
    first, flip = starts["coder", "first install, 1 of 3"], starts["coder", "flip to laguna-s-2.1"]
    want.append(f"first start sees {first.free_gib:.1f} GiB free against {first.required_gib:.1f} requested, a flip "
                f"to Laguna {flip.free_gib:.1f} against {flip.required_gib:.1f}")
    flat = " ".join(text.split())
    missing = [w for w in want if " ".join(w.split()) not in flat]
    assert missing == []


README_MAX_CELL = 300  # characters: a table cell holds a short paragraph at most; more is prose below the table


def table_cells(text: str) -> list[tuple[int, str]]:
    """(line number, cell) of every cell of every Markdown table row in text (a `|` inside backticks included as
    text: cells split on ` | `)."""
    return [(n, cell.strip()) for n, line in enumerate(text.splitlines(), 1) if line.startswith("|")
            for cell in line.strip().strip("|").split(" | ")]


def test_no_readme_table_cell_is_longer_than_a_short_paragraph():
    long = [f"README.md:{n}: {len(cell)} characters: {cell[:60]}..." for n, cell in table_cells(README.read_text())
            if len(cell) > README_MAX_CELL]
    assert long == []


def test_a_long_cell_is_found():
    row = "| a | " + "x" * (README_MAX_CELL + 1) + " |\n|---|---|\n"
    assert [len(c) for _, c in table_cells(row)] == [1, README_MAX_CELL + 1, 7]  # `---|---` splits on no " | "
