"""What the operator wrote, read and validated: group data, the settings and their schema, the catalog, the lock,
secrets, the generated PKI, the inventory's hosts and the two-Spark topology.

May import: sparkctl.errors and the standard library / third-party libraries. Nothing else in sparkctl: every
other folder builds on this one.
"""
