"""`python -m sparkctl bench`, `bench compare A.json B.json`, `bench history`, `bench gate` and `niah`: the probe and
acceptance checks' CLI.

The box keeps a history of accepted runs (sparkctl/measure/history.py): `bench history` lists it (`--repair` moves
lines an older version wrote that no longer read into a file next to it), `bench compare A
--baseline` lines A up with the box's baseline for A's configuration and workload (refused when there is none: runs
of other workloads are never lined up), `@ID` names a history line wherever a record file is expected, and
`bench --record-baseline` makes a full bench the baseline, and `bench confirm @ID` makes a provisional run (judged on
the roofline alone) a yardstick. `bench gate` runs a rollout's quick acceptance
(sparkctl/measure/quick.py) and prints its verdict; the deploy calls the same function. `bench judge` replays a
saved quick-run record's verdict offline against a history file (sparkctl/measure/judge_cli.py).

The box is reached through its TLS proxy (https://<address>:PROXY_PORT/<CODER_SERVED_NAME>/v1) with the bearer
token, trusting only the deploy's CA (--ca, default <SECRETS_DIR>/pki/ca.pem); /metrics is read on the box over
ssh (`curl http://127.0.0.1:CODER_PORT/metrics`), since the proxy does not publish it.

The bench JSON record (schema "sparkctl.bench/1") is described field by field by its pydantic model,
sparkctl/measure/record.py; `bench compare` validates both files against it.

List options (--streams, --prefill, --lengths, --depths, --groups) all take a comma list, may be repeated, and
accumulate: `--streams 1 --streams 4` and `--streams 1,4` mean the same.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sparkctl import REPO_ROOT
from sparkctl.check.load import load
from sparkctl.config import hosts
from sparkctl.config.secrets import read_api_token, secrets_dir
from sparkctl.config.settings import HostConfig
from sparkctl.errors import SettingError, SparkctlError
from sparkctl.measure import (
    acceptance,
    evals,
    history,
    judge_cli,
    labels,
    niah,
    probe,
    quick,
    record,
    report,
)
from sparkctl.measure.client import Endpoint

# ---------------------------------------------------------------------------------------------------- parsing

def int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: expected positive integers, e.g. 1,2,4,8")
    return values


def str_list(text: str) -> list[str]:
    values = [x.strip() for x in text.split(",") if x.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"{text!r}: expected one or more comma-separated names")
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
    values = [token_count(x) for x in text.split(",") if x.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"{text!r}: expected token counts, e.g. 12K,54K")
    return values


def float_list(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers") from None
    if not values:
        raise argparse.ArgumentTypeError(f"{text!r}: expected numbers, e.g. 10,50,90")
    return values


def add_list_option(group, flag: str, parse: Callable[[str], list], text: str, *, example: str, **kw) -> None:
    """The one convention for list options: a comma list, repeatable, accumulating (action "extend")."""
    group.add_argument(flag, type=parse, action="extend", default=None,
                       help=f"{text}; comma list or repeated, e.g. {example}", **kw)


def _target_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("target")
    g.add_argument("--host", default=None, help="inventory host name (default: the first configured)")
    add_list_option(g, "--groups", str_list, "group data to merge (default: all,gx10 for a real box, all,gx10,sim "
                    "else)", example="all,gx10")
    g.add_argument("--ca", default=None, help="CA bundle (PEM) the proxy's certificate chains to "
                                              "(default: <SECRETS_DIR>/pki/ca.pem)")
    g.add_argument("--base-url", default=None,
                   help="talk to this OpenAI base URL instead of the proxy (development, e.g. a local vLLM)")
    g.add_argument("--metrics-url", default=None,
                   help="read /metrics with a local curl of this URL instead of ssh to the box (development)")


def add_parser(subparsers) -> None:
    _add_bench_parser(subparsers)
    _add_niah_parser(subparsers)
    _add_evals_parser(subparsers)


def _add_bench_parser(subparsers) -> None:
    p = subparsers.add_parser("bench", help="decode/prefill probe through the proxy; `bench compare A B`",
                              description=probe.__doc__.split("\n\n")[0])
    _target_args(p)
    add_list_option(p, "--streams", int_list, "concurrent streams to sweep (default BENCH_STREAMS)",
                    example="--streams 1,2 --streams 8")
    p.add_argument("--window", type=float, default=None, help="decode window, s (BENCH_WINDOW_S)")
    p.add_argument("--max-tokens", type=int, default=None, help="max_tokens per request (BENCH_MAX_TOKENS)")
    prefill = p.add_mutually_exclusive_group()
    add_list_option(prefill, "--prefill", token_list, "fresh-prefill prompt lengths (default BENCH_PREFILL_TOKENS)",
                    example="--prefill 12K,54K --prefill 204800", metavar="TOKENS")
    prefill.add_argument("--no-prefill", action="store_true", help="skip the prefill measurement")
    p.add_argument("--workload", default=None, help="workload name-version (default codegen-v1)")
    p.add_argument("--ignore-eos", action=argparse.BooleanOptionalAction, default=None,
                   help="run every request to max_tokens (default BENCH_IGNORE_EOS, else off; on for tiny "
                        "random-weight models)")
    p.add_argument("--out", default=None, help="JSON record path (default results/bench-<model>-<time>.json)")
    p.add_argument("--plot", default=None, help="PNG path (default: the JSON path with .png)")
    p.add_argument("--no-plot", action="store_true", help="write no PNG")
    p.add_argument("--record-baseline", action="store_true",
                   help="append the record to the box's history as the baseline of its configuration and workload")
    p.set_defaults(func=run_bench)
    _add_bench_modes(p.add_subparsers(dest="bench_mode", metavar="{compare,history,confirm,gate,judge}"))


def _add_bench_modes(modes) -> None:
    c = modes.add_parser("compare", help="side-by-side table of two bench records",
                         description="The side-by-side table of two bench JSON records; the header says when their "
                                     "workloads or windows differ. @ID names a line of the box's history.")
    c.add_argument("a", help="bench JSON A (or @ID)")
    c.add_argument("b", nargs="?", default=None, help="bench JSON B (or @ID); omit with --baseline")
    c.add_argument("--baseline", action="store_true",
                   help="B = the box's baseline for A's configuration and workload (refused when there is none)")
    c.add_argument("--box", default=None, help="inventory host whose history @ID and --baseline read "
                                               "(default: the first configured)")
    c.add_argument("--names", default=None, help="column names A,B (default: model keys)")
    c.add_argument("--plot", default=None, help="also write a PNG with both runs")
    c.set_defaults(func=run_compare)
    h = modes.add_parser("history", help="the box's accepted runs and baselines",
                         description=history.__doc__.split("\n\n")[0])
    h.add_argument("--box", default=None, help="inventory host whose history to read (default: the first configured)")
    h.add_argument("--model", default=None, help="only this coding model (catalog key)")
    h.add_argument("--json", action="store_true", help="print the lines as JSON")
    h.add_argument("--repair", action="store_true",
                   help="move every unreadable line (e.g. a NaN an older version wrote) into a file next to the "
                        "history, keep the rest; the original is kept beside it")
    h.set_defaults(func=run_history)
    f = modes.add_parser("confirm", help="confirm a provisional run: it becomes a yardstick",
                         description="An operator's confirmation of a provisional history line (a run judged on the "
                                     "roofline alone, nothing measured to compare with): appended as its own line, "
                                     "the baseline of its configuration and workload when that has none.")
    f.add_argument("id", help="@ID (or ID) of the provisional line, as `bench history` shows it")
    f.add_argument("--box", default=None, help="inventory host whose history to append to (default: the first "
                                               "configured)")
    f.set_defaults(func=run_confirm)
    g = modes.add_parser("gate", help="a rollout's quick acceptance now, and its verdict",
                         description=quick.__doc__.split("\n\n")[0])
    g.add_argument("--box", default=None, help="inventory host to judge (default: the first configured)")
    g.add_argument("--json", action="store_true", help="print the verdict as JSON (acceptance.Verdict.to_dict)")
    g.add_argument("--record", action="store_true", help="append a passed run to the box's history")
    g.set_defaults(func=run_gate)
    judge_cli.add_parser(modes)


def _add_niah_parser(subparsers) -> None:
    n = subparsers.add_parser("niah", help="needle-in-a-haystack grid through the proxy",
                              description=niah.__doc__.split("\n\n")[0])
    _target_args(n)
    lengths = ",".join(f"{x // 1024}K" for x in niah.DEFAULT_LENGTHS)
    depths = ",".join(f"{x:g}" for x in niah.DEFAULT_DEPTHS)
    add_list_option(n, "--lengths", token_list, f"context lengths in tokens (default {lengths}; K = 1024)",
                    example="32K,95K")
    add_list_option(n, "--depths", float_list, f"needle depths, %% (default {depths})", example="10,90")
    n.add_argument("--trials", type=int, default=1, help="needles per cell (default 1)")
    n.add_argument("--max-tokens", type=int, default=None, help="answer budget per request (NIAH_MAX_TOKENS)")
    n.add_argument("--seed", type=int, default=0, help="haystack/needle seed")
    n.add_argument("--out", default=None, help="JSON path (default results/niah-<model>-<time>.json)")
    n.set_defaults(func=run_niah)


# ---------------------------------------------------------------------------------------------------- context

@dataclass
class Target:
    config: HostConfig  # the box's typed settings and catalog (sparkctl.check.load)
    endpoint: Endpoint
    metrics: probe.MetricsSource
    labels: dict


def _url_host(address: str) -> str:
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def resolve_target(args) -> Target:
    """The box the probe measures: its settings (group data and its inventory host data, validated), the proxy
    endpoint with the token and CA, where /metrics is read, and the record's labels. --base-url with
    --metrics-url: a development target that needs no configured host."""
    host = _target_host(args)
    config = load(args.groups or None, host)
    cfg = config.cfg
    token = _token(args, config)
    base, ca = _base_and_ca(args, host, config)
    source = probe.MetricsSource.local(args.metrics_url) if args.metrics_url else \
        probe.MetricsSource.ssh(host, cfg.CODER_PORT)
    if host is not None and not (args.base_url and args.host is None):
        box = {**labels.box_labels(host, config), **labels.build_labels(config)}
    else:  # development run against some other server: never label it as the inventory's box
        box = {"box": {"name": "dev", "address": base, "simulated": None}}
    return Target(config=config, endpoint=Endpoint(base, cfg.CODER_SERVED_NAME, token, ca),
                  metrics=source, labels={**labels.model_labels(config), **box})


def _target_host(args) -> hosts.HostConn | None:
    """--host (default the first configured); none needed for a development target."""
    try:
        return hosts.find(args.host)
    except SparkctlError:
        if not (args.base_url and args.metrics_url):
            raise
        return None


def _token(args, config: HostConfig) -> str:
    """The API token; a development --base-url may do without."""
    try:
        return read_api_token(config.cfg)
    except SettingError:
        if not args.base_url:
            raise
        return ""


def _base_and_ca(args, host: hosts.HostConn | None, config: HostConfig) -> tuple[str, str | None]:
    """(OpenAI base URL, CA bundle): the box's proxy and the deploy's CA unless --base-url / --ca say otherwise."""
    if args.base_url:
        return args.base_url, args.ca
    cfg = config.cfg
    base = f"https://{_url_host(host.address)}:{cfg.PROXY_PORT}/{cfg.CODER_SERVED_NAME}/v1"
    ca = args.ca or str(secrets_dir(cfg) / "pki" / "ca.pem")
    if not Path(ca).is_file():
        raise SettingError("--ca", ca, "a CA bundle (PEM) that signed the proxy's certificate",
                           "The deploy generates <SECRETS_DIR>/pki/ca.pem; with your own TLS_CERT_FILE pass its CA")
    return base, ca


def _console():
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=150)


def _stamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")


def _default_out(kind: str, record_labels: dict) -> Path:
    key = (record_labels.get("model") or {}).get("key") or "model"
    return REPO_ROOT / "results" / f"{kind}-{key}-{_stamp()}.json"


# ---------------------------------------------------------------------------------------------------- commands

class RichReporter(probe.Reporter):
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


def probe_settings(args, cfg) -> probe.ProbeSettings:
    """The probe run: the options given, else the BENCH_* settings (the schema checked every one)."""
    from sparkctl.measure import workloads

    return probe.ProbeSettings(
        workload=workloads.load(args.workload or workloads.DEFAULT_WORKLOAD),
        streams=probe.distinct("--streams" if args.streams else "BENCH_STREAMS", args.streams or cfg.BENCH_STREAMS),
        window_s=args.window if args.window is not None else float(cfg.BENCH_WINDOW_S),
        max_tokens=args.max_tokens or cfg.BENCH_MAX_TOKENS,
        prefill_tokens=[] if args.no_prefill else probe.distinct("--prefill", args.prefill or [cfg.BENCH_PREFILL_TOKENS]),
        ignore_eos=args.ignore_eos if args.ignore_eos is not None else cfg.BENCH_IGNORE_EOS,
        timeout_s=float(cfg.BENCH_CLIENT_TIMEOUT_S),
        settle_s=float(cfg.BENCH_SETTLE_S),
        idle_timeout_s=float(cfg.BENCH_IDLE_TIMEOUT_S),
        agreement_tolerance=float(cfg.BENCH_AGREEMENT_TOLERANCE),
    )


def run_bench(args) -> int:
    from rich.progress import (
        BarColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    t = resolve_target(args)
    settings = probe_settings(args, t.config.cfg)
    roofline, why = labels.roofline_single_stream(t.config)
    console = _console()
    if roofline is None:
        console.log(f"roofline omitted: {why}")
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                  TimeElapsedColumn(), console=console) as progress:
        rec = asyncio.run(probe.run_probe(t.endpoint, t.metrics, settings, t.labels, RichReporter(progress),
                                          roofline_single=roofline))
    _report_bench(args, rec, t.labels, console)
    if args.record_baseline:
        return _record_baseline(args, rec, t, console)
    return 1 if rec["problems"] else 0


def _report_bench(args, rec: dict, record_labels: dict, console) -> None:
    out = record.write_record(rec, args.out or _default_out("bench", record_labels))
    for table in report.record_tables(rec):
        console.print(table)
    console.print(f"record: {out}")
    if not args.no_plot:
        png = report.plot_records([rec], args.plot or out.with_suffix(".png"))
        console.print(f"plot: {png}")
    for problem in rec["problems"]:
        console.print(f"[bold red]problem:[/] {problem}")


def _record_baseline(args, rec: dict, t: Target, console) -> int:
    if rec["problems"] or t.labels["box"]["name"] == "dev":
        console.print("[bold red]not recorded as the baseline:[/] " +
                      ("its figures have problems" if rec["problems"] else "a development target has no box"))
        return 1
    line = history.append(hosts.find(args.host), t.config.cfg, rec, source="bench", baseline=True)
    console.print(f"baseline recorded on the box: {line['history']['id']}")
    return 0


def _box(args) -> tuple[hosts.HostConn, HostConfig]:
    """(host, its settings) of --box, for commands that read or judge a box without the probe's endpoint."""
    host = hosts.find(args.box)
    return host, load(args.groups or None, host)


