#!/usr/bin/env python3
"""The CPU cost of one FUSE round trip, per layer (docs/bench/2026-12-03-fuse-floor.md, "The
floor of a FUSE mount").

  bench_roundtrip.py [--opfs BIN] [--layers plain,opfs,bindfs,overlay]
                     [--peer NAME='CMD {src} {mnt}' ...] [--n 20000]
                     [--rounds 5] [--ops getxattr,open]

Every layer serves its own copy of one small file and stays mounted for
the whole run; then, in each round, every layer in turn runs N identical
cheap operations from a fresh child process:

- `getxattr`: fgetxattr(fd, "user.opfs_floor_absent") on one open file ->
  ENODATA. The kernel caches no xattr answer, so each call is exactly one
  GETXATTR round trip (no LOOKUP: the call goes through the open fd), and
  the daemon does one fgetxattr of its own. The cheapest request there is.
- `open`: open(O_RDONLY) + close of the file (by path, entry and attributes
  cached): OPEN + FLUSH + RELEASE on a layer that opens, fewer where the
  layer asked the kernel not to send them (opfs: FUSE_NO_OPEN_SUPPORT).

Per layer and operation it reports medians over the rounds, per operation:
the caller's CPU (the loop's own RUSAGE_SELF, user + system: the system
call, queueing the request, sleeping and waking), the daemon's CPU
(/proc/PID/stat, all its threads, user and system; in clock ticks of
10 ms, so N × the cost of a request must be well above that: the default
N of 20,000 gives ~0.5 s per batch), and the wall time (one
synchronous call at a time: the latency). "extra" columns subtract the
plain directory's figure (the same loop without FUSE). Then, untimed, it
counts the requests one batch causes (bench_reqs.py: the kernel's
`fuse:fuse_request_send` tracepoint) and the context switches of the
caller (RUSAGE_SELF) and of the daemon's threads (/proc/PID/task/*/status)
in that batch, which do not depend on load, so that the per-request cost is the
FUSE part divided by the real number of requests, and it shows whether the
daemon talks to the kernel over io_uring (an io_uring fd in the daemon).

--peer is the same as in scripts/bench.py (a shell command mounting {src}
at {mnt} and returning; skipped with a message when its program is not
found). Needs root (mounts). Results: a table on stdout, JSON with --json.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import bench_reqs  # noqa: E402

XATTR = "user.opfs_floor_absent"
# The loops run in a fresh interpreter each batch and time themselves (wall
# and their own CPU, RUSAGE_SELF), so the interpreter's start-up is not
# counted; the loop's own cost is measured on the plain directory and
# subtracted from every layer.
LOOP = r"""
import os, resource, sys, time
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
def sw():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_nvcsw + r.ru_nivcsw
path, op, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
name = "%s"
if op == "getxattr":
    fd = os.open(path, os.O_RDONLY)
    s0, c0, t0 = sw(), cpu(), time.perf_counter()
    for _ in range(n):
        try:
            os.getxattr(fd, name)
        except OSError:
            pass
    t, c, s = time.perf_counter() - t0, cpu() - c0, sw() - s0
    os.close(fd)
elif op == "open":
    os.close(os.open(path, os.O_RDONLY))
    s0, c0, t0 = sw(), cpu(), time.perf_counter()
    for _ in range(n):
        os.close(os.open(path, os.O_RDONLY))
    t, c, s = time.perf_counter() - t0, cpu() - c0, sw() - s0
