"""`python -m sparkctl bench`, `bench compare A.json B.json` and `niah`: the probe and acceptance checks' CLI.

The box is reached through its TLS proxy (https://<address>:PROXY_PORT/<CODER_SERVED_NAME>/v1) with the bearer
token, trusting only the deploy's CA (--ca, default <SECRETS_DIR>/pki/ca.pem); /metrics is read on the box over
ssh (`curl http://127.0.0.1:CODER_PORT/metrics`), since the proxy does not publish it.

bench JSON record (schema "sparkctl.measure.bench/1"):
  date (UTC ISO 8601), workload {name, version, prompts, sha256}, window_s, streams [..], max_tokens,
  temperature, ignore_eos, model {key, title, served_name, repo, revision, sha, draft, speculative, ...},
  revision (the locked commit sha of the checkpoint), vllm_version, box {name, address, simulated,
  usable_memory_gib, memory_bandwidth_gbps}, endpoint, max_model_len, served_model_root (vLLM's model path),
  served_sha (the commit in that path; checked against revision), roofline_single_stream_tokens_per_s,
  runs [{streams, window_s (measured), counter_tokens, client_tokens, counter_tokens_per_s,
         client_tokens_per_s, per_stream_tokens_per_s, client_tokens_bracket [lo, hi], client_vs_counter
         (midpoint), counter_outside_bracket, agree, client_count_method,
         roofline_tokens_per_s, roofline_pct, spec_decode {drafts, draft_tokens, accepted_tokens,
         acceptance_rate, tokens_per_step, mean_draft_length, per_position_acceptance {"0": ..}} | null,
         requests_started, requests_finished, requests_errored, ttft_s_mean, scrape_s}],
  prefill [{target_tokens, prompt_tokens, ttft_s, tokens_per_s, server_prefill_s, server_tokens_per_s,
            prompt_tokens_delta, prefix_cache_queries_delta, prefix_cache_hits_delta,
            prompt_tokens_cached_delta, fresh, token_count_source, error}],
  problems [why the figures cannot be trusted; empty when they can]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from sparkctl import REPO_ROOT
from sparkctl.config import groupdata, hosts
from sparkctl.config.secrets import read_api_token, secrets_dir
from sparkctl.errors import SettingError, SparkctlError
from sparkctl.measure import bench, evals, niah

# ---------------------------------------------------------------------------------------------------- parsing

def int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: expected positive integers, e.g. 1,2,4,8")
    return values


def token_count(text: str) -> int:
    """12288, 12K (x1024) or 55k."""
    t = text.strip().lower()
    try:
        n = int(float(t[:-1]) * 1024) if t.endswith("k") else int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a token count (e.g. 12288 or 12K)") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive token count")
    return n


def token_list(text: str) -> list[int]:
    return [token_count(x) for x in text.split(",") if x.strip()]


def float_list(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers") from None


def _target_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("target")
    g.add_argument("--host", default=None, help="inventory host name (default: the first configured)")
    g.add_argument("--groups", default=None,
                   help="comma-separated group data to merge (default: all,gx10 for a real box, all,gx10,sim else)")
    g.add_argument("--ca", default=None, help="CA bundle (PEM) the proxy's certificate chains to "
                                              "(default: <SECRETS_DIR>/pki/ca.pem)")
    g.add_argument("--base-url", default=None,
                   help="talk to this OpenAI base URL instead of the proxy (development, e.g. a local vLLM)")
    g.add_argument("--metrics-url", default=None,
                   help="read /metrics with a local curl of this URL instead of ssh to the box (development)")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("bench", help="decode/prefill probe through the proxy; `bench compare A B`",
                              description=bench.__doc__.split("\n\n")[0])
    _target_args(p)
    p.add_argument("--streams", type=int_list, default=None, help="concurrent streams to sweep (BENCH_STREAMS)")
    p.add_argument("--window", type=float, default=None, help="decode window, s (BENCH_WINDOW_S)")
    p.add_argument("--max-tokens", type=int, default=None, help="max_tokens per request (BENCH_MAX_TOKENS)")
    p.add_argument("--prefill", type=token_count, action="append", default=None, metavar="TOKENS",
                   help="fresh-prefill prompt length; repeat for more (default BENCH_PREFILL_TOKENS; "
                        "e.g. --prefill 12288 --prefill 55296 --prefill 204800)")
    p.add_argument("--no-prefill", action="store_true", help="skip the prefill measurement")
    p.add_argument("--workload", default=None, help="workload name-version (default codegen-v1)")
    p.add_argument("--ignore-eos", action=argparse.BooleanOptionalAction, default=None,
                   help="run every request to max_tokens (default BENCH_IGNORE_EOS, else off; on for tiny "
                        "random-weight models)")
    p.add_argument("--out", default=None, help="JSON record path (default results/bench-<model>-<time>.json)")
    p.add_argument("--plot", default=None, help="PNG path (default: the JSON path with .png)")
    p.add_argument("--no-plot", action="store_true", help="write no PNG")
    p.set_defaults(func=run_bench)
    modes = p.add_subparsers(dest="bench_mode", metavar="{compare}")
    c = modes.add_parser("compare", help="side-by-side table of two bench records",
                         description="The side-by-side table of two bench JSON records; the header says when their "
                                     "workloads or windows differ.")
    c.add_argument("a", help="bench JSON A")
    c.add_argument("b", help="bench JSON B")
    c.add_argument("--names", default=None, help="column names A,B (default: model keys)")
    c.add_argument("--plot", default=None, help="also write a PNG with both runs")
    c.set_defaults(func=run_compare)

    n = subparsers.add_parser("niah", help="needle-in-a-haystack grid through the proxy",
                              description=niah.__doc__.split("\n\n")[0])
    _target_args(n)
    n.add_argument("--lengths", type=token_list, default=None,
                   help="context lengths in tokens (default 32K,95K,157K,220K; K = 1024)")
    n.add_argument("--depths", type=float_list, default=None, help="needle depths, %% (default 10,50,90)")
    n.add_argument("--trials", type=int, default=1, help="needles per cell (default 1)")
    n.add_argument("--max-tokens", type=int, default=niah.DEFAULT_MAX_TOKENS, help="answer budget per request")
    n.add_argument("--seed", type=int, default=0, help="haystack/needle seed")
    n.add_argument("--out", default=None, help="JSON path (default results/niah-<model>-<time>.json)")
    n.set_defaults(func=run_niah)

    _add_evals_parser(subparsers)


# ---------------------------------------------------------------------------------------------------- context

@dataclass
class Target:
    data: dict
    host: hosts.HostConn | None
    endpoint: bench.Endpoint
    metrics: bench.MetricsSource
    labels: dict


def _url_host(address: str) -> str:
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def resolve_target(args) -> Target:
    groups = [g.strip() for g in args.groups.split(",") if g.strip()] if args.groups else None
    data = groupdata.load(groups)
    dev = bool(args.base_url and args.metrics_url)
    host = None
    try:
        host = hosts.find(args.host)
    except SparkctlError:
        if not dev:
            raise
    if host is not None:
        data = {**data, **host.data}
    served = data["CODER_SERVED_NAME"]
    token, ca = "", None
    try:
        token = read_api_token(data)
    except SettingError:
        if not args.base_url:
            raise
    if args.base_url:
        base = args.base_url
        ca = args.ca
    else:
        base = f"https://{_url_host(host.address)}:{data['PROXY_PORT']}/{served}/v1"
        ca = args.ca or str(secrets_dir(data) / "pki" / "ca.pem")
        if not Path(ca).is_file():
            raise SettingError("--ca", ca, "a CA bundle (PEM) that signed the proxy's certificate",
                               "The deploy generates <SECRETS_DIR>/pki/ca.pem; with your own TLS_CERT_FILE pass its CA")
    if args.metrics_url:
        source = bench.MetricsSource.local(args.metrics_url)
    else:
        source = bench.MetricsSource.ssh(host, int(data["CODER_PORT"]))
    if host is not None and not (args.base_url and args.host is None):
        box = bench.box_labels(host, data)
    else:  # development run against some other server: never label it as the inventory's box
        box = {"box": {"name": "dev", "address": base, "simulated": None}}
    labels = {**bench.model_labels(data), **box}
    return Target(data=data, host=host, endpoint=bench.Endpoint(base, served, token, ca), metrics=source,
                  labels=labels)


def _console():
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=150)


def _stamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")


def _default_out(kind: str, labels: dict) -> Path:
    key = (labels.get("model") or {}).get("key") or "model"
    return REPO_ROOT / "results" / f"{kind}-{key}-{_stamp()}.json"


# ---------------------------------------------------------------------------------------------------- commands

class RichReporter(bench.Reporter):
    def __init__(self, progress):
        self.progress = progress
        self.task = progress.add_task("starting", total=1.0, info="")

    def phase(self, text: str) -> None:
        self.progress.update(self.task, description=text, completed=0, total=1.0, info="")

    def window(self, streams: int, elapsed: float, window: float, client_tokens: int) -> None:
        rate = client_tokens / elapsed if elapsed > 0 else 0.0
        self.progress.update(self.task, description=f"{streams} stream(s): decode window", completed=elapsed,
                             total=window, info=f"{client_tokens} tokens, {rate:.1f} tok/s (client)")

    def done(self, text: str) -> None:
        self.progress.console.log(text)


def run_bench(args) -> int:
    from rich.progress import (
        BarColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    from sparkctl.measure import workloads

    t = resolve_target(args)
    d = t.data
    prefill = [] if args.no_prefill else (args.prefill or [int(d["BENCH_PREFILL_TOKENS"])])
    ignore_eos = args.ignore_eos if args.ignore_eos is not None else bool(d["BENCH_IGNORE_EOS"])
    settings = bench.ProbeSettings(
        workload=workloads.load(args.workload or workloads.DEFAULT_WORKLOAD),
        streams=args.streams or list(d["BENCH_STREAMS"]),
        window_s=args.window if args.window is not None else float(d["BENCH_WINDOW_S"]),
        max_tokens=args.max_tokens or int(d["BENCH_MAX_TOKENS"]),
        prefill_tokens=prefill,
        ignore_eos=ignore_eos,
        timeout_s=float(d["BENCH_CLIENT_TIMEOUT_S"]),
    )
    roofline, why = bench.roofline_single_stream(d)
    console = _console()
    if roofline is None:
        console.log(f"roofline omitted: {why}")
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                  TimeElapsedColumn(), console=console) as progress:
        record = asyncio.run(bench.run_probe(t.endpoint, t.metrics, settings, t.labels, RichReporter(progress),
                                             roofline_single=roofline))
    out = bench.write_record(record, args.out or _default_out("bench", t.labels))
    for table in bench.record_table(record):
        console.print(table)
    console.print(f"record: {out}")
    if not args.no_plot:
        png = bench.plot_records([record], args.plot or out.with_suffix(".png"))
        console.print(f"plot: {png}")
    for problem in record["problems"]:
        console.print(f"[bold red]problem:[/] {problem}")
    return 1 if record["problems"] else 0


def run_compare(args) -> int:
    a, b = bench.load_record(args.a), bench.load_record(args.b)
    if args.names:
        names = [n.strip() for n in args.names.split(",")]
        if len(names) != 2 or not all(names):
            raise SettingError("--names", args.names, "two names, A,B")
    else:
        names = [(a.get("model") or {}).get("key") or "A", (b.get("model") or {}).get("key") or "B"]
        if names[0] == names[1]:
            names = [f"A {names[0]}", f"B {names[1]}"]
    console = _console()
    console.print(bench.compare_table(a, b, *names))
    if args.plot:
        console.print(f"plot: {bench.plot_records([a, b], args.plot)}")
    return 0


def run_niah(args) -> int:
    t = resolve_target(args)
    console = _console()

    def on_cell(c: dict) -> None:
        if c["skipped"]:
            verdict = "skipped"
        else:
            verdict = "pass" if c["passed"] else ("miss" + (f": {c['error']}" if c["error"] else ""))
        console.log(f"{c['length']} tokens, depth {c['depth']:g}%: {verdict}")

    record = niah.run(t.endpoint, t.labels, lengths=args.lengths or niah.DEFAULT_LENGTHS,
                      depths=args.depths or niah.DEFAULT_DEPTHS, trials=args.trials, max_tokens=args.max_tokens,
                      timeout_s=float(t.data["BENCH_CLIENT_TIMEOUT_S"]), seed=args.seed, on_cell=on_cell)
    out = bench.write_record(record, args.out or _default_out("niah", t.labels))
    console.print(niah.grid_table(record))
    overall = record["scores"]["overall"]
    console.print(f"score: {'-' if overall is None else f'{overall:.1f}'}/10  record: {out}")
    return 0


# evals compare: paired pass/fail comparison with the exact McNemar p (sparkctl/measure/evals.py)

def _add_evals_parser(subparsers) -> None:
    p = subparsers.add_parser("evals", help="compare eval results (paired, exact McNemar)",
                              description="Paired comparisons of per-problem eval results.")
    sub = p.add_subparsers(dest="evals_command", required=True)
    c = sub.add_parser("compare", help="both-solved / both-failed / each-alone and the exact McNemar p",
                       description=evals.__doc__.split("\n\n")[0])
    c.add_argument("a", help="results A: BigCodeBench *_eval_results.json or JSON lines {task_id, passed}")
    c.add_argument("b", help="results B, same problems")
    c.add_argument("--names", default=None, help="display names A,B (default: the file names)")
    c.add_argument("--json", action="store_true",
                   help='print {"both_pass", "both_fail", "only_a", "only_b", "n", "p_value"} only')
    c.set_defaults(func=run_evals_compare)


def run_evals_compare(args: argparse.Namespace) -> int:
    a, b = evals.load_results(args.a), evals.load_results(args.b)
    if args.names:
        names = [n.strip() for n in args.names.split(",")]
        if len(names) != 2 or not all(names):
            raise evals.EvalsError(f"--names {args.names!r}: expected two names, A,B")
    else:
        names = [Path(args.a).name, Path(args.b).name]
    c = evals.compare(a, b)
    if c.n == 0:
        raise evals.EvalsError(f"{args.a} and {args.b} have no problem in common")
    note = evals.unpaired_note(c, *names)
    if args.json:
        print(json.dumps(c.to_dict()))
        if note:
            print(f"sparkctl evals: {note}", file=sys.stderr)
        return 0
    _console().print(evals.comparison_table(c, *names))
    return 0
