"""Measuring a served model: the bench probe (its maths, the probe itself, its report), Prometheus text parsing,
the versioned workloads, needle-in-a-haystack, and the paired evals comparison.

May import: sparkctl.config, sparkctl.capacity, sparkctl.errors. Talks to a box only over HTTPS (the proxy) and
ssh (/metrics on loopback).
"""
