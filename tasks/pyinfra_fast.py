"""Two of pyinfra's own functions made cheap, with the same results (not a step): installed only onto the pyinfra
version requirements.txt pins, whose code they were written against.

Why: pyinfra prepares every host's operations on one interpreter (gevent greenlets under the GIL), so whatever an
operation costs the control machine is paid once per operation per host, in series. In CLI mode pyinfra orders
each operation by the line numbers of its call stack from the deploy file down
(pyinfra.api.util.get_operation_order_from_stack). It reads them through inspect.stack(), which finds the module
and reads the source line of every frame, then calls getframeinfo() on every frame again; only each frame's file
name and line number are used. Profiled over 1, 3 and 8 @fake hosts (scripts/fleet_control_cost.py), that was
the largest per-host cost of a deploy, about half of it: 5-10 ms an operation, 90 operations a host. And pyinfra
resolves the type hints of its global-argument classes (all_global_arguments: typing.get_type_hints) for every
operation and fact call, though they never change during a run. With both replaced (and the check's own repeats
gone) the @fake CPU per extra host fell from about 1.0 s to 0.35 s.

operation_order_from_stack walks the same frames from sys._getframe() and reads each one's file name
(f_code.co_filename: what getframeinfo returns for any frame whose code is not named after a bytecode file; those
few are still asked through getframeinfo) and line number (f_lineno: the line of the instruction the frame
is at, which getframeinfo reads from the same location table), skipping pyinfra's own frames exactly as the
original does. global_arguments computes pyinfra's list once and hands out copies. install() puts both where
pyinfra looks them up; on any other pyinfra version it leaves pyinfra's own in place and logs why.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.metadata
import inspect
import sys
from functools import cache

import pyinfra
from packaging.requirements import Requirement
from pyinfra import logger
from pyinfra.api import arguments, facts, util
from pyinfra.api.util import PYINFRA_INSTALL_DIR

from sparkctl import REPO_ROOT

_BYTECODE_SUFFIXES = tuple(importlib.machinery.DEBUG_BYTECODE_SUFFIXES
                           + importlib.machinery.OPTIMIZED_BYTECODE_SUFFIXES)
# the module itself: the package's `pyinfra.api.operation` is the @operation decorator
_OPERATION_MODULE = importlib.import_module("pyinfra.api.operation")
_ORIGINAL_ORDER = util.get_operation_order_from_stack
_ORIGINAL_ARGUMENTS = arguments.all_global_arguments


def _file_and_line(frame) -> tuple[str, int]:
    """A frame's file name and line number as inspect.getframeinfo gives them."""
    filename = frame.f_code.co_filename
    if filename.endswith(_BYTECODE_SUFFIXES):  # getframeinfo looks for the source file of these
        info = inspect.getframeinfo(frame, context=0)
        return info.filename, info.lineno
    return filename, frame.f_lineno


def operation_order_from_stack(state) -> list[int]:
    """pyinfra.api.util.get_operation_order_from_stack, without inspect.stack(): the same list."""
    frames = []
    frame = sys._getframe(1)  # the original's own frame, innermost in its stack, is pyinfra's and never counts
    while frame is not None:
        frames.append(_file_and_line(frame))
        frame = frame.f_back
    frames.reverse()
    frames.append((PYINFRA_INSTALL_DIR, 0))  # where the original's own frame stands (the loop below may end on it)

    start = 0
    if state.current_deploy_filename:  # the first (outermost) frame of the deploy file
        for start, (filename, _line) in enumerate(frames):
            if filename == state.current_deploy_filename:
                break

    line_numbers = [state.current_op_file_number] if pyinfra.is_cli else []
    line_numbers += [line for filename, line in frames[start:] if not filename.startswith(PYINFRA_INSTALL_DIR)]
    return line_numbers


@cache
def _global_arguments() -> tuple[tuple[str, type], ...]:
    return tuple(_ORIGINAL_ARGUMENTS())


def global_arguments() -> list[tuple[str, type]]:
    """pyinfra.api.arguments.all_global_arguments, computed once: a fresh list each call, as the original gives."""
    return list(_global_arguments())


def pinned_version() -> str | None:
    """The pyinfra version requirements.txt pins with ==, or None."""
    for line in (REPO_ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            req = Requirement(line)
            pins = [spec.version for spec in req.specifier if spec.operator == "=="]
            if req.name.lower() == "pyinfra" and len(pins) == 1:
                return pins[0]
    return None


def install(installed: str | None = None) -> bool:
    """Put the cheap functions where pyinfra looks them up, if this is the pinned pyinfra (else log why not)."""
    installed = installed or importlib.metadata.version("pyinfra")
    pinned = pinned_version()
    if installed != pinned:
        logger.info(f"pyinfra {installed} is not the pinned {pinned} (requirements.txt): its own operation-order "
                    f"and global-argument functions stay in place (tasks/pyinfra_fast.py was written against "
                    f"{pinned})")
        return False
    # each name replaced only while it is pyinfra's own: every host runs deploy.py, and a test may put its own
    if _OPERATION_MODULE.get_operation_order_from_stack is _ORIGINAL_ORDER:
        _OPERATION_MODULE.get_operation_order_from_stack = operation_order_from_stack
    for module in (arguments, facts):
        if module.all_global_arguments is _ORIGINAL_ARGUMENTS:
            module.all_global_arguments = global_arguments
    return True
