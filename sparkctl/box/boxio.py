"""On the box (stdlib only; imported by the other box scripts): reading and writing the box's own files.

One atomic write for every file a box script writes (the rollout's state, snapshot, stamp and result, the verdict,
the drain file, the watchdog's state, the textfiles, the verified checkpoint marker): a temporary name in the same
directory, CREATED with its final mode (os.open: a file that holds the acceptance probe key or an env file is never
readable by others, not even for an instant), fsynced, then renamed over the old one. A reader sees the old file or
the new one, never half of one; a crash leaves at most a hidden temporary file, which nothing reads.

And the one log writer of a box run (Say: the rollout's transaction log, the retire's log).
"""

from __future__ import annotations

import json
import os
import sys
import time


def read(path: str) -> bytes:
    """The file's bytes, or b"" when it does not exist."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except (FileNotFoundError, NotADirectoryError):
        return b""


def read_json(path: str) -> dict:
    """The file's JSON object, or {} when it does not exist or is not JSON."""
    try:
        value = json.loads(read(path) or b"{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def write_atomic(path: str, data: bytes | str, mode: int = 0o600) -> None:
    """path := data, created with exactly `mode`, fsynced and renamed into place. The temporary name is hidden (a
    leading dot) and ends in .tmp: no glob a reader uses (nginx's <served>.conf*, node exporter's *.prom) matches it."""
    directory, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    try:
        os.fchmod(fd, mode)  # os.open's mode is filtered by the umask: set it exactly, before any byte is written
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(path: str, obj: dict, mode: int = 0o600) -> None:
    write_atomic(path, json.dumps(obj, indent=1, sort_keys=True) + "\n", mode)


class Say:
    """Log lines to a run's log file and to stdout (the journal of its transient unit); neither a failed write nor a
    closed or broken stdout ever stops the run (a rollback must finish whatever the log does)."""

    def __init__(self, path: str):
        self.path = path

    def __call__(self, message: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {message}\n"
        try:
            with open(self.path, "a") as f:
                f.write(line)
        except OSError:
            pass
        try:
            sys.stdout.write(line)
            sys.stdout.flush()
        except (OSError, ValueError, AttributeError):
            pass
