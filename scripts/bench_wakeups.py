#!/usr/bin/env python3
"""FUSE requests, watch wake-ups and daemon CPU of one workload, several
builds or knob settings interleaved (docs/bench/2026-12-03-no-create.md, "No CREATE, and
the daemon's writes out of the watch").

  bench_wakeups.py [--rounds R] [--files N] WORKLOAD NAME=BIN[,K=V...] ...

WORKLOAD is `untar` (tar xzf of N real source files from cargo's
registry, as workload 1), `rm` (rm -rf of N small files, as workload 5)
or `storm` (scripts/bench_meta.py N, as workload 6). Each NAME is one
column: the opfs binary BIN mounted (`--no-export`) with the environment
K=V added. Every round mounts each column once on a fresh project and
state dir, in turn, so the columns share the machine's load. For each
run it counts the FUSE requests the kernel sent (scripts/bench_reqs.py,
the fuse_request_send tracepoint), the wake-ups of the daemon's watch
thread (`opfs-watch`: its voluntary context switches, one per wait in
poll) and the daemon's CPU time (utime + stime of the whole process,
while the workload ran). Prints one JSON line per run, then the medians.
Needs root (tracefs, FUSE).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_reqs import FuseRequests  # noqa: E402


def registry_files(limit):
    root = os.path.expanduser("~/.cargo/registry/src")
    files = []
    for top in sorted(os.listdir(root)):
        base = os.path.join(root, top)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for f in sorted(filenames):
                p = os.path.join(dirpath, f)
                if os.path.islink(p) or not os.path.isfile(p):
                    continue
                files.append((p, os.path.relpath(p, base)))
                if len(files) >= limit:
                    return files
    return files


def archive(work, n):
    path = os.path.join(work, f"src-{n}.tar.gz")
    if not os.path.exists(path):
        with tarfile.open(path, "w:gz") as t:
            for src, rel in registry_files(n):
                t.add(src, arcname="src/" + rel)
    return path


def gen_tree(root, n, size=200):
    for i in range(n):
        d = os.path.join(root, f"d{i // 100:05d}")
        if i % 100 == 0:
            os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i:06d}.txt"), "wb") as f:
            f.write((b"line %d of a small file\n" % i) * (size // 24 + 1))


def watch_wakeups(pid):
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            if f.read().strip() != "opfs-watch":
                continue
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            for line in f:
                if line.startswith("voluntary_ctxt_switches:"):
                    return int(line.split()[1])
    return 0


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one(work, workload, n, binary, env):
    w = tempfile.mkdtemp(dir=work)
    proj, mnt, home = (os.path.join(w, d) for d in ("proj", "mnt", "home"))
    for d in (proj, mnt, home):
        os.makedirs(d)
    if workload == "rm":
        gen_tree(os.path.join(proj, "t"), n)
    e = dict(os.environ, OPFS_HOME=home, **env)
    subprocess.run([binary, "mount", proj, mnt, "--no-export"], env=e, check=True,
                   stdout=subprocess.DEVNULL)
    try:
        st = json.loads(subprocess.run([binary, "-C", mnt, "status", "--json"], env=e,
                                       check=True, capture_output=True).stdout)
        pid = st["pid"]
        if workload == "untar":
            cmd = ["tar", "xzf", archive(work, n), "-C", mnt]
        elif workload == "rm":
            cmd = ["rm", "-rf", os.path.join(mnt, "t")]
        else:
            cmd = [sys.executable, os.path.join(HERE, "bench_meta.py"), mnt, str(n)]
        reqs = FuseRequests(mnt)
        w0, c0 = watch_wakeups(pid), cpu_s(pid)
        subprocess.run(cmd, check=True)
        w1, c1 = watch_wakeups(pid), cpu_s(pid)
        counts = reqs.stop()
    finally:
        subprocess.run([binary, "umount", mnt], env=e, stdout=subprocess.DEVNULL)
        shutil.rmtree(w, ignore_errors=True)
    return {"requests": sum(v for k, v in counts.items() if k != "lost"),
            "by_op": counts, "wakeups": w1 - w0, "daemon_cpu_s": round(c1 - c0, 3)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--work", default="/tmp/opfs-bench-wakeups")
    ap.add_argument("workload", choices=["untar", "rm", "storm"])
    ap.add_argument("columns", nargs="+")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    cols = []
    for c in a.columns:
        name, rest = c.split("=", 1)
        parts = rest.split(",")
        cols.append((name, parts[0], dict(kv.split("=", 1) for kv in parts[1:])))
    runs = {name: [] for name, _, _ in cols}
    for r in range(a.rounds):
        for name, binary, env in cols:
            res = one(a.work, a.workload, a.files, binary, env)
            runs[name].append(res)
            print(json.dumps({"round": r, "column": name, **res}), flush=True)
    for name, _, _ in cols:
        rs = runs[name]
        med = {k: statistics.median(x[k] for x in rs)
               for k in ("requests", "wakeups", "daemon_cpu_s")}
        print(f"{a.workload} {a.files} {name}: requests {med['requests']:.0f}, "
              f"watch wake-ups {med['wakeups']:.0f}, daemon CPU {med['daemon_cpu_s']:.3f} s "
              f"(medians of {len(rs)})")


if __name__ == "__main__":
    main()
