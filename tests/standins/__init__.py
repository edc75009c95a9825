"""The tests' stand-ins, in one place: what cannot exist on a test machine, each module named for what it stands in
for (the simulated Spark's own, for the box, are in sparkctl/sim/standins/).

- `systemd.py`: `systemctl`, `systemd-run` and `journalctl` for the box-side rollout tests (on PATH under those
  names; argv[0] picks the tool).
- `gx10_inventory.py`: GX10 boxes for pyinfra's @fake connector: the real group data, scripted facts.
- `rsync.py`: `rsync` pulling from other boxes' read-only model stores, with the faults the fan-out's copy tests
  need (a source that is gone, a copy that dies half way).
- `deploy_runner.py`: runs the whole deploy in-process against those boxes and prints what it would do as JSON.
"""
