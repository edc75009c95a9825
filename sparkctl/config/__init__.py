"""What the operator wrote, read and validated: group data, the settings and their schema (typed once into
settings.HostConfig / Settings), the catalog, the lock, secrets, the generated PKI, the inventory's hosts, the
two-Spark topology, and the units of measure every module imports (quantities.py).

May import: sparkctl.errors, sparkctl.box.boxio (the one atomic write, a stdlib-only leaf both sides share) and the
standard library / third-party libraries. Nothing else in sparkctl: every other folder builds on this one (the
lock's commands, which read the settings as every command does, are sparkctl/lock/).
"""