def _load(arg: str, lines: Callable[[], list[dict]]) -> dict:
    return history.find(lines(), arg[1:]) if arg.startswith("@") else record.load_record(arg)


def run_compare(args) -> int:
    cache: list = []

    def lines() -> list[dict]:
        if not cache:
            host, config = _box(args)
            cache.append(history.read(host, config.cfg))
        return cache[0]

    if (args.b is None) == (not args.baseline):
        raise SettingError("bench compare", args.b or "--baseline", "either a record B or --baseline, not both")
    a = _load(args.a, lines)
    b = _baseline_of(args.a, a, lines()) if args.baseline else _load(args.b, lines)
    names = _column_names(args.names, a, b)
    console = _console()
    console.print(report.compare_table(a, b, *names))
    if args.plot:
        console.print(f"plot: {report.plot_records([a, b], args.plot)}")
    return 0


def _baseline_of(name: str, a: dict, lines: list[dict]) -> dict:
    """The box's baseline for record a's configuration and workload; refused when there is none."""
    b = history.baseline_for(lines, a)
    if b is None:
        same_model = [x["history"]["id"] for x in history.select(lines, model=history.config_key(a)["model"])]
        raise record.BenchError(f"the box has no baseline of {name}'s configuration and workload "
                                f"{history.config_key(a) | history.workload_key(a)}; records of another "
                                f"configuration or workload are never lined up (this model's lines: "
                                f"{same_model or 'none'}; `bench history` shows them)")
    return b


