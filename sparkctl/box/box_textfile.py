#!/usr/bin/env python3
"""On the box (uploaded by the deploy, run by sparkctl-box-facts.timer, stdlib only): facts the alerts need that
no exporter has.

    box_textfile.py --out FILE.prom --model-store /srv/models --cert /etc/nginx/sparkctl-tls/server.pem
                    --rollout-dir /var/lib/sparkctl/rollout

- the model store's free space (statvfs of the path itself: it need not be its own mount point);
- the TLS certificate's expiry (the proxy's certificate, read with the standard library's own decoder);
- each service's last rollout result: vllm-<service>.result.json (its `outcome`, one of contract.py's OUTCOMES).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import ssl
import sys
import time

try:
    from sparkctl.box import contract
    from sparkctl.box.boxio import write_atomic
    from sparkctl.box.textfile import TEXTFILE_MODE, Exposition
except ImportError:  # on the box: the scripts sit side by side
    import contract
    from boxio import write_atomic
    from textfile import TEXTFILE_MODE, Exposition



def store_facts(exp: Exposition, path: str) -> None:
    try:
        st = os.statvfs(path)
    except OSError as exc:
        print(f"box_textfile: model store {path}: {exc}", file=sys.stderr)
        return
    exp.add("sparkctl_model_store_free_bytes", "gauge", "space left for downloads under the model store, bytes",
            st.f_bavail * st.f_frsize, {"path": path})
    exp.add("sparkctl_model_store_size_bytes", "gauge", "size of the model store's filesystem, bytes",
            st.f_blocks * st.f_frsize, {"path": path})


def cert_facts(exp: Exposition, path: str) -> None:
    try:
        not_after = ssl._ssl._test_decode_cert(path)["notAfter"]  # the stdlib's own X.509 decoder (CPython)
        expiry = ssl.cert_time_to_seconds(not_after)
    except (OSError, ssl.SSLError, KeyError, ValueError) as exc:
        print(f"box_textfile: certificate {path}: {exc}", file=sys.stderr)
        return
    exp.add("sparkctl_tls_cert_expiry_timestamp_seconds", "gauge",
            "when the proxy's TLS certificate expires, unix time", expiry, {"path": path})


def rollout_results(directory: str) -> list[tuple[str, str, dict]]:
    """(service, path, parsed JSON) of each service's last rollout result: rollout_txn.py writes
    vllm-<service>.result.json when a transaction finishes (its open state and failure records live elsewhere)."""
    out = []
    for path in sorted(glob.glob(os.path.join(directory, "vllm-*.result.json"))):
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("outcome"), str):
            service = os.path.basename(path)[len("vllm-"):-len(".result.json")]
            out.append((service, path, data))
    return out


def rollout_facts(exp: Exposition, directory: str) -> None:
    for service, path, data in rollout_results(directory):
        outcome = data["outcome"]
        labels = {"unit": f"vllm-{service}.service", "result": outcome}
        exp.add("sparkctl_rollout_last_ok", "gauge", "1 when the last rollout of the service served its candidate "
                "(ready, unchanged, restarted), 0 when it failed, was refused or rolled back",
                int(outcome in contract.SUCCEEDED), labels)
        exp.add("sparkctl_rollout_last_timestamp_seconds", "gauge", "when the last rollout result was written, unix "
                "time", round(os.stat(path).st_mtime, 3), {"unit": labels["unit"]})


def collect(model_store: str, cert: str, rollout_dir: str) -> Exposition:
    exp = Exposition()
    store_facts(exp, model_store)
    cert_facts(exp, cert)
    rollout_facts(exp, rollout_dir)
    exp.add("sparkctl_box_facts_timestamp_seconds", "gauge", "when these facts were read, unix time",
            round(time.time(), 3))
    return exp


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--model-store", required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--rollout-dir", required=True)
    args = p.parse_args(argv)
    write_atomic(args.out, collect(args.model_store, args.cert, args.rollout_dir).text(), TEXTFILE_MODE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
