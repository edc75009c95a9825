"""sparkctl: the logic of the CARouter Cloud GX10 deploy that is not pyinfra.

Catalog, settings validation, env-file rendering, the capacity planner, the bench probe and acceptance checks,
and the simulated Spark. Entry point: `python -m sparkctl --help`.
"""

REPO_ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent
