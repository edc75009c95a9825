"""pyinfra glue: one importable @deploy function per step, called in order by deploy.py.

preflight -> nvidia -> vllm -> checkpoints -> services -> proxy -> health. The logic they apply lives in the
sparkctl package; these modules only turn it into operations.
"""
