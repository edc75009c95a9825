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

test: bootstrap
	$(PY) -m pytest

test-extended: bootstrap
	SPARKCTL_E2E_EXTENDED=1 $(PY) -m pytest

test-fast: bootstrap
	$(PY) -m pytest -m "not e2e"

plan: bootstrap
	$(PY) -m sparkctl plan

sim-down: bootstrap
	$(PY) -m sparkctl sim down
