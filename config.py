"""pyinfra configuration for this repository (read by the CLI before the inventory and the group data).

It also reads group_data/*.py the way pyinfra is about to, first: pyinfra would end a file that does not parse, or
is not UTF-8, in a traceback, and wait forever on one that is a FIFO; here each is a clean refusal naming the file
and the line (sparkctl/config/groupdata.py).
"""

from pathlib import Path

from pyinfra import config  # noqa: F401

from sparkctl.config.groupdata import check_dir
from sparkctl.errors import SparkctlError

config.REQUIRE_PYINFRA_VERSION = "~=3.10"

try:
    check_dir(Path.cwd() / "group_data")
except SparkctlError as _exc:
    raise SystemExit(f"sparkctl: {_exc} (nothing was changed on any host)") from None
