"""Versioned workloads for the probe and the acceptance checks: data files beside this module, no downloads.

A workload file is `<name>-v<version>.json` with {"name", "version", "description", "prompts": [...]}. A result
is only comparable with another of the same name and version; any change to a prompt is a new version file.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from sparkctl.errors import SettingError

WORKLOAD_DIR = Path(__file__).resolve().parent
DEFAULT_WORKLOAD = "codegen-v1"


@dataclass(frozen=True)
class Workload:
    name: str
    version: int
    description: str
    prompts: tuple[str, ...]
    sha256: str  # of the file's prompts, so a silently edited file shows up in the record

    @property
    def label(self) -> str:
        return f"{self.name}-v{self.version}"

    def prompt(self, i: int) -> str:
        """The i-th request's prompt: round-robin over the set."""
        return self.prompts[i % len(self.prompts)]

    def to_dict(self) -> dict:
        return {"name": self.name, "version": self.version, "prompts": len(self.prompts), "sha256": self.sha256}


def available() -> list[str]:
    return sorted(p.stem for p in WORKLOAD_DIR.glob("*-v*.json"))


def load(label: str = DEFAULT_WORKLOAD) -> Workload:
    """A workload by `<name>-v<version>` (e.g. codegen-v1), or a path to such a JSON file."""
    path = Path(label)
    if not path.suffix == ".json" or not path.exists():
        path = WORKLOAD_DIR / f"{label}.json"
    if not path.exists():
        raise SettingError("--workload", label, available())
    raw = json.loads(path.read_text())
    prompts = tuple(raw["prompts"])
    if not prompts or not all(isinstance(p, str) and p for p in prompts):
        raise SettingError("--workload", label, "a workload file with a non-empty list of prompt strings")
    m = re.fullmatch(r"(.+)-v(\d+)", path.stem)
    if m and (m.group(1) != raw["name"] or int(m.group(2)) != int(raw["version"])):
        raise SettingError("--workload", str(path), f"a file named {raw['name']}-v{raw['version']}.json")
    digest = hashlib.sha256(json.dumps(prompts, ensure_ascii=False).encode()).hexdigest()
    return Workload(name=raw["name"], version=int(raw["version"]), description=raw.get("description", ""),
                    prompts=prompts, sha256=digest)
