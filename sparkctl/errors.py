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
