"""An agent-like workload for the routers' prefix-cache affinity: sessions re-sending a growing shared prefix, and
vLLM's prefix-cache hit rate over the boxes that served them (the simulated fleet's scenarios)."""

from __future__ import annotations

import random
from collections.abc import Callable

from tests.e2e.conftest import sim_exec

WORDS = ("the of and to in is that for it as with was on be by at this from or an are not have but which one all "
         "their were can there been if more when will would who so no out up into do than time about them some could "
         "other then its two these may like first any new our over such after most also made many before must "
         "through back years where much your way well down should because each just those people how too little "
         "state good very make world still own see men work long get here between both life being under never day "
         "same another know while last might us great old year off come since against go came right used take three"
         ).split()  # common English words: about one token each, so a session's length in tokens is known
TURNS = 4


def agent_sessions(seed: int, sessions: int = 4, turns: int = TURNS, first: int = 600, step: int = 150) -> list:
    """Sessions re-sending a growing shared prefix (an agent's conversation): `first` words of context, `step` more
    a turn (600 to 1,050 words: about 1,800 to 3,200 tokens of the stand-in coder's 4,096, measured with its
    /tokenize), each session its own words (the seed makes two runs the same shape with different text)."""
    rng = random.Random(seed)
    out = []
    for _ in range(sessions):
        mine = [rng.choice(WORDS) for _ in range(first + (turns - 1) * step)]
        out.append([" ".join(mine[:first + t * step]) for t in range(turns)])
    return out


def prefix_hits(spark, boxes) -> tuple[float, float]:
    """vLLM's prefix-cache hits and queries (tokens), summed over the coders of these boxes (loopback)."""
    hits = queries = 0.0
    for box in boxes:
        text = sim_exec(box, f"curl -s http://127.0.0.1:{spark.data['CODER_PORT']}/metrics")
        for line in text.splitlines():
            if line.startswith("vllm:prefix_cache_hits_total"):
                hits += float(line.split()[-1])
            elif line.startswith("vllm:prefix_cache_queries_total"):
                queries += float(line.split()[-1])
    return hits, queries


def hit_rate(spark, boxes, base_url: Callable[[int, int], str], seed: int) -> float:
    """The workload's prefix-cache hit rate over boxes, each request sent to base_url(turn, session index)."""
    h0, q0 = prefix_hits(spark, boxes)
    with spark.client() as c:
        for turn in range(TURNS):
            for i, session in enumerate(agent_sessions(seed)):
                r = c.post(base_url(turn, i) + "/chat/completions", timeout=60,
                           headers={"Authorization": f"Bearer {spark.token}"},
                           json={"model": "coder", "max_tokens": 2,
                                 "messages": [{"role": "user", "content": session[turn]}]})
                assert r.status_code == 200, r.text
    h1, q1 = prefix_hits(spark, boxes)
    return (h1 - h0) / max(1.0, q1 - q0)
