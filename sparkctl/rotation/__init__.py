"""`python -m sparkctl secrets rotate|finish|status` (cli.py): the operator's rotation window of a secret. What a
window is, and what the deploy does during one, stays in sparkctl/config/rotation.py; this reads the settings as
every command does, so it stands above sparkctl.check.

May import: sparkctl.config, sparkctl.check.load (how every command reads the settings), sparkctl.errors.
"""
