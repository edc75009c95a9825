"""What `bench judge` costs against a history of N lines, and its ratio to a 10-line history: a benchmark, not a test
(figures depend on the machine; docs/measured.md cites them). The history is what a box benchmarked daily for years
leaves: N accepted quick-run records of qwen3.8-27b (the test suite's record, tests/measure/test_reference.py), a
new vLLM build every 50 runs (the first of each its configuration's baseline), every one with its own date; the
judged record is the next run of the newest configuration. Each size is timed twice in one process, through
`python -m sparkctl bench judge RECORD --history FILE --groups all,gx10 --json` (sparkctl.__main__.main): cold (no
index yet: it is built, reading every line), warm (the index is current: only the lines the verdict needs are
read), the median of REPEATS warm calls, and after one append (a deploy's case: one line appended since the last
judgement, so the history's indexed bytes are hashed and the new line alone read and merged), the median of REPEATS
rounds of one append and one judgement. Beside them, once per size, the deploy's own verdict on the control
machine (quick.acceptance_of once it has read the box's history over ssh: every line parsed, judge_record over all of
them), without the ssh read and the run.

    .venv/bin/python scripts/judge_cost.py            # 10 and 10000 lines
    .venv/bin/python scripts/judge_cost.py 10 1000 10000
"""

from __future__ import annotations

import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
REPEATS = 5  # warm calls per size: the median is printed
PER_BUILD = 50  # runs per vLLM build in the generated history


def line_at(i: int) -> dict:
    """The history's line i (from 0) as the box writes it."""
    from sparkctl.measure import history
    from tests.measure.test_reference import rec

    build = i // PER_BUILD
    r = rec(decode=(18.3 * (1 - (i % 7) / 100), 73.0), vllm=f"0.{32 + build // 10}.{build % 10}",
            build=f"0.{32 + build // 10}.{build % 10}-{build:012x}")
    r["date"] = f"20{20 + i // 8760 % 6}-{1 + i // 720 % 12:02d}-{1 + i // 24 % 28:02d}T{i % 24:02d}:00:00Z"
    return history.make_line(r, baseline=i % PER_BUILD == 0, source="acceptance",
                             reference={"kind": "baseline", "name": "b", "id": None})


def history_text(n: int) -> tuple[str, dict]:
    """(n history lines as the box writes them, the record judged next)."""
    from sparkctl.measure import history
    from tests.measure.test_reference import rec

    lines = [line_at(i) for i in range(n)]
    last = lines[-1] if lines else None
    nxt = rec(decode=(18.1, 72.5), vllm=last["vllm_version"], build=last["vllm_build"]) if last else rec()
    return "".join(history.serialize(x) for x in lines), nxt


def judge_once(record_path: str, history_path: str) -> tuple[float, int]:
    from sparkctl.__main__ import main

    sink = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        code = main(["bench", "judge", record_path, "--history", history_path, "--groups", "all,gx10", "--json"])
    return time.perf_counter() - t0, code


def deploy_once(data: bytes, nxt: dict) -> float:
    """The deploy's verdict on the control machine, the history's bytes already read over ssh (quick.acceptance_of:
    history.parse of every line, then quick.judge_record over all of them), without the ssh read and the run."""
    from sparkctl.check.load import host_config
    from sparkctl.config import groupdata
    from sparkctl.measure import history, quick

    config = host_config(groupdata.load(["all", "gx10"]))
    t0 = time.perf_counter()
    verdict = quick.judge_record(nxt, config, history.parse(data, "history"))
    elapsed = time.perf_counter() - t0
    assert verdict.passed, f"the deploy's verdict did not pass: {verdict.to_dict()}"
    return elapsed


def measure(n: int, folder: Path) -> dict:
    from sparkctl.measure import history, record

    text, nxt = history_text(n)
    hist = folder / f"history-{n}.jsonl"
    hist.write_text(text)
    path = str(record.write_record(nxt, folder / f"candidate-{n}.json"))
    cold, code = judge_once(path, str(hist))
    warm = [judge_once(path, str(hist)) for _ in range(REPEATS)]
    size = hist.stat().st_size
    appended = []
    for k in range(REPEATS):  # a deploy's case: one line appended since the last judgement, then a judgement
        with hist.open("a") as f:
            f.write(history.serialize(line_at(n + k)))
        appended.append(judge_once(path, str(hist)))
    deploy = deploy_once(hist.read_bytes()[:size], nxt)
    codes = {code, *(c for _, c in warm + appended)}
    assert codes == {0}, f"the judge did not pass at {n} lines (exits {sorted(codes)})"
    return {"lines": n, "bytes": size, "cold_s": cold, "warm_s": statistics.median(t for t, _ in warm),
            "append_s": statistics.median(t for t, _ in appended), "deploy_s": deploy}


def run(sizes: list[int]) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["XDG_CACHE_HOME"] = str(Path(tmp) / "cache")  # the index lives in the cache: a fresh one
        judge_once(*_warmup(Path(tmp)))  # imports and the catalog, paid once by any process
        return [measure(n, Path(tmp)) for n in sizes]


def _warmup(folder: Path) -> tuple[str, str]:
    from sparkctl.measure import record
    from tests.measure.test_reference import rec

    (folder / "empty.jsonl").write_text("")
    return str(record.write_record(rec(), folder / "warmup.json")), str(folder / "empty.jsonl")


def main(argv: list[str]) -> int:
    sizes = [int(x) for x in argv] or [10, 10_000]
    rows = run(sizes)
    small = rows[0]
    print(f"{'lines':>7} {'MB':>6} {'cold s':>8} {'warm s':>8} {'append s':>9} {'deploy s':>9} "
          f"{'warm / ' + str(small['lines']) + ' lines':>16} {'append / ' + str(small['lines']) + ' lines':>18}")
    for r in rows:
        print(f"{r['lines']:>7} {r['bytes'] / 1e6:>6.1f} {r['cold_s']:>8.3f} {r['warm_s']:>8.3f} {r['append_s']:>9.3f} "
              f"{r['deploy_s']:>9.3f} {r['warm_s'] / small['warm_s']:>15.2f}x "
              f"{r['append_s'] / small['append_s']:>17.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
