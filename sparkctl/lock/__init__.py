"""`python -m sparkctl lock refresh|show` (cli.py): the lock's commands. refresh.py asks the Hub (or HF_ENDPOINT)
what each catalog revision points at now and rewrites models.lock.json: the only part of the lock that talks to the
network. What the lock holds and how the deploy reads it stays in sparkctl/config/lock.py; these read the settings
as every command does, so they stand above sparkctl.check.

May import: sparkctl.config, sparkctl.check.load (how every command reads the settings), sparkctl.errors,
sparkctl.box.boxio (the one atomic write).
"""
