"""`python -m sparkctl rehearse`: the first hour on a box (docs/first-gx10.md). Every figure the simulated Spark
cannot give, read on the boxes themselves, into one report (markdown and JSON) with, for each figure, the command
or reading that measured it and what a bad result means: the box's device check, memory per service planned
against measured, admission per start, load time, the kernels vLLM chose against the catalog's, decode and prefill
against the roofline (the bench probe, the same code path as `bench`), MTP acceptance per position, KV tokens
planned against vLLM's, the link of a tensor-parallel pair, and (--cold-warm) a cold start against a warm restart
with each kernel cache's reuse.

boxread.py talks to the boxes (ssh, one round trip for the units, journals and /proc/meminfo; the box's own
scripts, sparkctl/box/device_check.py and sparkctl/box/link_probe.py, by path, when installed); planned.py what the
capacity planner planned for each service; figures.py judges each reading (pure); kernels.py reads the kernels vLLM
chose from its log (pure); coldwarm.py restarts the coder cold and warm and counts each cache's files; report.py
assembles, renders and writes the report; cli.py the command.

May import: sparkctl.config, sparkctl.capacity, sparkctl.measure (the bench probe and its judgement's thresholds),
sparkctl.check.load (how every command reads the settings), sparkctl.errors, sparkctl.box.contract (the box's unit
names), sparkctl.render.device_check (the device check's command as the deploy runs it).
"""
