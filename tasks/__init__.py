"""pyinfra glue: one importable @deploy function per step, called in order by deploy.py.

The steps and their order are deploy.py's (its docstring lists them). Each takes the host's Settings, built once by
the check layer (preflight.settings_for_host: sparkctl.check.validate_host) and read as `settings.cfg.SETTING`. The
logic they apply lives in the sparkctl package; these modules only turn it into operations.
"""
