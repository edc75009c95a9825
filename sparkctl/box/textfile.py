"""On the box (stdlib only): node exporter textfile-collector files in the text exposition format.

A `.prom` file must appear whole: node exporter may read the directory at any moment, so the scripts write it with
boxio.write_atomic (a hidden temporary name that does not end in .prom, renamed over the old one).
"""

from __future__ import annotations

TEXTFILE_MODE = 0o644  # node exporter reads them as its own user


def label_value(value) -> str:
    """A label value escaped for the Prometheus text exposition format."""
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def sample(name: str, value: float, labels: dict | None = None) -> str:
    inner = ",".join(f'{k}="{label_value(v)}"' for k, v in (labels or {}).items())
    return f"{name}{{{inner}}} {value}" if inner else f"{name} {value}"


class Exposition:
    """Metric families in order: HELP and TYPE once per family, then its samples."""

    def __init__(self) -> None:
        self.families: dict[str, tuple[str, str, list[str]]] = {}

    def add(self, name: str, kind: str, help_text: str, value: float, labels: dict | None = None) -> None:
        family = self.families.setdefault(name, (kind, help_text, []))
        family[2].append(sample(name, value, labels))

    def text(self) -> str:
        lines = []
        for name, (kind, help_text, samples) in self.families.items():
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples]
        return "\n".join(lines) + "\n"
