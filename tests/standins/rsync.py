#!/usr/bin/env python3
"""`rsync` pulling from another box's read-only model store (a forced `rrsync -ro MODEL_STORE`) for the fan-out's
copy tests (sparkctl/box/fetch_checkpoint.py --copy): this machine has no rsync, and the tests need faults a real
one cannot be told to have.

    rsync [options] -e SSH user@ADDRESS:PATH DEST

FAKE_RSYNC_STORES (JSON): address -> the folder that box's store is. PATH is relative to it, as under rrsync; a
PATH ending in "/" copies the folder's files (links followed, like -L; with -l, as in -rlt, a link is copied as the
link; --delete drops what the source lacks), else one file. A missing path exits 23 (rsync's partial-transfer code)
naming it; an address with no store exits 255 (ssh could not connect). FAKE_RSYNC_DIE_AFTER=N: the copy dies after
N bytes, leaving the file it was writing partial (like --partial), exit 12. A file that holds the start of the
source's (a partial one) gets only the rest, as rsync's delta transfer sends only what its basis lacks. --stats prints "Total bytes received: N" (N: the bytes
written, with rsync's thousands separators). Every call, its options and the bytes it wrote are appended to FAKE_RSYNC_LOG.
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
        if "--stats" in argv:
            sys.stdout.write(f"Number of files: 1\nTotal bytes sent: 1,024\nTotal bytes received: {written:,}\n")
        if log:
            with open(log, "a") as f:
                f.write(json.dumps({"source": address, "path": path, "bytes": written, "status": status,
                                    "options": [a for a in argv if a.startswith("-")]}) + "\n")

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
    links = any(a.startswith("-") and not a.startswith("--") and "l" in a for a in argv)  # -l (-rlt): as links
    for s, d in pairs:
        if links and os.path.islink(s):
            if not (os.path.islink(d) and os.readlink(d) == os.readlink(s)):
                os.makedirs(os.path.dirname(d) or ".", exist_ok=True)
                if os.path.lexists(d):
                    os.unlink(d)
                os.symlink(os.readlink(s), d)
            continue
        data = open(s, "rb").read()  # follows links (-L)
        have = open(d, "rb").read() if os.path.exists(d) else b""
        if have == data:
            continue  # rsync's quick check: nothing to send
        kept = len(have) if data.startswith(have) else 0  # a partial file: the basis of the delta transfer
        os.makedirs(os.path.dirname(d) or ".", exist_ok=True)
        if 0 <= budget < written + len(data) - kept:
            with open(d, "wb") as f:
                f.write(data[:kept + budget - written])
            written = budget
            sys.stderr.write("rsync: connection unexpectedly closed (%d bytes received so far) [receiver]\n" % written)
            record(12)
            return 12
        tmp = d + ".rsync-tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, d)
        shutil.copymode(s, d)
        written += len(data) - kept
    record(0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