def _column_names(given: str | None, a: dict, b: dict) -> list[str]:
    if given:
        names = [n.strip() for n in given.split(",")]
        if len(names) != 2 or not all(names):
            raise SettingError("--names", given, "two names, A,B")
        return names
    names = [(a.get("model") or {}).get("key") or "A", (b.get("model") or {}).get("key") or "B"]
    return [f"A {names[0]}", f"B {names[1]}"] if names[0] == names[1] else names


def run_history(args) -> int:
    host, config = _box(args)
    if args.repair:
        return _repair(host, config)
    lines = history.select(history.read(host, config.cfg), model=args.model)
    if args.json:
        print(json.dumps(lines, indent=2))
        return 0
    _console().print(history.history_table(lines, f"{host.name}: {history.history_path(config.cfg)}"))
    return 0


def _repair(host, config: HostConfig) -> int:
    """`bench history --repair`: what was moved aside, where, and where the original is."""
    done = history.repair(host, config.cfg)
    if not done.moved:
        print(f"{host.name}: {done.path}: every line reads ({done.kept} lines); nothing to repair")
        return 0
    print(f"{host.name}: {done.path}: moved {len(done.moved)} unreadable line(s) into {done.aside}, kept "
          f"{done.kept}; the original is kept as {done.backup}")
    for m in done.moved:
        print(f"  {m.describe()}")
    if any(m.tag().get("baseline") is True for m in done.moved):
        print("a baseline was moved aside: the next accepted run of its configuration becomes its baseline again")
    return 0


