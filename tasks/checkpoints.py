"""Checkpoints: every checkpoint the box keeps (settings.kept_models) at its locked commit, fetched once per run for
the whole fleet and fanned out box to box (sparkctl/fleet/fanout.py plans who gets what from whom, in which round;
docs/checkpoint-fanout.md).

Every coding model with a KV budget stays on disk, so a flip back downloads nothing. A service is pointed at a
snapshot only after fetch_checkpoint.py verified it against the lock (its marker exists). Round 0 downloads each
checkpoint no box of the run holds from the Hub, on one box; each later round is one operation on every box
(pyinfra runs an operation on all hosts before the next), in which every box that holds a checkpoint gives it to
one box still without it, over the pair's CX7 link where there is one. While pyinfra prepares, each box reads only
its own markers; the plan is made once, at execution, from what every box holds. A copy is verified in staging like a
download, then renamed into place; a killed one resumes on rerun; a source that cannot provide it is skipped for the
next one, then the Hub (never for an AIRGAPPED box). The last operation says where each checkpoint came from.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field, replace
from io import StringIO

from pyinfra import host, inventory, logger
from pyinfra.api import FunctionCommand, StringCommand, deploy, operation
from pyinfra.api.command import QuoteString
from pyinfra.facts.files import File
from pyinfra.operations import files

from sparkctl.check.validate import derive_host
from sparkctl.config import pki
from sparkctl.config.hosts import per_host_models
from sparkctl.config.lock import LockedCheckpoint, marker_dir
from sparkctl.config.quantities import GIB
from sparkctl.config.schema import GroupData
from sparkctl.config.secrets import secrets_dir
from sparkctl.config.service import snapshot_path
from sparkctl.config.settings import Settings
from sparkctl.errors import Refused, SparkctlError
from sparkctl.fleet import fanout
from sparkctl.fleet.fanout import key_of
from sparkctl.render.link import link_ssh
from sparkctl.render.units import vllm_venv
from tasks.common import connector_args

FANOUT_KEY = "/root/.ssh/sparkctl-fleet-sync"  # on every box of a fleet: the key it copies checkpoints with
FANOUT_KEY_LINE = "sparkctl-fleet-sync"  # the authorized_keys line that lets the other boxes copy from this one
STAGING = ".fanout-staging"  # under MODEL_STORE: copies wait here until they are verified (one file system: a rename)
VIEW_ATTRIBUTE = "sparkctl_fanout"  # where the run's one fan-out view is kept on pyinfra's State


def listing_json(cp) -> str:
    return json.dumps({"repo": cp.repo, "revision": cp.revision, "sha": cp.sha, "files": cp.files},
                      indent=1, sort_keys=True) + "\n"


@dataclass
class FleetView:
    """The run's fan-out, shared by every host's deploy.py on pyinfra's State.

    While pyinfra prepares (a greenlet per host), each box records the checkpoints it holds verified, read by its own
    facts (`holds`); no box reads another's, so each box's commands stay its own. The plan is made once, at
    execution, from what every box recorded: every host has prepared by then."""

    boxes: list = field(default_factory=list)  # fanout.Box of every box of the run, holds=() (inventory order)
    rounds: int = 0  # the rounds declared: the plan's when no box holds anything, the most any plan needs
    refusal: str = ""  # why the fleet's fan-out is refused (every box's deploy stops on it)
    addresses: tuple = ()  # every inventory box's address the others may copy from (authorized_keys from=)
    seed: str = ""  # CHECKPOINT_SEED_BOX
    holds: dict = field(default_factory=dict)  # box -> the checkpoints it holds verified now
    executed: fanout.Plan | None = None

    def plan(self) -> fanout.Plan:
        """The plan with what each box holds (at execution, made once)."""
        if self.executed is None:
            self.executed = fanout.plan([replace(b, holds=self.holds.get(b.name, ())) for b in self.boxes], self.seed)
        return self.executed


def fleet_view(settings: Settings) -> FleetView:
    """The run's view, made by the first host's deploy.py to ask (no command: no greenlet switch in between)."""
    view = getattr(host.state, VIEW_ATTRIBUTE, None)
    if view is None:
        view = _fleet_view(settings)
        setattr(host.state, VIEW_ATTRIBUTE, view)
    return view


def _fleet_view(settings: Settings) -> FleetView:
    """Every box of this run (the inventory's gx10 group, less --limit) as its own deploy derives it, and the plan's
    rounds when none holds anything (what `check` refuses is refused here too). The addresses let in are every
    inventory box's (a --limit run writes the same line)."""
    names = [h.name for h in inventory.get_group("gx10")]
    active = {h.name for h in inventory.get_active_hosts()}
    boxes = []
    for name in (n for n in names if n in active):
        other = inventory.get_host(name)
        try:
            s = settings if name == settings.host_name else \
                derive_host(other.data.dict(), name, names, per_host_models())
        except SparkctlError:
            continue  # its own preflight refuses it, naming why
        boxes.append(fanout.box_of(s, str(other.data.get("ssh_hostname") or name)))
    links = settings.cfg.CX7_ADDRESSES
    addresses = [str(inventory.get_host(n).data.get("ssh_hostname") or n) for n in names]
    addresses += [a.split("/")[0] for n in names for a in links.get(n, [])]
    seed = settings.cfg.CHECKPOINT_SEED_BOX
    try:  # the rounds do not depend on who is AIRGAPPED (one seed either way); each box checks its own reach
        fanout.seed_box(seed, boxes)
        rounds = fanout.plan([replace(b, airgapped=False) for b in boxes], seed).rounds
    except SparkctlError as exc:
        return FleetView(refusal=str(exc))
    return FleetView(boxes=boxes, rounds=rounds, addresses=tuple(addresses), seed=seed)


def fanout_key(cfg: GroupData, view: FleetView) -> None:
    """Every box of a fleet may copy from every other: its key, and the others' copies let in as a read-only
    rrsync of MODEL_STORE, from the fleet's own addresses only."""
    path, public = pki.ensure_ssh_keypair(secrets_dir(cfg) / cfg.CHECKPOINT_FANOUT_KEY, "sparkctl-fleet-sync")
    files.directory(name="Create /root/.ssh", path="/root/.ssh", user="root", group="root", mode="0700")
    files.put(name="Fleet checkpoint copy key (root-only)", src=str(path), dest=FANOUT_KEY, user="root",
              group="root", mode="0600")
    sources = ",".join(dict.fromkeys(view.addresses))
    files.line(name="Let the fleet's boxes copy checkpoints from this one (read-only rrsync of the model store)",
               path="/root/.ssh/authorized_keys", line=FANOUT_KEY_LINE,
               replace=f'restrict,from="{sources}",command="rrsync -ro {shlex.quote(cfg.MODEL_STORE)}" {public}')


@deploy("Checkpoints")
def checkpoints(settings: Settings) -> None:
    cfg = settings.cfg
    store, home = cfg.MODEL_STORE, cfg.SPARKCTL_HOME
    view = fleet_view(settings)
    if view.refusal:
        raise Refused(f"{host.name}: {view.refusal}")
    files.directory(name=f"Create {store}", path=store, user="root", group="root", mode="0755")
    files.directory(name=f"Create {store}/hub", path=f"{store}/hub", user="root", group="root", mode="0755")
    files.directory(name=f"Create {marker_dir(store)}", path=marker_dir(store), user="root", group="root",
                    mode="0755")
    files.directory(name=f"Create {home}/locks", path=f"{home}/locks", user="root", group="root", mode="0755")
    env = {"HF_ENDPOINT": cfg.HF_ENDPOINT, "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    if cfg.AIRGAPPED:
        env["HF_HUB_OFFLINE"] = "1"  # no route to the Hub: never asked, even by mistake
    token_file = f"{cfg.ENV_DIR}/hf_token"
    if settings.hf_token and not cfg.AIRGAPPED:
        files.put(name="Install the Hugging Face token (root-only)", src=StringIO(settings.hf_token + "\n"),
                  dest=token_file, user="root", group="root", mode="0600", _temp_dir=cfg.ENV_DIR)
        env["HF_TOKEN_PATH"] = token_file
    else:
        files.file(name="No Hugging Face token configured: remove any old one", path=token_file, present=False)
    listings = {}
    for cp in settings.checkpoints:
        listings[cp.repo] = f"{home}/locks/{cp.cache_dirname()}@{cp.sha}.json"
        files.put(name=f"Lock listing {cp.repo}@{cp.sha[:12]}", src=StringIO(listing_json(cp)),
                  dest=listings[cp.repo], user="root", group="root", mode="0644")
    lacks = own_holdings(settings, view)
    if len(view.boxes) > 1:
        fanout_key(cfg, view)
    missing = bool(lacks)
    work = RoundWork(cfg=cfg, checkpoints={key_of(cp): cp for cp in settings.checkpoints},
                     listings={key_of(cp): listings[cp.repo] for cp in settings.checkpoints},
                     rsync_ssh=" ".join(shlex.quote(a) for a in link_ssh(cfg, FANOUT_KEY)),
                     python=f"{vllm_venv(cfg)}/bin/python", script=f"{home}/bin/fetch_checkpoint.py")
    for round_ in range(view.rounds):  # the same count on every box: round r runs everywhere before round r+1
        checkpoint_round(name=f"Round {round_} of the fleet's checkpoint fan-out (0: from the Hub; then box to box)",
                         view=view, work=work, round_=round_, missing=missing, _env=env)
    checkpoint_sources(name="Where each checkpoint came from", view=view, store=store,
                       checkpoints=settings.checkpoints, missing=missing)


def own_holdings(settings: Settings, view: FleetView) -> tuple[str, ...]:
    """Record what this box holds verified (its own markers) in the run's view; returns what it lacks, refused when
    it is AIRGAPPED and no box of the run with a route to the Hub keeps one of them."""
    store = settings.cfg.MODEL_STORE
    view.holds[host.name] = tuple(key_of(cp) for cp in settings.checkpoints
                                  if host.get_fact(File, path=cp.marker_path(store)))
    lacks = tuple(key_of(cp) for cp in settings.checkpoints if key_of(cp) not in view.holds[host.name])
    for mine in (b for b in view.boxes if b.name == host.name):
        try:
            fanout.reachable(mine, lacks, view.boxes)
        except SparkctlError as exc:
            raise Refused(f"{host.name}: {exc}") from None
    return lacks


@dataclass(frozen=True)
class RoundWork:
    """What a box's rounds need to build its fetch commands once the plan is known."""

    cfg: GroupData
    checkpoints: dict  # "repo@sha" -> LockedCheckpoint
    listings: dict  # "repo@sha" -> the lock listing's path on the box
    rsync_ssh: str  # rsync's -e: ssh with the fleet's key
    python: str
    script: str


def fetch_command(cfg: GroupData, cp: LockedCheckpoint, fetch: fanout.Fetch, listing: str, rsync_ssh: str,
                  python: str, script: str, workers: int) -> StringCommand:
    """The box's fetch_checkpoint.py for one planned fetch: a Hub download, or a copy from its sources in order
    (the Hub last, unless the box is AIRGAPPED)."""
    store = cfg.MODEL_STORE
    args = [python, script, "--listing", listing, "--marker", cp.marker_path(store), "--workers", str(int(workers))]
    boxes = [s for s in fetch.sources if s.box != fanout.HUB]
    hub = ["--cache-dir", f"{store}/hub"] if len(boxes) < len(fetch.sources) else []
    if boxes:
        snapshot = snapshot_path(store, cp)
        args += ["--copy", "--snapshot", snapshot, "--staging", f"{store}/{STAGING}/{cp.cache_dirname()}@{cp.sha}",
                 "--remote-marker", cp.marker_path(store)[len(store) + 1:],
                 "--remote-snapshot", snapshot[len(store) + 1:], "--rsync-ssh", rsync_ssh]
        if cfg.CHECKPOINT_FANOUT_BWLIMIT_KIB_S:
            args += ["--rsync-bwlimit", str(cfg.CHECKPOINT_FANOUT_BWLIMIT_KIB_S)]
        for s in boxes:
            args += ["--source", f"{s.box}={cfg.CHECKPOINT_SYNC_USER}@{s.address}"]
        if hub:
            args += ["--hub"]
    return StringCommand(*[QuoteString(a) for a in args + hub])


@operation()
def checkpoint_round(view: FleetView, work: RoundWork, round_: int, missing: bool):
    """One round of the fan-out on this box: its fetches in the run's plan, made at execution (none for a box that
    holds every checkpoint it keeps)."""
    if not missing:
        host.noop("every checkpoint this box keeps is on disk and verified")
        return
    yield FunctionCommand(_run_round, (view, work, round_), {})


def _run_round(state, host, view: FleetView, work: RoundWork, round_: int) -> bool:
    """FunctionCommand body: this box's fetches of this round, each the box's fetch_checkpoint.py."""
    try:
        fetches = view.plan().of(host.name, round_)
    except SparkctlError as exc:  # what no box of the run can provide (refused before any copy)
        host.log_styled(f"{host.name}: {exc}", fg="red", log_func=logger.error)
        return False
    for f in fetches:
        cp = work.checkpoints[f.checkpoint]
        host.log(f"{cp.repo}@{cp.sha[:12]} ({cp.total_bytes / GIB:.2f} GiB): from "
                 + ", else ".join(s.describe() for s in f.sources))
        command = fetch_command(work.cfg, cp, f, work.listings[f.checkpoint], work.rsync_ssh, python=work.python,
                                script=work.script, workers=work.cfg.HF_DOWNLOAD_WORKERS)
        ok, out = host.run_shell_command(command, **connector_args(host))
        for line in out.stderr_lines:
            host.log(line)
        if not ok:
            host.log_styled(f"{cp.repo}@{cp.sha[:12]}: not fetched (every source failed, see above)", fg="red",
                            log_func=logger.error)
            return False
    return True


def _report(state, host, view: FleetView, store: str, checkpoints: list) -> bool:
    """FunctionCommand body: read this box's markers and say where each checkpoint came from."""
    held = view.holds.get(host.name, ())
    try:
        planned = {f.checkpoint: f.sources[0] for f in view.plan().fetches if f.box == host.name}
    except SparkctlError:
        planned = {}
    lines = []
    for cp in checkpoints:
        key, label = key_of(cp), f"{cp.repo}@{cp.sha[:12]}"
        if key in held:
            lines.append(f"{label}: already there")
            continue
        ok, out = host.run_shell_command(StringCommand("cat", QuoteString(cp.marker_path(store))),
                                         **connector_args(host))
        try:
            mark = json.loads("\n".join(out.stdout_lines)) if ok else {}
        except ValueError:
            mark = {}
        source = mark.get("source", "hub") if mark else None
        if source is None:
            lines.append(f"{label}: not fetched (see the errors above)")
            continue
        where = "the Hub" if source == "hub" else f"copied from {source}"
        if isinstance(mark.get("received_bytes"), int):  # rsync's own count: less than the whole on a resumed copy
            where += f" ({mark['received_bytes'] / 1e6:.1f} MB received of {cp.total_bytes / 1e6:.1f} MB)"
        plan = planned.get(key)
        if plan is not None and source != plan.box:
            where += f" (planned: {plan.describe()}, which could not provide it)"
        lines.append(f"{label}: {where}")
    host.log(f"checkpoints: {'; '.join(lines)}")
    return True


@operation()
def checkpoint_sources(view: FleetView, store: str, checkpoints: list, missing: bool):
    """The per-box result: each checkpoint's source (the Hub, which box, or already there)."""
    if not missing:
        host.noop(f"every checkpoint already there ({len(checkpoints)})")
        return
    yield FunctionCommand(_report, (view, store, checkpoints), {})
