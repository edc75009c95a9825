"""The value types of the settings schema (sparkctl/config/schema.py): each with its valid range and unit, and the
words an error message uses for what is valid (the Field description)."""

from __future__ import annotations

import ipaddress
import re
import string
from typing import Annotated

from pydantic import AfterValidator, Field


def _check(predicate, what: str):
    def check(value):
        if not predicate(value):
            raise ValueError(what)
        return value
    return AfterValidator(check)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def _is_interface(text: str) -> bool:
    try:
        ipaddress.ip_interface(text)
        return "/" in text
    except ValueError:
        return False


def _is_regex(text: str) -> bool:
    try:
        re.compile(text)
        return "'" not in text  # rendered inside '...' in earlyoom's EARLYOOM_ARGS
    except re.error:
        return False


def typed(base, description: str, *extra, **constraints):
    """A type with its valid range and the words an error message uses for it."""
    return Annotated[base, Field(description=description, **constraints), *extra]


def pattern(regex: str, description: str):
    return typed(str, description, pattern=regex)


# the placeholders the box's watchdog fills in its command settings (sparkctl/box/watchdog.py PLACEHOLDERS)
WATCHDOG_PLACEHOLDERS = ("unit", "service", "port", "served", "kind", "rollout", "limits", "peer")


def template_problem(text: str, placeholders: tuple[str, ...], needs: tuple[str, ...]) -> str:
    """What is wrong with a command template ("" when nothing): an unknown placeholder, a format spec, no `needs`."""
    try:
        parsed = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(text) if f is not None]
    except (ValueError, TypeError):
        return "an unbalanced { or }"
    for f, spec, conv in parsed:
        if f not in placeholders or spec or conv:
            return "unknown placeholder {" + f + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "") + "}"
    if not {f for f, _, _ in parsed} & set(needs):
        return f"no {' or '.join('{' + n + '}' for n in needs)}"
    return ""


def template_description(needs: tuple[str, ...], placeholders: tuple[str, ...] = WATCHDOG_PLACEHOLDERS) -> str:
    return (f"a command containing {' or '.join('{' + n + '}' for n in needs)}, with no placeholders but "
            f"{' '.join('{' + p + '}' for p in placeholders)} (a literal brace is written {{{{ or }}}})")


def command_template(needs: tuple[str, ...], placeholders: tuple[str, ...] = WATCHDOG_PLACEHOLDERS):
    """A command template: only the named placeholders (bare, no format spec), at least one of `needs`."""
    what = template_description(needs, placeholders)
    return typed(str, what, _check(lambda v: not template_problem(v, placeholders, needs), what))


Seconds = typed(float, "a number of seconds greater than 0", gt=0)
WholeSeconds = typed(int, "a whole number of seconds greater than 0", gt=0)
Count = typed(int, "a whole number greater than 0", gt=0)
GiB = typed(float, "a size in GiB greater than 0", gt=0)
GiBOrZero = typed(float, "a size in GiB >= 0", ge=0)
Port = typed(int, "an integer TCP port from 1 to 65535", ge=1, le=65535)
OomScore = typed(int, "an integer OOM score adjustment from -1000 to 1000", ge=-1000, le=1000)
Text = typed(str, "a non-empty string", min_length=1)
AbsPath = typed(str, "an absolute path other than /", _check(lambda p: p.startswith("/") and p.rstrip("/") != "",
                                                            "an absolute path other than /"))
LocalPath = typed(str, "a control-machine path (relative to the repository or absolute)", min_length=1)
Url = pattern(r"^https?://[^\s/$.?#][^\s]*$", "an http:// or https:// URL")
Version = pattern(r"^\d+(\.\d+)+$", "a version such as 13.0")
DebPackage = pattern(r"^[a-z0-9][a-z0-9+.-]+$", "a Debian package name")
PipName = pattern(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", "a pip distribution name")
IfName = pattern(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,14}$", "a network interface name (up to 15 characters)")
Name = pattern(r"^[a-z0-9][a-z0-9._-]{0,62}$", "a lower-case name usable as a URL path segment")
EnvName = pattern(r"^[A-Za-z_][A-Za-z0-9_]*$", "an environment variable name")
UnixUser = pattern(r"^[a-z_][a-z0-9_-]{0,31}$", "a system user name (lower case, up to 32 characters)")
FileName = pattern(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", "a file name without '/'")
K8sName = pattern(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", "a Kubernetes namespace (a DNS label)")
ServerNames = pattern(r"^[A-Za-z0-9_.*~:\[\]-]+( [A-Za-z0-9_.*~:\[\]-]+)*$",
                       "nginx server_name values separated by spaces (no ';', quotes or braces)")
HostName = typed(str, "a DNS name or an IP address", _check(
    lambda n: _is_ip(n) or re.fullmatch(r"[A-Za-z0-9*]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9-]{1,63})*\.?", n) is not None,
    "a DNS name or an IP address"))
Cidr = typed(str, "an address with its prefix length, e.g. 192.168.100.10/24",
             _check(_is_interface, "an address/prefix"))
IpAddress = typed(str, "an IP address", _check(_is_ip, "an IP address"))
Regex = typed(str, "a regular expression without single quotes", _check(_is_regex, "a valid regular expression"))
SystemdSize = pattern(r"^\d+(\.\d+)?[KMGT]?$|^\d+(\.\d+)?%$", "a systemd size such as 64M or a percentage")
Fraction = typed(float, "a fraction greater than 0 and at most 1", gt=0, le=1)
Percent = typed(float, "a percentage greater than 0 and below 100", gt=0, lt=100)


def list_of(item, description: str, min_length: int = 0):
    return Annotated[list[item], Field(description=description, min_length=min_length)]



DebPackages = list_of(DebPackage, "a list of Debian package names")
