"""What gets written to a box or handed off: vLLM unit and env files (templates/), the health table the deploy
prints, the gateway hand-off and its Kubernetes manifests.

May import: sparkctl.config, sparkctl.capacity, sparkctl.errors, sparkctl.box.contract (the box boundary,
stdlib only) and sparkctl.box.boxio (the one atomic write, for the hand-off files). Pure functions: no pyinfra, no I/O on a box.
"""
