"""On the box (stdlib only): write node exporter textfile-collector files the way it requires.

A `.prom` file must appear whole: node exporter may read the directory at any moment, so each file is written to
a temporary name in the same directory and renamed over the old one (atomic on one filesystem).
"""

from __future__ import annotations

import os
import tempfile


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


def write_atomic(path: str, text: str, mode: int = 0o644) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".prom.part", dir=directory)  # not *.prom: never collected
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
