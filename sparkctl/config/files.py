"""Files on the control machine read defensively: the secrets, the TLS pair, the lock, the group data.

A path is opened without following it into a FIFO (O_NONBLOCK: opening a FIFO must not wait for a writer) and
refused unless the opened file is a regular file of a sane size; a symlink under the secrets directory must stay in
it; text must be UTF-8. Each refusal is a SettingError naming the setting (or file) and saying what it is instead.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from sparkctl.errors import SettingError

MAX_BYTES = 1024 * 1024  # no file the deploy reads here (token, key, certificate chain, lock, group data) is bigger

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def check_inside(path: Path, root: Path, setting: str) -> None:
    """A file named below `root` (the secrets directory) must resolve below it: a symlink out of it is refused (a
    secret would be read from wherever it points, and written nowhere the operator looks)."""
    try:
        resolved, base = path.resolve(), root.resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise SettingError(setting, str(path), "a file inside the secrets directory", str(exc)) from None
    if path.is_symlink() and base not in resolved.parents:
        raise SettingError(setting, str(path), f"a file inside the secrets directory {root}",
                           f"It is a symlink to {resolved}, outside it: copy the file in (mode 0600)")


def read_bytes(path: Path, setting: str, what: str, max_bytes: int = MAX_BYTES) -> tuple[bytes, os.stat_result]:
    """(content, its stat) of a regular file; FileNotFoundError when it does not exist (callers say what to do)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise SettingError(setting, str(path), what, exc.strerror or str(exc)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SettingError(setting, str(path), what, f"It is {_kind(st.st_mode)}, not a regular file")
        if st.st_size > max_bytes:
            raise SettingError(setting, str(path), what, f"It is {st.st_size:,} bytes: more than {max_bytes:,}")
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks), st
    except OSError as exc:
        raise SettingError(setting, str(path), what, exc.strerror or str(exc)) from None
    finally:
        os.close(fd)


def read_text(path: Path, setting: str, what: str, how: str = "") -> tuple[str, os.stat_result]:
    """A regular file's UTF-8 text; how: how to make a good one, said when the file is not text."""
    data, st = read_bytes(path, setting, what)
    try:
        return data.decode("utf-8"), st
    except UnicodeDecodeError as exc:
        raise SettingError(setting, str(path), what, f"It is not UTF-8 text (byte {exc.start}: "
                                                     f"{data[exc.start:exc.start + 1]!r}){'. ' + how if how else ''}"
                           ) from None


def check_regular(path: Path, setting: str, what: str) -> None:
    """The path, if it exists, is a regular file (stat only: nothing is opened)."""
    try:
        st = os.stat(path)
    except OSError:
        return  # missing or unreadable: the reader says so
    if not stat.S_ISREG(st.st_mode):
        raise SettingError(setting, str(path), what, f"It is {_kind(st.st_mode)}, not a regular file")
