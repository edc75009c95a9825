"""The deploy's whole validation of a host, offline -> Settings: what `tasks/preflight.py` runs before the first
operation, and what `python -m sparkctl check` (check/cli.py) runs for every inventory host without touching one.

In order: the settings (check/load.py: the schema's types, every cross-field rule, the catalog), the lock file (a
regular file), the derived services, the rules on them (check/rules.py: where the directories sit, served names, the
environment and request lengths they allow, what a real box needs), the lock's coverage of every checkpoint,
secrets (present, private, strong), the TLS pair, the capacity rule (the memory must add up, and every service's KV
budget must hold one request), then every file the deploy would write to the box, rendered and run through the
real validators (check/render.py). Each refusal is a SettingError naming the setting, the value and what is valid.
"""

from __future__ import annotations

from dataclasses import replace

from sparkctl.capacity import admission, planner
from sparkctl.check import rules
from sparkctl.check.load import host_config, shipped, with_pool
from sparkctl.check.render import check_box_files
from sparkctl.config import secrets
from sparkctl.config.settings import Settings, derive
from sparkctl.fleet import fanout
from sparkctl.fleet.validate import validate_fleet


def validate_host(data: dict, host_name: str = "", read_secrets: bool = True, hosts: list[str] | None = None,
                  address: str | None = None, host_models: dict[str, str] | None = None) -> Settings:
    """Everything the deploy checks before touching the host; raises SettingError (or PlanError) on the first
    refusal. data: the host's merged data (pyinfra's host.data); hosts: the inventory's gx10 hosts in order;
    address: what clients connect to (the TLS certificate must name it), default data's ssh_hostname;
    host_models: the CODING_MODEL a box's own host data sets (SPARK_CODING_MODELS), for the fleet's rules.
    With read_secrets (the deploy, `check`), every file the deploy would write is rendered and validated too."""
    config, part_of = with_pool(data, host_name, address or "", hosts, host_models)
    rules.check_host(config, shipped())
    settings = derive(config, part_of)
    rules.check_services(settings)
    settings = replace(settings, warnings=settings.warnings + rules.box_waits(settings.cfg))
    if read_secrets:
        settings = with_secrets(settings)
    planner.check_fits(settings.cfg, settings.catalog, settings.cfg.CODING_MODEL)
    admission.refuse(settings.cfg, admission.walk_settings(settings))  # every start vLLM's admission would refuse
    rules.embedders_hold_one_request(settings)
    fleet_rules(settings, hosts, host_models)
    if read_secrets:
        scrape = secrets.read_scrape_token(settings.cfg, settings.api_token) if settings.role.serves_api else ""
        settings = replace(settings, notes=check_box_files(settings, scrape))
    return settings


def derive_host(data: dict, host_name: str, hosts: list[str], host_models: dict[str, str] | None = None) -> Settings:
    """Another box's derived services, as its own deploy derives them (its pool, its part), without the checks its
    own preflight runs: what a tensor-parallel head needs of its worker and the worker of its head."""
    return derive(*with_pool(data, host_name, "", hosts, host_models))


def fleet_rules(settings: Settings, hosts: list[str] | None, host_models: dict[str, str] | None) -> None:
    """Today's topologies read as pools, after this host's own checks (so a refusal names what the operator set):
    the rules of a fleet they cannot break alone (a box named twice, two boxes on one CX7 address, one served name
    for two models, the waves and the failure budget). A box whose own CODING_MODEL is unknown is left to its own
    check, which names it."""
    if not hosts or settings.cfg.FLEET_POOLS:
        return
    known = {box: model for box, model in (host_models or {}).items() if model in settings.catalog}
    validate_fleet(settings.cfg, settings.catalog, hosts, known)


def with_secrets(settings: Settings) -> Settings:
    """The settings with the secrets to upload, each checked (present, private, strong enough), and the TLS pair."""
    cfg = settings.cfg
    secrets.check_secrets_dir(cfg)
    api_token, hf_token = secrets.read_api_token(cfg), secrets.read_hf_token(cfg)
    secrets.check_tls_pair(cfg, settings.address)
    if settings.role.serves_api:  # the proxy's scrape paths: their own token, never the API token
        secrets.read_scrape_token(cfg, api_token=api_token)
    return replace(settings, api_token=api_token, hf_token=hf_token)


def validate_fanout(boxes: list[tuple[Settings, str]]) -> fanout.Plan:
    """The fleet's checkpoint fan-out as `check` sees it (offline: no box holds anything yet), each box with the
    address the others copy from: refused when CHECKPOINT_SEED_BOX is not a box of the inventory or is AIRGAPPED,
    or when an AIRGAPPED box keeps a checkpoint no box with a route to the Hub keeps (naming the box and it)."""
    plan_boxes = [fanout.box_of(s, address) for s, address in boxes]
    return fanout.plan(plan_boxes, boxes[0][0].cfg.CHECKPOINT_SEED_BOX if boxes else "")
