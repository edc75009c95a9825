"""What gets written to a box or handed off: vLLM unit and env files (templates/), the health table the deploy
prints, the gateway hand-off and its Kubernetes manifests.

May import: sparkctl.config, sparkctl.capacity, sparkctl.errors, and sparkctl.box.contract (the box boundary,
stdlib only). Pure functions: no pyinfra, no I/O on a box.
"""
