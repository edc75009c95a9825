#!/usr/bin/env python3
"""`rsync` pulling from another box's read-only model store (a forced `rrsync -ro MODEL_STORE`) for the fan-out's
copy tests (sparkctl/box/fetch_checkpoint.py --copy): this machine has no rsync, and the tests need faults a real
one cannot be told to have.

    rsync [options] -e SSH user@ADDRESS:PATH DEST

FAKE_RSYNC_STORES (JSON): address -> the folder that box's store is. PATH is relative to it, as under rrsync; a
PATH ending in "/" copies the folder's files (links followed, like -L; --delete drops what the source lacks), else
one file. A missing path exits 23 (rsync's partial-transfer code) naming it; an address with no store exits 255
(ssh could not connect). FAKE_RSYNC_DIE_AFTER=N: the copy dies after N bytes, leaving the file it was writing
partial (like --partial), exit 12. Every call and the bytes it wrote are appended to FAKE_RSYNC_LOG.
"""

import json
import os
import shutil
import sys


def main(argv):
    src, dest = argv[-2], argv[-1]
    target, _, path = src.partition(":")
    address = target.split("@", 1)[-1]
    stores = json.loads(os.environ.get("FAKE_RSYNC_STORES", "{}"))
    log = os.environ.get("FAKE_RSYNC_LOG")
    budget = int(os.environ.get("FAKE_RSYNC_DIE_AFTER", "-1"))
    written = 0

    def record(status):
        if log:
            with open(log, "a") as f:
                f.write(json.dumps({"source": address, "path": path, "bytes": written, "status": status}) + "\n")

    if address not in stores:
        sys.stderr.write(f"ssh: connect to host {address} port 22: No route to host\n"
                         "rsync: connection unexpectedly closed (0 bytes received so far) [Receiver]\n")
        record(255)
        return 255
    root = os.path.join(stores[address], path)
    if not os.path.exists(root):
        sys.stderr.write(f'rsync: [sender] link_stat "{path}" failed: No such file or directory (2)\n')
        record(23)
        return 23
    pairs = []
    if path.endswith("/"):
        for base, _dirs, names in os.walk(root):
            for n in sorted(names):
                rel = os.path.relpath(os.path.join(base, n), root)
                pairs.append((os.path.join(base, n), os.path.join(dest, rel)))
        if "--delete" in argv:
            wanted = {d for _s, d in pairs}
            for base, _dirs, names in os.walk(dest):
                for n in names:
                    if os.path.join(base, n) not in wanted:
                        os.unlink(os.path.join(base, n))
    else:
        pairs.append((root, dest))
    for s, d in pairs:
        data = open(s, "rb").read()  # follows links (-L)
        if os.path.exists(d) and open(d, "rb").read() == data:
            continue  # rsync's quick check: nothing to send
        os.makedirs(os.path.dirname(d) or ".", exist_ok=True)
        if 0 <= budget < written + len(data):
            with open(d, "wb") as f:
                f.write(data[:budget - written])
            written = budget
            sys.stderr.write("rsync: connection unexpectedly closed (%d bytes received so far) [receiver]\n" % written)
            record(12)
            return 12
        tmp = d + ".rsync-tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, d)
        shutil.copymode(s, d)
        written += len(data)
    record(0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
