"""`python -m sparkctl plan`: the capacity planner's table for one box (capacity.py), then the fleet's placement,
each box's memory, each pool's capacity, the waves and their wall-time estimate (cli.py). The arithmetic lives in
sparkctl/capacity/ and sparkctl/fleet/; these read the settings as every command does, so they stand above
sparkctl.check.

May import: sparkctl.config, sparkctl.capacity, sparkctl.fleet, sparkctl.check.load (how every command reads the
settings), sparkctl.errors.
"""
