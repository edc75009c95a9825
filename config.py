"""pyinfra configuration for this repository (read by the CLI before the inventory)."""

from pyinfra import config  # noqa: F401

config.REQUIRE_PYINFRA_VERSION = "~=3.10"
