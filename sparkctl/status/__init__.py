"""`python -m sparkctl status`: the fleet at a glance, read live from each box over one ssh round trip.

A folder of its own: it is neither a measurement (measure/) nor something written to a box (render/); it reads
what the deployed boxes report about themselves (sparkctl/box/status_probe.py, piped to the box's python3).

May import: sparkctl.config, sparkctl.check.load (how every command reads the settings), sparkctl.errors,
sparkctl.box.contract (the box's file layout, sent to the probe; and
refers to sparkctl/box/status_probe.py by path).
"""
