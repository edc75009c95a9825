"""The simulated Spark: disposable systemd test hosts that stand in for GX10 boxes on a CPU-only machine.

Each instance is real systemd 252 (Debian 12) as PID 1 of its own pid/mount/uts/ipc/cgroup/time namespaces, on an
overlay of one cached rootfs, in its own network namespace bridged to the host (10.250.0.0/24). Beside them, on
the host: an allow-listed apt proxy, a stand-in Hugging Face endpoint serving tiny git-backed models, and a
stand-in NVIDIA apt repository. Entry points: `python -m sparkctl sim ...` (cli.py) and the Python API (api.py).

May import: sparkctl.config, sparkctl.check.load (how every command reads the settings), sparkctl.lock.refresh (the stand-in hub's lock), sparkctl.errors.
"""
