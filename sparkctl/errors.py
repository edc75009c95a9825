"""Errors an operator sees: each names the setting, the value and what would be valid."""

from __future__ import annotations


class SparkctlError(Exception):
    """Base for refusals that must stop a deploy before the host is touched."""


class SettingError(SparkctlError):
    def __init__(self, setting: str, value, valid, hint: str = ""):
        self.setting, self.value, self.valid = setting, value, valid
        if isinstance(valid, (list, tuple, set)):
            valid_text = "one of " + ", ".join(str(v) for v in valid) if valid else "(nothing is configured)"
        else:
            valid_text = str(valid)
        msg = f"{setting} = {value!r} is not valid; expected {valid_text}"
        if hint:
            msg += f". {hint}"
        super().__init__(msg)


def __getattr__(name: str):
    """`Refused`: a deploy step's refusal, raised while pyinfra prepares (before any command reaches the box).

    pyinfra stops a deploy cleanly (one red line, no traceback) only on its own PyinfraError, so Refused subclasses
    it as well as SparkctlError. It is built on first use (PEP 562): the rest of sparkctl never imports pyinfra."""
    if name != "Refused":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from pyinfra.api.exceptions import PyinfraError

    class Refused(SparkctlError, PyinfraError):
        """A check failed before the host was changed."""

    Refused.__module__, Refused.__qualname__ = __name__, "Refused"
    globals()["Refused"] = Refused
    return Refused
