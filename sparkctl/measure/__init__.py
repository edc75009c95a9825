"""Measuring a served model. The bench probe: maths.py (token timelines, counter/client agreement, roofline, window
and prefill results), client.py (endpoint, httpx client, SSE streams, /tokenize, prompt sizing), probe.py (scrapes,
decode windows, prefill, the whole run), record.py (the record's pydantic model, its checks, files), report.py
(tables, compare, plot), labels.py (model, revision, box, roofline). Beside it: prometheus.py (vLLM /metrics
parsing and deltas), workloads/, niah.py, evals.py (paired comparison), and cli.py.

May import: sparkctl.config, sparkctl.capacity, sparkctl.errors, sparkctl.box.contract (the box boundary),
sparkctl.check.load (how every command reads the settings). Talks to a box only over HTTPS (the proxy) and ssh
(/metrics on loopback).
"""
