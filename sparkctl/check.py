"""The deploy's whole validation of a host, offline; the check layer every entry point reads settings through.

Settings are typed once:
* sparkctl.config.settings.host_config / load: loading, the schema and the catalog resolved once -> HostConfig
  (what `plan`, `bench`, `niah`, `status`, `sim` and `lock` read; no lock, no secrets needed).
* validate_host (here): the deploy's whole validation of a host, offline -> Settings: what `tasks/preflight.py`
  runs before the first operation, and what `python -m sparkctl check` runs for every inventory host without
  touching one.

    python -m sparkctl check                      # real-box group data (all, gx10) for the GX10_HOSTS boxes
    python -m sparkctl check --sim                # the simulated Spark's (all, gx10, sim) for its hosts
    python -m sparkctl check --data CODING_MODEL=laguna-s-2.1     # parsed as pyinfra parses --data

In order: the settings schema (sparkctl.config.schema: every key, type, range, cross-field rule), the flags a
catalog entry may not set, the lock file (a regular file), the derived services, the environment and request
lengths they allow, the lock's coverage of every checkpoint, secrets (present, private, strong), the TLS pair, the
capacity rule (the memory must add up, and every service's KV budget must hold one request), then every file the
deploy would write to the box, rendered and run through the real validators (sparkctl/check_render.py). Each
refusal is a SettingError naming the setting, the value and what is valid. Exit status 0 when every host passes, 2
otherwise.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace

from sparkctl.capacity import planner
from sparkctl.check_render import check_box_files
from sparkctl.config import files, groupdata, hosts, lock, rules, secrets
from sparkctl.config.groupdata import parse_data
from sparkctl.config.owned_flags import check_owned_flags
from sparkctl.config.quantities import GIB
from sparkctl.config.settings import HostConfig, Settings, derive, host_config
from sparkctl.errors import SettingError, SparkctlError
from sparkctl.render.monitoring import scrape_targets
from sparkctl.render.units import ENV_FILE_KEYS, TP_UNIT_ENV, service_environment


def check_embedders_hold_one_request(settings: Settings) -> None:
    """Every embedder whose layer facts the catalog knows gets a KV budget that holds one request of its
    max_model_len: below that vLLM refuses to start (after the deploy restarted it). The coding model's budget is
    checked by planner.check_fits, with its topology."""
    for i, svc in enumerate(settings.embedders):
        layout = planner.model_layout(svc.model)
        if layout is None:
            continue  # no layer facts in the catalog for this embedder: nothing to compute
        cap = planner.kv_capacity(layout, svc.kv_cache_bytes, svc.model.max_model_len)
        if cap.concurrency < 1.0:
            raise SettingError(f"EMBEDDERS[{i}].kv_cache_gib", svc.kv_cache_bytes / GIB,
                               f"at least {math.ceil(cap.min_kv_bytes / GIB * 100) / 100:.2f} GiB, the KV of one "
                               f"{svc.model.max_model_len:,}-token request of {svc.model.key}",
                               f"It holds {cap.concurrency:.2f} requests: vLLM refuses to start below one")


def validate_host(data: dict, host_name: str = "", read_secrets: bool = True, hosts: list[str] | None = None,
                  address: str | None = None) -> Settings:
    """Everything the deploy checks before touching the host; raises SettingError (or PlanError) on the first
    refusal. data: the host's merged data (pyinfra's host.data); hosts: the inventory's gx10 hosts in order;
    address: what clients connect to (the TLS certificate must name it), default data's ssh_hostname.
    With read_secrets (the deploy, `check`), every file the deploy would write is rendered and validated too."""
    config = host_config(data, host_name, address or "")
    rules.box_layout(config.cfg)
    check_served_names(config)
    check_catalog_args(config)
    check_lock_file(config)
    settings = derive(config, hosts)
    check_extra_env(settings)
    check_request_lengths(settings)
    if read_secrets:
        settings = with_secrets(settings)
    scrape_targets(settings.cfg, settings.services)  # the node's scrape path must not be a served model's
    planner.check_fits(settings.cfg, settings.catalog, settings.cfg.CODING_MODEL)
    check_embedders_hold_one_request(settings)
    if read_secrets:
        scrape = secrets.read_scrape_token(settings.cfg, settings.api_token) if settings.role.serves_api else ""
        settings = replace(settings, notes=check_box_files(settings, scrape))
    return settings


def with_secrets(settings: Settings) -> Settings:
    """The settings with the secrets to upload, each checked (present, private, strong enough), and the TLS pair."""
    cfg = settings.cfg
    api_token, hf_token = secrets.read_api_token(cfg), secrets.read_hf_token(cfg)
    secrets.check_tls_pair(cfg, settings.address)
    if settings.role.serves_api:  # the proxy's scrape paths: their own token, never the API token
        secrets.read_scrape_token(cfg, api_token=api_token)
    return replace(settings, api_token=api_token, hf_token=hf_token)


# --- what only the resolved catalog and the derived services can tell -------------------------------------------------


def check_served_names(config: HostConfig) -> None:
    """The coder's served name is no embedder's and not the node exporter's scrape path (each is a URL prefix on
    the proxy): CODER_SERVED_NAME is named when the operator changed it, else the other setting."""
    cfg = config.cfg
    taken = [("SCRAPE_NODE_PATH", cfg.SCRAPE_NODE_PATH, "the node exporter's scrape path")]
    taken += [(f"EMBEDDERS[{i}].model", entry.model, f"the served name of {entry.model}")
              for i, entry in enumerate(cfg.EMBEDDERS) if entry.model in config.catalog]
    for setting, value, what in taken:
        served = value if setting == "SCRAPE_NODE_PATH" else config.catalog[value].served_name
        if served != cfg.CODER_SERVED_NAME:
            continue
        if rules.changed("CODER_SERVED_NAME", cfg.CODER_SERVED_NAME):
            raise SettingError("CODER_SERVED_NAME", cfg.CODER_SERVED_NAME, f"a name other than {what}",
                               f"Both would be the proxy's path prefix /{served}/")
        raise SettingError(setting, value, f"a name other than CODER_SERVED_NAME's ({served})",
                           f"Both would be the proxy's path prefix /{served}/")


def check_catalog_args(config: HostConfig) -> None:
    """No catalog entry's extra_args sets a flag the deploy owns, nor its speculative config the draft model the
    deploy fills in from the locked draft checkpoint (a CATALOG_OVERRIDES entry is named as such)."""
    for key, spec in config.catalog.items():
        override = config.cfg.CATALOG_OVERRIDES.get(key, {})
        where = f"CATALOG_OVERRIDES[{key!r}]" if "extra_args" in override else f"the catalog entry {key!r}"
        check_owned_flags(f"{where}['extra_args']", spec.extra_args)
        if spec.speculative and "model" in spec.speculative:
            where = f"CATALOG_OVERRIDES[{key!r}]" if "speculative" in override else f"the catalog entry {key!r}"
            raise SettingError(f"{where}['speculative']['model']", spec.speculative["model"],
                               "no draft model: the deploy fills it in from the entry's draft checkpoint",
                               "Set the draft checkpoint ('draft': {'repo': ..., 'revision': ...}): the lock pins it "
                               "and the box verifies it, a path or repository here would be neither")


def check_lock_file(config: HostConfig) -> None:
    """The lock file, when it exists, is a regular UTF-8 file (a FIFO would hang the read; lock.load explains
    a missing one or bad JSON)."""
    path = lock.lock_path(config.cfg)
    try:
        files.read_text(path, "MODEL_LOCK_FILE", "a lock file (JSON text)", "Run `python -m sparkctl lock refresh`")
    except FileNotFoundError:
        return


def check_extra_env(settings: Settings) -> None:
    """VLLM_EXTRA_ENV adds to the environment the deploy gives vLLM; it does not replace what the deploy sets."""
    extra = settings.cfg.VLLM_EXTRA_ENV
    if not extra:
        return
    base = settings.cfg.model_copy(update={"VLLM_EXTRA_ENV": {}})
    owned = {*ENV_FILE_KEYS, TP_UNIT_ENV}
    for svc in settings.services:
        owned |= set(service_environment(svc, base))
    for key, value in extra.items():
        if key in owned:
            raise SettingError(f"VLLM_EXTRA_ENV[{key!r}]", value, "an environment variable the deploy does not set "
                               "itself", f"The deploy sets {key} from its settings (caches under STATE_DIR, the "
                                         "offline hub, the listen address, the topology): this would override it")


def check_request_lengths(settings: Settings) -> None:
    """Every request the deploy's own probes send fits the served coder's context (prompt plus answer)."""
    model = settings.coder.model
    cfg = settings.cfg
    requests = [("BENCH_PREFILL_TOKENS", cfg.BENCH_PREFILL_TOKENS + 1), ("BENCH_MAX_TOKENS", cfg.BENCH_MAX_TOKENS),
                ("ACCEPTANCE_PREFILL_TOKENS", cfg.ACCEPTANCE_PREFILL_TOKENS + 1),
                ("HEALTH_PROBE_MAX_TOKENS", cfg.HEALTH_PROBE_MAX_TOKENS),
                ("ROLLOUT_GATE_MAX_TOKENS", cfg.ROLLOUT_GATE_MAX_TOKENS)]
    if cfg.ACCEPTANCE_NIAH_ENABLED:
        requests.append(("ACCEPTANCE_NIAH_LENGTH", cfg.ACCEPTANCE_NIAH_LENGTH + cfg.NIAH_MAX_TOKENS))
    for name, tokens in requests:
        if tokens > model.max_model_len:
            raise SettingError(name, getattr(cfg, name), f"a request that fits {model.key}'s context of "
                               f"{model.max_model_len:,} tokens", f"It needs {tokens:,} tokens (prompt and answer): "
                                                                  "vLLM would refuse it")


# --- python -m sparkctl check ---------------------------------------------------------------------------------------


def inventory_hosts(sim: bool) -> tuple[list[hosts.HostConn], bool]:
    """The hosts inventory.py would give (with each box's SPARK_CODING_MODELS), and whether they are real ones;
    one nominal box when none is configured (GX10_HOSTS unset / the simulated Spark not booted)."""
    found = hosts.with_models(hosts.sim_hosts() if sim else hosts.real_hosts())
    if found:
        return found, True
    name = "spark-1" if sim else "gx10"
    return hosts.with_models([hosts.HostConn(name=name, address=name, simulated=sim)]), False


def run(args: argparse.Namespace) -> int:
    groups = ["all", "gx10", "sim"] if args.sim else ["all", "gx10"]
    overrides = parse_data(args.data)
    targets, configured = inventory_hosts(args.sim)
    names = [h.name for h in targets]
    base = groupdata.load(groups)
    if not configured:
        print(f"no {'simulated Spark is booted' if args.sim else 'GX10_HOSTS set'}: checking one nominal box "
              f"{names[0]!r} ({', '.join(groups)})")
    failed = [h for h in targets if not check_one(h, {**base, **h.pyinfra_data(), **overrides}, names)]
    return 2 if failed else 0


def check_one(h: hosts.HostConn, data: dict, names: list[str]) -> bool:
    """One inventory host's whole validation, printed; data in pyinfra's order (--data > host data > group data);
    the address: ssh_hostname, as the deploy's."""
    try:
        s = validate_host(data, h.name, hosts=names)
    except SparkctlError as exc:
        print(f"sparkctl check: {h.name}: {exc}", file=sys.stderr)
        return False
    for w in s.warnings:
        print(f"{h.name}: WARNING: {w}")
    print(f"{h.name}: ok: {s.role.name}, {', '.join(f'{v.name}={v.model.key}' for v in s.services) or 'no vLLM'}, "
          f"{len(s.checkpoints)} checkpoints locked")
    for note in s.notes:
        print(f"{h.name}:   {note}")
    return True


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="the deploy's whole validation, offline, for every inventory host",
                       description=__doc__.splitlines()[0])
    p.add_argument("--sim", action="store_true", help="the simulated Spark's group data and hosts")
    p.add_argument("--data", action="append", metavar="KEY=VALUE",
                   help="override a setting for this check, as `pyinfra --data` does (repeatable)")
    p.set_defaults(func=run)
