#!/usr/bin/env python3
"""FUSE requests by opcode, as the kernel sends them (for scripts/bench).

Counts the `fuse:fuse_request_send` tracepoint (kernel 6.16+) of one FUSE
connection in a private tracefs instance, so it sees every request of any
FUSE daemon (opfs or a peer) without changing it. Needs root and tracefs
(mounted at /sys/kernel/tracing if it is not).

As a module:   r = FuseRequests(mountpoint); ...; counts = r.stop()
               r.mark(LABEL) between parts of a run writes LABEL into the
               trace; after stop(), r.parts is {LABEL: {opcode: count}}
               (requests sent after each mark, up to the next; those
               before the first mark under ""), and r.senders
               {LABEL: {process name: count}} names who sent them (the
               task in whose context the request was queued: the caller,
               or a kernel worker for background requests).
As a command:  bench_reqs.py MOUNTPOINT -- COMMAND...   runs COMMAND and
               prints its requests by opcode.
"""

import collections
import os
import re
import subprocess
import sys

TRACEFS = "/sys/kernel/tracing"
LINE = re.compile(r"opcode \d+ \((\w+)\)")
# A trace line: "<comm>-<pid> [cpu] flags timestamp: event: ...".
TASK = re.compile(r"^\s*(.+?)-\d+\s+\[\d+\]")
MARK = "opfs-bench-mark "


class FuseRequests:
    def __init__(self, mountpoint, buffer_kb=65536):
        if not os.path.isdir(os.path.join(TRACEFS, "events")):
            subprocess.run(["mount", "-t", "tracefs", "nodev", TRACEFS], check=True)
        # The connection number is the mount's anonymous device minor.
        self.conn = os.minor(os.stat(mountpoint).st_dev)
        self.inst = os.path.join(TRACEFS, "instances", f"opfs-bench-{os.getpid()}-{self.conn}")
        os.mkdir(self.inst)
        self.write("buffer_size_kb", str(buffer_kb))
        ev = os.path.join("events", "fuse", "fuse_request_send")
        self.write(os.path.join(ev, "filter"), f"connection == {self.conn}")
        self.write(os.path.join(ev, "enable"), "1")
        self.ev = ev
        self.parts, self.senders = {}, {}

    def mark(self, label):
        """Starts a new part of the count, named `label` (no newline)."""
        self.write("trace_marker", MARK + label)

    def write(self, rel, value):
        with open(os.path.join(self.inst, rel), "w") as f:
            f.write(value)

    def stop(self):
        """Stops counting; returns {opcode name without FUSE_: count}, plus
        `lost` when the ring buffer overran."""
        self.write(os.path.join(self.ev, "enable"), "0")
        counts = collections.Counter()
        part = ""
        parts = {part: collections.Counter()}
        senders = {part: collections.Counter()}
        with open(os.path.join(self.inst, "trace")) as f:
            for line in f:
                at = line.find(MARK)
                if at >= 0 and "tracing_mark_write" in line:
                    part = line[at + len(MARK):].rstrip("\n")
                    parts.setdefault(part, collections.Counter())
                    senders.setdefault(part, collections.Counter())
                    continue
                m = LINE.search(line)
                if m:
                    op = m.group(1).removeprefix("FUSE_")
                    counts[op] += 1
                    parts[part][op] += 1
                    t = TASK.match(line)
                    senders[part][t.group(1).strip() if t else "?"] += 1
        self.parts = {k: dict(v.most_common()) for k, v in parts.items() if v or k}
        self.senders = {k: dict(v.most_common()) for k, v in senders.items() if v or k}
        lost = 0
        for cpu in os.listdir(os.path.join(self.inst, "per_cpu")):
            with open(os.path.join(self.inst, "per_cpu", cpu, "stats")) as f:
                for line in f:
                    if line.startswith("overrun:"):
                        lost += int(line.split()[1])
        os.rmdir(self.inst)
        if lost:
            counts["lost"] = lost
        return dict(counts.most_common())


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit(__doc__)
    r = FuseRequests(sys.argv[1])
    try:
        rc = subprocess.run(sys.argv[3:]).returncode
    finally:
        c = r.stop()
    for op, k in c.items():
        print(f"{k:>9} {op}")
    print(f"{sum(v for o, v in c.items() if o != 'lost'):>9} total")
    sys.exit(rc)
