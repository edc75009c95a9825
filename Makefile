# The two set-up commands (see README):
#   make deploy   deploy to GX10_HOSTS, or (unset) boot the simulated Spark and deploy to it
#   make test     the test suite, end-to-end scenarios on the simulated Spark included
#   make check    the deploy's whole validation of the configured hosts, offline
SHELL := /bin/bash
PY := .venv/bin/python

.PHONY: bootstrap deploy check test test-extended test-fast sim-down plan

bootstrap:
	@scripts/bootstrap.sh

deploy: bootstrap
	@if [ -z "$$GX10_HOSTS" ]; then $(PY) -m sparkctl sim up; fi
	.venv/bin/pyinfra -y inventory.py deploy.py

# the deploy's whole validation, offline, for the hosts `make deploy` would target (touches no box)
check: bootstrap
	@if [ -z "$$GX10_HOSTS" ]; then $(PY) -m sparkctl check --sim; else $(PY) -m sparkctl check; fi

# The tests that need no simulated Spark run first, spread over the machine's cores (pytest-xdist); the end-to-end
# scenarios then run in one process (they share one simulated Spark). Both always run; either failing fails the target.
test: bootstrap
	@rc=0; $(PY) -m pytest -m "not e2e" -n auto || rc=$$?; $(PY) -m pytest -m e2e || rc=$$?; exit $$rc

test-extended: bootstrap
	@rc=0; $(PY) -m pytest -m "not e2e" -n auto || rc=$$?; \
	SPARKCTL_E2E_EXTENDED=1 $(PY) -m pytest -m e2e || rc=$$?; exit $$rc

test-fast: bootstrap
	$(PY) -m pytest -m "not e2e" -n auto

plan: bootstrap
	$(PY) -m sparkctl plan

sim-down: bootstrap
	$(PY) -m sparkctl sim down
