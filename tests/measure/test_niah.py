"""Needle-in-a-haystack: needles, placement, deterministic scoring, the grid, and a run against a fake server."""

from __future__ import annotations

import asyncio
import json
import re

import httpx
import pytest

from sparkctl.config import catalog, groupdata
from sparkctl.measure import client, niah
from sparkctl.measure.workloads import haystack


def test_needle_is_reproducible_and_differs_across_cells():
    n = niah.make_needle(32768, 50.0)
    assert n == niah.make_needle(32768, 50.0)
    assert re.fullmatch(r"[1-9]\d{6}", n.value)
    assert n.value in n.sentence and n.key in n.question
    values = {niah.make_needle(length, depth).value for length in niah.DEFAULT_LENGTHS for depth in niah.DEFAULT_DEPTHS}
    assert len(values) == 12


def test_default_grid_fits_every_configured_coding_model():
    """No cell of the default grid is skipped on a coding model the deploy can serve: the longest length plus the
    answer budget fits each catalog coder's max_model_len (else `niah` would silently score a smaller grid)."""
    data = groupdata.load(["all", "gx10"])
    budget = data["NIAH_MAX_TOKENS"]
    coders = [s for s in catalog.resolve(data.get("CATALOG_OVERRIDES")).values() if s.role == catalog.CODER]
    assert coders
    for spec in coders:
        assert max(niah.DEFAULT_LENGTHS) + budget <= spec.max_model_len, spec.key
    assert all(0 <= d <= 100 for d in niah.DEFAULT_DEPTHS)


@pytest.mark.parametrize("depth, expected_index", [(0, 0), (50, 5), (90, 9), (100, 10)])
def test_insert_needle_at_sentence_boundary(depth, expected_index):
    sentences = [f"S{chr(65 + i)}. " for i in range(10)]
    text = niah.insert_needle(sentences, "NEEDLE. ", depth)
    parts = re.findall(r"S[A-Z]\. |NEEDLE\. ", text)
    assert parts.index("NEEDLE. ") == expected_index and len(parts) == 11


def test_insert_needle_rejects_bad_depth():
    with pytest.raises(ValueError):
        niah.insert_needle(["a. "], "n. ", 120)


def test_prompt_holds_exactly_one_number():
    needle = niah.make_needle(4000, 50.0)
    prompt = niah.build_prompt(12000, needle, 50.0)
    assert re.findall(r"\d+", prompt) == [needle.value]
    assert prompt.endswith(needle.question)
    body = prompt[len(niah.INTRO):]
    assert 0.4 < body.index(needle.sentence) / len(body) < 0.6
    assert not any(c.isdigit() for c in haystack.text(50000, seed=9))


@pytest.mark.parametrize("answer, passed", [
    ("4829173", True),
    ("The special magic number is 4829173.", True),
    ("4,829,173", True),
    ("4 829 173", True),
    ("4_829_173", True),
    ("4829174", False),
    ("482917", False),
    ("", False),
    (None, False),
])
def test_score_answer(answer, passed):
    assert niah.score_answer(answer, "4829173") is passed


def _cells(results):
    return [{"length": n, "depth": d, "passed": p, "skipped": s} for n, d, p, s in results]


def test_scores_out_of_10():
    cells = _cells([(1000, 10, True, False), (1000, 50, True, False), (1000, 90, True, False),
                    (2000, 10, True, False), (2000, 50, False, False), (2000, 90, True, False),
                    (9000, 10, False, True), (9000, 50, False, True), (9000, 90, False, True)])
    s = niah.scores(cells)
    assert s["by_length"] == {"1000": 10.0, "2000": 6.67}
    assert s["by_depth"] == {"10": 10.0, "50": 5.0, "90": 10.0}
    assert s["overall"] == 8.33 and (s["passed"], s["scored"], s["skipped"]) == (5, 6, 3)
    assert niah.scores(_cells([(1, 1, False, True)]))["overall"] is None


class Oracle:
    """A fake vLLM that finds the needle only in the first 30 % of the prompt (and /tokenize ~ 4 chars)."""

    def __init__(self):
        self.requests = []

    async def handler(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.endswith("/v1/models"):
            return httpx.Response(200, json={"data": [{"id": "coder", "max_model_len": 4096}]})
        if path.endswith("/version"):
            return httpx.Response(200, json={"version": "0.32.0"})
        body = json.loads(request.content)
        text = "".join(m["content"] for m in body["messages"])
        if path.endswith("/tokenize"):
            return httpx.Response(200, json={"count": len(text) // 4 + 5})
        self.requests.append(body)
        m = re.search(r"\d{7}", text)
        answer = m.group(0) if m and m.start() < 0.3 * len(text) else "I could not find it."
        return httpx.Response(200, json={"choices": [{"message": {"content": answer}, "finish_reason": "stop"}],
                                         "usage": {"prompt_tokens": len(text) // 4 + 5, "completion_tokens": 3}})


def test_run_niah_against_fake_server(monkeypatch):
    oracle = Oracle()
    monkeypatch.setattr(niah, "make_client", lambda ep, timeout_s, max_connections=64: httpx.AsyncClient(
        transport=httpx.MockTransport(oracle.handler)))
    ep = client.Endpoint("http://fake/coder/v1", "coder")
    labels = {"model": {"key": "qwen3.8-27b"}, "revision": "b" * 40, "box": {"name": "spark-1"}}
    rec = asyncio.run(niah.run_niah(ep, labels, lengths=[1000, 2000, 4000], depths=[10, 50, 90], max_tokens=128,
                                    timeout_s=60))
    assert rec["schema"] == niah.SCHEMA == "sparkctl.niah/1"
    assert rec["vllm_version"] == "0.32.0" and rec["revision"] == "b" * 40
    cells = rec["cells"]
    assert len(cells) == 9
    fitted = [c for c in cells if not c["skipped"]]
    assert all(c["length"] - 32 <= c["prompt_tokens"] <= c["length"] for c in fitted)
    # 4000 + 128 > 4096: skipped, not scored
    assert [c["skipped"] for c in cells if c["length"] == 4000] == [True, True, True]
    assert [c["passed"] for c in fitted] == [True, False, False, True, False, False]
    assert rec["scores"]["overall"] == 3.33 and rec["scores"]["by_depth"]["10"] == 10.0
    assert all(r["temperature"] == 0 and r["max_tokens"] == 128 for r in oracle.requests)
    from rich.console import Console
    console = Console(width=120, record=True)
    console.print(niah.grid_table(rec))
    text = console.export_text()
    assert "3.33/10 overall" in text and "skip" in text and "pass" in text