def run_confirm(args) -> int:
    host, config = _box(args)
    line = history.confirm(host, config.cfg, args.id.lstrip("@"))
    kind = "the baseline of its configuration and workload" if line["history"]["baseline"] else "confirmed"
    print(f"{host.name}: {line['history']['confirms']} confirmed by line {line['history']['id']} ({kind})")
    return 0


def run_gate(args) -> int:
    host, config = _box(args)
    console = _console()
    verdict = quick.acceptance_of(host, config)
    if args.record and verdict.passed:
        quick.record_accepted(host, config.cfg, verdict)
    if args.json:
        print(json.dumps(verdict.to_dict(), allow_nan=False))
    else:
        console.print(acceptance.verdict_table(verdict, f"{host.name} acceptance"))
        console.print(verdict.reason(), markup=False)  # its [baseline <id>] tags are text
    return 0 if verdict.decision == "commit" else 1


def run_niah(args) -> int:
    t = resolve_target(args)
    console = _console()

    def on_cell(c: dict) -> None:
        if c["skipped"]:
            verdict = "skipped"
        else:
            verdict = "pass" if c["passed"] else ("miss" + (f": {c['error']}" if c["error"] else ""))
        console.log(f"{c['length']} tokens, depth {c['depth']:g}%: {verdict}")

    cfg = t.config.cfg
    rec = niah.run(t.endpoint, t.labels, lengths=args.lengths or niah.DEFAULT_LENGTHS,
                   depths=args.depths or niah.DEFAULT_DEPTHS, trials=args.trials,
                   max_tokens=args.max_tokens or cfg.NIAH_MAX_TOKENS,
                   timeout_s=float(cfg.BENCH_CLIENT_TIMEOUT_S), seed=args.seed, on_cell=on_cell)
    out = record.write_record(rec, args.out or _default_out("niah", t.labels))
    console.print(niah.grid_table(rec))
    overall = rec["scores"]["overall"]
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