print(t, c, s)
""" % XATTR


def switches(pid):
    """Context switches (voluntary + involuntary) of the live threads of
    process `pid`."""
    k = 0
    if pid is None:
        return 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                        k += int(line.split()[1])
        except OSError:
            pass
    return k


def batch(path, op, n, pid, ctx=None):
    """(wall s of the loop, caller CPU s, daemon CPU s) of one batch; with
    a dict `ctx`, its "caller" and "daemon" get the batch's context
    switches."""
    d0, s0 = bench.proc_cpu(pid), switches(pid)
    wall, caller, csw = map(float, subprocess.run([sys.executable, "-c", LOOP, path, op, str(n)], check=True,
                                                  capture_output=True).stdout.split())
    if ctx is not None:
        ctx["caller"], ctx["daemon"] = csw, switches(pid) - s0
    return wall, caller, bench.proc_cpu(pid) - d0


def uring_fds(pid):
    """How many io_uring instances the daemon `pid` holds."""
    k = 0
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[io_uring]":
                    k += 1
            except OSError:
                pass
    except OSError:
        pass
    return k


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--opfs", default=os.path.join(here, "target", "release", "opfs"))
    ap.add_argument("--layers", default="plain,opfs,bindfs,overlay")
    ap.add_argument("--peer", action="append", default=[], metavar="NAME=TEMPLATE")
    ap.add_argument("--n", type=int, default=20000, help="operations per batch")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ops", default="getxattr,open")
    ap.add_argument("--work", default="/tmp/opfs-bench-roundtrip")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    layers = a.layers.split(",")
    if "plain" not in layers:
        sys.exit("bench_roundtrip: --layers must include plain (the loop's own cost is subtracted)")
    if "opfs" in layers and not os.access(a.opfs, os.X_OK):
        sys.exit(f"bench_roundtrip: {a.opfs} is missing (cargo build --release, or --opfs BIN)")
    sa = argparse.Namespace(work=a.work, opfs=a.opfs, variant=[], peer=a.peer, layers=layers,
                            fresh_fs=False, requests=False)
    s = bench.Suite(sa)
    ops = a.ops.split(",")
    mounted = {}
    try:
        for layer in s.layers():
            backing = s.fresh("b")
            with open(os.path.join(backing, "f"), "wb") as f:
                f.write(b"a small file\n")
            mp, h = s.mount(layer, backing)
            mounted[layer] = (backing, mp, h)
        runs = {(l, op): [] for l in mounted for op in ops}
        for r in range(a.rounds):
            for op in ops:
                for layer, (_, mp, h) in mounted.items():
                    runs[(layer, op)].append(batch(os.path.join(mp, "f"), op, a.n, h and h["pid"]))
            bench.log(f"round {r + 1}/{a.rounds} done")
        reqs, ctxs = {}, {}
        for layer, (_, mp, h) in mounted.items():
            if h is None:
                continue
            for op in ops:
                c = bench_reqs.FuseRequests(mp)
                ctx = {}
                try:
                    batch(os.path.join(mp, "f"), op, a.n, h["pid"], ctx)
                finally:
                    reqs[(layer, op)] = c.stop()
                    ctxs[(layer, op)] = ctx
    finally:
        for layer, (backing, mp, h) in mounted.items():
            uring = uring_fds(h["pid"]) if h else 0
            mounted[layer] = (backing, mp, h, uring)
            s.umount(h)
            bench.rmtree(backing)
    res = {}
    for op in ops:
        base = [c for _, c, _ in runs[("plain", op)]]
        base_wall = [w for w, _, _ in runs[("plain", op)]]
        for layer in mounted:
            rs = runs[(layer, op)]
            med = lambda xs: statistics.median(xs) * 1e6 / a.n  # noqa: E731
            e = {"wall_us": med([w for w, _, _ in rs]), "caller_us": med([c for _, c, _ in rs]),
                 "daemon_us": med([d for _, _, d in rs]),
                 "runs_s": [[round(x, 4) for x in t] for t in rs],
                 "io_uring_fds": mounted[layer][3]}
            e["extra_caller_us"] = e["caller_us"] - med(base)
            e["extra_wall_us"] = e["wall_us"] - med(base_wall)
            c = reqs.get((layer, op))
            if c:
                e["requests"] = c
                total = sum(v for k, v in c.items() if k != "lost")
                e["requests_per_op"] = total / a.n
                per = a.n / total if total else 0
                cx = ctxs.get((layer, op), {})
                e["context_switches_per_request"] = {k: v / total for k, v in cx.items()} if total else {}
                e["per_request"] = {"extra_caller_us": e["extra_caller_us"] * per,
                                    "daemon_us": e["daemon_us"] * per,
                                    "extra_wall_us": e["extra_wall_us"] * per}
            res.setdefault(op, {})[layer] = e
    lines = [f"N = {a.n} operations per batch, {a.rounds} rounds interleaved, medians; "
             "µs per operation (extra = minus the plain directory's)", "",
             "| op | layer | requests/op | wall | extra wall | caller CPU | extra caller CPU | daemon CPU"
             " | FUSE CPU per request (extra caller + daemon) | context switches per request (caller + daemon)"
             " | io_uring |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for op, by in res.items():
        for layer, e in by.items():
            per = e.get("per_request")
            lines.append(f"| {op} | {layer} | {e.get('requests_per_op', 0):.2f} | {e['wall_us']:.1f} | "
                         f"{e['extra_wall_us']:.1f} | {e['caller_us']:.1f} | {e['extra_caller_us']:.1f} | "
                         f"{e['daemon_us']:.1f} | "
                         + (f"{per['extra_caller_us']:.1f} + {per['daemon_us']:.1f} = "
                            f"{per['extra_caller_us'] + per['daemon_us']:.1f}" if per else "")
                         + " | " + (" + ".join(f"{e['context_switches_per_request'].get(k, 0):.2f}"
                                              for k in ("caller", "daemon")) if per else "")
                         + f" | {'yes' if e['io_uring_fds'] else 'no'} |")
    print("\n".join(lines))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"command": "scripts/bench_roundtrip.py " + " ".join(sys.argv[1:]),
                       "date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": bench.machine(),
                       "results": res}, f, indent=1)


if __name__ == "__main__":
    main()
