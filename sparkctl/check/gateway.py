"""The gateway's whole validation, offline -> Gateway: what tasks/gateway.py runs before its first operation, and
what `python -m sparkctl check` (check/cli.py) runs for every GATEWAY_HOSTS host without touching one.

In order: a gateway needs a gx10 box; every box passes its own validation (check/validate.py, without secrets) and
gives the pools their workers (the API services of each box that serves one); the gateway's own settings (the first
box's group data under the gateway host's own, as the deploy merges them); then the refusals below, each a
SettingError naming the setting, the value and what is valid:

  - the gateway is a tensor-parallel pair's worker (SPARK_TOPOLOGY = "tensor-parallel" and TP_HEAD, or a FLEET_POOLS
    pool with "tensor_parallel"): a worker serves no API, runs no nginx of its own, and restarts with its pair. A
    pair's head may be the gateway: it serves the API behind its own nginx already, and its ports (TP_MASTER_PORT,
    RAY_PORT among them) are checked against the gateway's below as any box's are (not Ray's dashboard on a Ray
    head, 127.0.0.1:8265: Ray's default, no setting);
  - two of the gateway's ports equal: each of the four router port ranges (one port per served model, in name
    order, from ROUTER_PORT_BASE, ROUTER_METRICS_PORT_BASE, ROUTER_STANDBY_PORT_BASE and
    ROUTER_STANDBY_METRICS_PORT_BASE), ROUTER_BRIDGE_PORT and GATEWAY_FRONT_PORT; a range running past 65535;
  - one of them sshd's (22, and the port the deploy connects to);
  - on a box that is the gateway too: one of them the box's own (check/rules.py `service_ports`: PROXY_PORT,
    CODER_PORT, EMBEDDER_PORTS, TP_MASTER_PORT, RAY_PORT, NODE_EXPORTER_PORT); ROUTER_USER equal to SERVICE_USER
    (vLLM would open the bridge, which adds the boxes' token); ROUTER_HOME one of the box's deploy directories, or
    nested with one;
  - ROUTER_RETRY_INITIAL_BACKOFF_MS above ROUTER_RETRY_MAX_BACKOFF_MS;
  - a box's ROUTER_OUT_WAIT_S below the routers' health window, 0 included (check/rules.py router_out_wait_behind);
  - (`check` only, over the whole group) GATEWAY_HOSTS naming one host twice, in any case;
  - two front doors (docs/two-front-doors.md): VRRP_ROUTER_ID outside 1-255; with GATEWAY_VIP set, no
    GATEWAY_VIP_INTERFACE, a VIP outside the subnet (GATEWAY_VIP_PREFIX_LEN) of a gateway's address, a VIP that is
    a host's own address (a box's or a gateway's) or its subnet's network or broadcast address, a last gateway's
    VRRP priority below 1, the VRRP password missing from secrets/ (naming the file to create); and every gateway
    on the same front: one GATEWAY_FRONT_PORT, one CA, one VIP, router id and password (per-host data may differ:
    a host's own data in the inventory, e.g. the simulated Spark's hosts.json).

Of two clashing settings, the refusal names the one the operator changed (rules.Shipped.blame) and the other.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from sparkctl.check import rules
from sparkctl.check.load import host_config, shipped
from sparkctl.check.validate import validate_host
from sparkctl.config import box_paths, schema, secrets
from sparkctl.config.schema import GroupData
from sparkctl.config.settings import HostConfig, Settings
from sparkctl.errors import SettingError
from sparkctl.fleet import placement, pools
from sparkctl.render import router

MAX_PORT = 65535  # TCP's highest port number
ROUTER_RANGES = ("ROUTER_PORT_BASE", "ROUTER_METRICS_PORT_BASE", "ROUTER_STANDBY_PORT_BASE",
                 "ROUTER_STANDBY_METRICS_PORT_BASE")  # one port per served model each, from the base up
GATEWAY_PORTS = ("ROUTER_BRIDGE_PORT", "GATEWAY_FRONT_PORT")  # one port each


@dataclass(frozen=True)
class Gateway:
    config: HostConfig  # the gateway's settings: the first box's group data under the gateway host's own
    pools: list[router.Pool]  # one per served model, in name order
    beside_box: bool  # the gateway host is a gx10 box too (one nginx for the box's proxy and the front)
    warnings: tuple[str, ...] = ()  # what `check` prints and the deploy logs, without refusing


def validate_gateway(name: str, own: Mapping, boxes: Mapping[str, Mapping],
                     host_models: dict[str, str] | None = None, gateways: Mapping[str, Mapping] | None = None,
                     read_secrets: bool = True) -> Gateway:
    """Everything the gateway step checks before touching its host; raises SettingError on the first refusal.
    name: the gateway's inventory name; own: its merged data (pyinfra's host.data: a box's whole data when it is
    one); boxes: every gx10 host's merged data, in inventory order; host_models: the CODING_MODEL a box's own host
    data sets (SPARK_CODING_MODELS); gateways: every gateway's own data in GATEWAY_HOSTS order (default: this one
    alone); read_secrets: False leaves the VRRP password unread."""
    if not boxes:
        raise SettingError("GX10_HOSTS", "", "at least one gx10 box for the gateway's routers to reach",
                           f"GATEWAY_HOSTS names {name}, whose routers would have no workers")
    names = list(boxes)
    checked = {box: validate_host(dict(data), box, read_secrets=False, hosts=names, host_models=host_models)
               for box, data in boxes.items()}
    merged = {**boxes[names[0]], **own}
    config = host_config(merged, name)
    not_a_worker(config.cfg, name, names, host_models)
    pool_list = router.pools(config.cfg, [_members(box, s) for box, s in checked.items()])
    box_cfg = checked[name].cfg if name in checked else None
    ports_apart(config.cfg, len(pool_list), schema.ssh_port(merged), box_cfg)
    if box_cfg is not None:
        accounts_apart(config.cfg, box_cfg, name)
        homes_apart(config.cfg, box_cfg, name)
    retry_backoff(config.cfg)
    for box, settings in checked.items():
        rules.router_out_wait_behind(box, settings.cfg, name, config.cfg)
    doors = {g: host_config({**boxes[names[0]], **data}, g) for g, data in (gateways or {name: own}).items()}
    doors[name] = config
    front_doors(config.cfg, doors, {box: s.address for box, s in checked.items()}, read_secrets)
    return Gateway(config, pool_list, name in checked, lone_vip(config.cfg, list(doors)))


def unique_gateways(names: list[str]) -> None:
    """GATEWAY_HOSTS names each host once (the inventory's `gateway` group is a list of hosts); a host name is a DNS
    name, whose case does not matter: GW-1 and gw-1 are one host, two deploys of one front door racing each other."""
    for i, name in enumerate(names):
        same = next((n for n in names[:i] if n.lower() == name.lower()), None)
        if same is not None:
            twice = f"{name} is listed twice" if same == name else f"{same} and {name} are one host (a host name's " \
                                                                     "case does not matter)"
            raise SettingError("GATEWAY_HOSTS", ",".join(names), "each host once", twice)


def accounts_apart(cfg: GroupData, box: GroupData, name: str) -> None:
    """On a host that is a box and a gateway, the routers' account is not vLLM's: the bridge's firewall lets
    ROUTER_USER alone open the bridge, which adds the boxes' bearer token; vLLM running as that account could
    reach every box with the token (docs/two-front-doors.md)."""
    if cfg.ROUTER_USER == box.SERVICE_USER:
        (setting, value), (other, _) = shipped().blame(("ROUTER_USER", cfg.ROUTER_USER),
                                                       ("SERVICE_USER", box.SERVICE_USER))
        raise SettingError(setting, value, f"an account other than {other}'s ({name} is a box and the gateway: the "
                           "routers' account and vLLM's each their own)",
                           "The bridge's firewall lets ROUTER_USER alone open the bridge, which adds the boxes' bearer "
                           "token: vLLM's services would reach every box with it")


def homes_apart(cfg: GroupData, box: GroupData, name: str) -> None:
    """On a host that is a box and a gateway, ROUTER_HOME is none of the box's deploy directories, nor inside or
    around one: each has its own owner and mode, and the box prunes its venvs (SPARKCTL_HOME/venvs) by its own
    count, which would take the routers' venvs with them."""
    for setting, what in rules.DEPLOY_DIRS.items():
        if box_paths.nested(cfg.ROUTER_HOME, getattr(box, setting)):
            raise SettingError("ROUTER_HOME", cfg.ROUTER_HOME, f"a directory apart from {setting}'s "
                               f"({getattr(box, setting)}), neither inside nor around it ({name} is a box and the "
                               "gateway)", f"{setting} holds {what}")


def lone_vip(cfg: GroupData, gateways: list[str]) -> tuple[str, ...]:
    """A VIP with one gateway moves nowhere: keepalived runs, clients use the VIP, and nothing takes it over."""
    if cfg.GATEWAY_VIP and len(gateways) == 1:
        return (f"GATEWAY_VIP = {cfg.GATEWAY_VIP} with one gateway ({gateways[0]}): no other front door takes the VIP "
                "over when this one fails; add a second host to GATEWAY_HOSTS, or leave GATEWAY_VIP empty",)
    return ()


def _members(box: str, s: Settings) -> tuple[str, str, int, list]:
    """What router.pools reads of a box: its name, address, proxy port and the API services behind its proxy."""
    return box, s.address, s.cfg.PROXY_PORT, [v for v in s.services if not v.headless] if s.role.serves_api else []


def not_a_worker(cfg: GroupData, name: str, hosts: list[str], host_models: dict[str, str] | None) -> None:
    """The gateway is no tensor-parallel pair's worker (this module's docstring says why, and why a head may be)."""
    if name not in hosts:
        return
    fleet = placement.place(pools.from_settings(cfg, hosts, host_models), hosts)
    if fleet.role(name) != "worker":
        return
    placed = fleet.pool_of(name)
    head = next(u[0] for u in placed.units if name in u)
    workers = [b for b in fleet.hosts if fleet.role(b) == "worker"]
    where = ("SPARK_TOPOLOGY = 'tensor-parallel'; TP_HEAD names the head, else the first host"
             if placed.pool.setting == pools.COMPAT else placed.pool.setting)
    raise SettingError("GATEWAY_HOSTS", name, f"a host that is no tensor-parallel worker (not {', '.join(workers)}): "
                       f"the head {head}, another box or a host of its own",
                       f"{name} is the worker of {head}'s pair ({where}); a worker serves no API, runs no nginx, "
                       f"and restarts with its pair")


def gateway_ports(cfg: GroupData, served: int) -> list[tuple[str, int, int]]:
    """Every port the gateway listens on: (setting, its value, offset), the router ranges one port per served
    model (offset 0, 1, ...), then the bridge, the front and (with a VIP) the front's health page."""
    out = [(n, getattr(cfg, n), i) for n in ROUTER_RANGES for i in range(served)]
    health = ("FRONT_HEALTH_PORT",) if cfg.GATEWAY_VIP else ()  # the health page keepalived's check asks
    return out + [(n, getattr(cfg, n), 0) for n in (*GATEWAY_PORTS, *health)]


def _label(name: str, value: int, offset: int) -> str:
    return f"{name} + {offset} = {value + offset}" if offset else f"{name} = {value}"


def ports_apart(cfg: GroupData, served: int, ssh_port: int, box: GroupData | None = None) -> None:
    """The gateway's ports pairwise distinct, below 65536, none sshd's, none the box's when it is one too."""
    known = shipped()
    taken: dict[int, tuple[str, int, int]] = {}
    for item in gateway_ports(cfg, served):
        name, base, offset = item
        port = base + offset
        if port > MAX_PORT:
            raise SettingError(name, base, f"a base leaving room for {served} served models below {MAX_PORT + 1}")
        if port in taken:
            (name, value), (other, _) = known.blame(taken[port][:2], item[:2])
            clash = f"{_label(*taken[port])} and {_label(*item)} are one port"
            raise SettingError(name, value, f"a port apart from {other}'s ({served} served models: {clash})",
                               "Each router, the bridge and the front listen on a port of their own")
        taken[port] = item
    _not_sshd(taken, ssh_port)
    if box is not None:
        _not_the_box(taken, box)


def _not_sshd(taken: dict[int, tuple[str, int, int]], ssh_port: int) -> None:
    sshd = " and ".join(map(str, sorted({22, ssh_port})))
    for port in sorted({22, ssh_port} & set(taken)):
        name, value, offset = taken[port]
        where = f": {_label(name, value, offset)}" if offset else ""
        raise SettingError(name, value, f"a port other than sshd's ({sshd}){where}",
                           "sshd listens there: the gateway on it would lock the operator out")


def _not_the_box(taken: dict[int, tuple[str, int, int]], box: GroupData) -> None:
    """A box that is the gateway too: no gateway port is one of the box's own."""
    for box_setting, port in rules.service_ports(box):
        if port in taken:
            gateway_setting, base, offset = taken[port]
            # the gateway's setting, unless only the box's was changed
            (name, value), (other, _) = shipped().blame((box_setting, port), (gateway_setting, base))
            raise SettingError(name, value, f"a port apart from {other}'s (this box is the gateway too: "
                               f"{_label(gateway_setting, base, offset)} and {box_setting} = {port} are one port)",
                               "One host, one listener per port")


def retry_backoff(cfg: GroupData) -> None:
    if cfg.ROUTER_RETRY_INITIAL_BACKOFF_MS > cfg.ROUTER_RETRY_MAX_BACKOFF_MS:
        (name, value), (other, other_value) = shipped().blame(
            ("ROUTER_RETRY_INITIAL_BACKOFF_MS", cfg.ROUTER_RETRY_INITIAL_BACKOFF_MS),
            ("ROUTER_RETRY_MAX_BACKOFF_MS", cfg.ROUTER_RETRY_MAX_BACKOFF_MS))
        bound = "at most" if name == "ROUTER_RETRY_INITIAL_BACKOFF_MS" else "at least"
        raise SettingError(name, value, f"{bound} {other} = {other_value} ms",
                           "The router's first wait before a retry cannot be longer than its longest")


# --- two front doors, one service (docs/two-front-doors.md) ------------------------------------------------------
VRRP_IDS = range(1, 256)  # VRRP's virtual router ids (RFC 5798: 1-255)
SAME_ON_EVERY_GATEWAY = ("GATEWAY_FRONT_PORT", "GATEWAY_VIP", "GATEWAY_VIP_PREFIX_LEN", "VRRP_ROUTER_ID",
                         "VRRP_PASSWORD_FILE")  # one front: what clients and VRRP see must not differ by gateway


def front_doors(cfg: GroupData, doors: Mapping[str, HostConfig], boxes: Mapping[str, str],
                read_secrets: bool = True) -> None:
    """The front doors' rules; doors: every gateway's settings (GATEWAY_HOSTS order), boxes: each box's address."""
    vrrp_router_id(cfg)
    agree(doors)
    if not cfg.GATEWAY_VIP:
        return
    if not cfg.GATEWAY_VIP_INTERFACE:
        raise SettingError("GATEWAY_VIP_INTERFACE", "", "the gateways' network interface that carries the VIP, "
                           "e.g. enP7s7 (ip -br addr on a gateway)", f"GATEWAY_VIP = {cfg.GATEWAY_VIP} is set")
    vip_in_subnet(cfg, {g: c.address for g, c in doors.items()}, {**boxes, **{g: c.address for g, c in doors.items()}})
    priorities(cfg, len(doors))
    if read_secrets:
        secrets.read_vrrp_password(cfg)


def vrrp_router_id(cfg: GroupData) -> None:
    if cfg.VRRP_ROUTER_ID not in VRRP_IDS:
        raise SettingError("VRRP_ROUTER_ID", cfg.VRRP_ROUTER_ID, f"a VRRP virtual router id from {VRRP_IDS[0]} to "
                           f"{VRRP_IDS[-1]}, unique on the gateways' network segment")


def _ip(text: str):
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None  # a DNS name: its address is not known offline


def vip_in_subnet(cfg: GroupData, gateways: Mapping[str, str], hosts: Mapping[str, str]) -> None:
    """The VIP inside every gateway's subnet (VRRP moves it on one segment), none of the hosts' own addresses, not
    its subnet's network or broadcast address. Gateways known by a DNS name are not checked (no lookup offline)."""
    vip = ipaddress.ip_address(cfg.GATEWAY_VIP)
    net = ipaddress.ip_network(f"{vip}/{cfg.GATEWAY_VIP_PREFIX_LEN}", strict=False)
    for g, address in gateways.items():
        ip = _ip(address)
        if ip is not None and ip not in net:
            raise SettingError("GATEWAY_VIP", cfg.GATEWAY_VIP, f"an unused address in {g}'s subnet: inside "
                               f"{ipaddress.ip_network(f'{ip}/{cfg.GATEWAY_VIP_PREFIX_LEN}', strict=False)} "
                               f"(GATEWAY_VIP_PREFIX_LEN = {cfg.GATEWAY_VIP_PREFIX_LEN})",
                               f"{g} is {address}: VRRP moves the VIP between gateways on one network segment")
    for h, address in hosts.items():
        if _ip(address) == vip:
            raise SettingError("GATEWAY_VIP", cfg.GATEWAY_VIP, f"an address in {net} that no host uses",
                               f"{h}'s own address is {address}")
    if net.num_addresses > 2 and vip in (net.network_address, net.broadcast_address):
        raise SettingError("GATEWAY_VIP", cfg.GATEWAY_VIP, f"a host address in {net} (not its network or "
                           "broadcast address)")


def priorities(cfg: GroupData, gateways: int) -> None:
    """Every gateway's VRRP priority at 1 or more: VRRP_PRIORITY_FIRST minus VRRP_PRIORITY_STEP per gateway."""
    last = cfg.VRRP_PRIORITY_FIRST - (gateways - 1) * cfg.VRRP_PRIORITY_STEP
    if last < 1:
        raise SettingError("VRRP_PRIORITY_STEP", cfg.VRRP_PRIORITY_STEP, f"at most "
                           f"{(cfg.VRRP_PRIORITY_FIRST - 1) // max(1, gateways - 1)} for {gateways} gateways",
                           f"the last gateway's priority would be {cfg.VRRP_PRIORITY_FIRST} - {gateways - 1} x "
                           f"{cfg.VRRP_PRIORITY_STEP} = {last}; VRRP's lowest is 1")


def ca_of(cfg: GroupData) -> str:
    """The CA clients verify a front door with: the generated one in SECRETS_DIR, or the issuer of the operator's
    certificate (two gateways may hold two certificates from one CA)."""
    if not cfg.TLS_CERT_FILE:
        return f"the generated CA in {secrets.secrets_dir(cfg) / 'pki'}"
    try:
        chain = x509.load_pem_x509_certificates(secrets.tls_file(cfg.TLS_CERT_FILE).read_bytes())
    except (OSError, ValueError):
        return f"the CA of {cfg.TLS_CERT_FILE}"
    leaf = chain[0]
    issuer = next((c for c in chain[1:] if c.subject == leaf.issuer), None)
    if issuer is not None:  # the issuer's own key: two CAs of one name are still two CAs
        key = issuer.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
        return f"the CA {leaf.issuer.rfc4514_string()} (key sha256 {hashlib.sha256(key).hexdigest()[:16]})"
    try:
        aki = leaf.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value.key_identifier
    except x509.ExtensionNotFound:
        aki = None
    return f"the CA {leaf.issuer.rfc4514_string()}" + (f" (key id {aki.hex()})" if aki else "")


def agree(doors: Mapping[str, HostConfig]) -> None:
    """Every gateway on one front: the settings clients and VRRP see, and the CA, equal on each."""
    if len(doors) < 2:
        return
    (first, ref), *others = doors.items()
    for g, c in others:
        for setting in SAME_ON_EVERY_GATEWAY:
            mine, theirs = getattr(c.cfg, setting), getattr(ref.cfg, setting)
            if mine != theirs:
                raise SettingError(setting, mine, f"{theirs!r}, as on {first}: every gateway serves one front",
                                   f"{g}'s own data sets {setting} = {mine!r}, {first}'s {theirs!r}")
        if ca_of(c.cfg) != ca_of(ref.cfg):
            raise SettingError("TLS_CERT_FILE", c.cfg.TLS_CERT_FILE, f"a certificate from {ca_of(ref.cfg)}, as on "
                               f"{first}: clients verify every front door with one CA",
                               f"{g}'s is from {ca_of(c.cfg)}")
