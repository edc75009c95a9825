#!/usr/bin/env python3
"""On the box, with the vLLM venv's python: check `vllm serve` argument lists with vLLM's own parser.

    check_vllm_args.py ENV_FILE [ENV_FILE ...]     (reads VLLM_ARGS from each staged env file)
    check_vllm_args.py --json < [["serve", MODEL, "--flag", ...], ...]

Runs the parser tree of `vllm serve` (unknown/removed flags, bad JSON, choices, types) plus what vLLM checks only
when a server starts: tool/reasoning parser names, --speculative-config keys and values, the distributed
backend, and numeric bounds of the config fields. No model is loaded, no GPU is needed. Exit 1 and one line per
problem when anything is wrong, so a bad flag is caught before a service is restarted.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import shlex
import sys
import typing


def unescape_env_value(raw: str) -> str:
    """A double-quoted EnvironmentFile value as systemd reads it (backslash escapes of backslash, quote, `, $)."""
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        raw, out, i = raw[1:-1], [], 0
        while i < len(raw):
            if raw[i] == "\\" and i + 1 < len(raw) and raw[i + 1] in '"\\`$':
                out.append(raw[i + 1])
                i += 2
            else:
                out.append(raw[i])
                i += 1
        return "".join(out)
    return raw


def env_args(path: str) -> list[str]:
    """The argv systemd gives `vllm` for ExecStart=... serve $VLLM_ARGS (words split honouring quotes)."""
    for line in open(path).read().splitlines():
        if line.startswith("VLLM_ARGS="):
            return ["serve", *shlex.split(unescape_env_value(line.split("=", 1)[1]))]
    raise SystemExit(f"{path}: no VLLM_ARGS line")


def build_parser():
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    # the same two-level tree as vllm/entrypoints/cli/main.py: FlexibleArgumentParser rewrites serve args itself
    top = FlexibleArgumentParser(prog="vllm")
    serve = top.add_subparsers(dest="subparser").add_parser("serve", allow_abbrev=False)
    make_arg_parser(serve)
    return top


def parse(parser, argv: list[str]):
    from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = parser.parse_args(list(argv))
    except SystemExit:
        lines = [ln for ln in err.getvalue().splitlines() if ln and not ln.startswith("usage:")]
        return None, [" ".join(lines)[-500:] or "argparse rejected the arguments"]
    try:
        validate_parsed_serve_args(ns)
    except (TypeError, ValueError) as exc:
        return None, [str(exc)]
    return copy.deepcopy(ns), []


def start_time_checks(ns) -> list[str]:
    """What vLLM would only find when the server or engine starts."""
    return [*parser_name_checks(ns), *backend_checks(ns), *speculative_checks(ns.speculative_config or {}),
            *config_bound_checks(ns)]


def parser_name_checks(ns) -> list[str]:
    """--tool-call-parser / --reasoning-parser name a registered parser (unless a plugin brings its own)."""
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    problems = []
    if ns.tool_call_parser and not getattr(ns, "tool_parser_plugin", None) \
            and ns.tool_call_parser not in ToolParserManager.list_registered():
        problems.append(f"unknown --tool-call-parser {ns.tool_call_parser!r}")
    if ns.reasoning_parser and not getattr(ns, "reasoning_parser_plugin", None) \
            and ns.reasoning_parser not in ReasoningParserManager.list_registered():
        problems.append(f"unknown --reasoning-parser {ns.reasoning_parser!r}")
    return problems


def backend_checks(ns) -> list[str]:
    from vllm.config.parallel import DistributedExecutorBackend

    problems = []
    backend = ns.distributed_executor_backend
    if isinstance(backend, str) and "." not in backend and backend not in typing.get_args(DistributedExecutorBackend):
        problems.append(f"unknown --distributed-executor-backend {backend!r}")
    if ns.nnodes > 1 and backend not in (None, "mp", "uni", "external_launcher"):
        problems.append("--nnodes > 1 needs --distributed-executor-backend mp (vLLM's native multi-node)")
    return problems


def speculative_checks(spec: dict) -> list[str]:
    """Each --speculative-config key is a SpeculativeConfig field and its value passes that field's validation."""
    from vllm.config import SpeculativeConfig

    fields = SpeculativeConfig.__pydantic_fields__
    before = {f: getattr(SpeculativeConfig, name)
              for name, d in SpeculativeConfig.__pydantic_decorators__.field_validators.items()
              if d.info.mode == "before" for f in d.info.fields}
    problems = [p for p in (speculative_problem(key.replace("-", "_"), value, fields, before)
                            for key, value in spec.items()) if p]
    n = spec.get("num_speculative_tokens")
    if spec and (not isinstance(n, int) or n < 1):
        problems.append(f"--speculative-config.num_speculative_tokens={n!r}: must be a positive integer")
    return problems


def speculative_problem(key: str, value, fields: dict, before: dict) -> str:
    from pydantic import TypeAdapter, ValidationError

    if key not in fields or key.endswith("_config"):
        return f"--speculative-config: unknown key {key!r}"
    fi = fields[key]
    tp = typing.Annotated[(fi.annotation, *fi.metadata)] if fi.metadata else fi.annotation
    try:
        TypeAdapter(tp).validate_python(before[key](value) if key in before else value)
    except ValidationError as exc:
        return f"--speculative-config.{key}={value!r}: {exc.errors()[0]['msg'][:200]}"
    except (KeyError, ValueError) as exc:
        return f"--speculative-config.{key}={value!r}: {exc}"
    return ""


def config_bound_checks(ns) -> list[str]:
    """Numeric bounds of the config fields vLLM only validates when it builds the engine's configuration."""
    from pydantic import TypeAdapter, ValidationError
    from vllm.config import CacheConfig, ModelConfig, ParallelConfig, SchedulerConfig

    problems = []
    for cls in (ModelConfig, CacheConfig, ParallelConfig, SchedulerConfig):
        validated = {f for d in cls.__pydantic_decorators__.field_validators.values() for f in d.info.fields}
        for name, fi in cls.__pydantic_fields__.items():
            value = getattr(ns, name, None)
            if not fi.metadata or name in validated or value is None:
                continue
            try:
                TypeAdapter(typing.Annotated[(fi.annotation, *fi.metadata)]).validate_python(value)
            except ValidationError as exc:
                problems.append(f"--{name.replace('_', '-')}={value!r}: {exc.errors()[0]['msg']}")
    return problems


def check(argvs: dict[str, list[str]]) -> dict[str, list[str]]:
    parser = build_parser()
    out = {}
    for label, argv in argvs.items():
        ns, problems = parse(parser, argv)
        out[label] = problems if ns is None else start_time_checks(ns)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("env_files", nargs="*")
    ap.add_argument("--json", action="store_true", help="read {label: argv} as JSON on stdin, print JSON")
    args = ap.parse_args(argv)
    argvs = json.load(sys.stdin) if args.json else {p: env_args(p) for p in args.env_files}
    result = check(argvs)
    if args.json:
        print(json.dumps(result))
    for label, problems in result.items():
        for p in problems:
            print(f"{label}: {p}", file=sys.stderr)
    return 1 if any(result.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
