"""Scripts the deploy uploads to the box (stdlib only, plus the vLLM venv where noted); importable for tests."""
