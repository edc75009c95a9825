"""The deploy's whole validation of one host's settings, offline: what `tasks/preflight.py` runs before the first
operation. The settings (sparkctl.config.settings), then the capacity rule (sparkctl.capacity: the memory must add
up); each raises SettingError naming the setting, the value and what is valid.
"""

from __future__ import annotations

from sparkctl.capacity import planner
from sparkctl.config import catalog
from sparkctl.config.settings import Settings, validate


def validate_host(data: dict, host_name: str = "", read_secrets: bool = True,
                  hosts: list[str] | None = None) -> Settings:
    """Settings validated, then a configuration whose memory does not add up refused (the planner's arithmetic)."""
    settings = validate(data, host_name, read_secrets=read_secrets, hosts=hosts)
    planner.check_fits(data, catalog.resolve(data.get("CATALOG_OVERRIDES")), data["CODING_MODEL"])
    return settings
