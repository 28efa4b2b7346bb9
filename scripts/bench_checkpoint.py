#!/usr/bin/env python3
"""What one checkpoint costs: the CPU a prompt hook pays per turn, all told.

Per tree size (--files, default 3000,30000) and per opfs binary
(--variant NAME=PATH, several to compare; default the release build), a
project of that many small text files (100 per directory) is mounted with
the defaults (automatic export to the shadow git repository on) and its
baseline exported (untimed). Then --checkpoints times, the variants
interleaved (checkpoint k of every variant, then k+1, ...):

  1. edit --edits files through the mount (untimed: the capture is the
     workload's cost, not the checkpoint's);
  2. the checkpoint, timed: what an installed prompt hook runs, with a
     prompt event on stdin: `opfs-hook -C MNT` when the variant's binary is
     named `opfs` and has `opfs-hook` beside it (what `opfs integrate`
     installs then), else `opfs -C MNT hook` (`--cmd turn`: `opfs -C MNT
     turn --label L`); its process's CPU (getrusage of children) is `cli`;
  3. `opfs -C MNT export`, which waits for the daemon's background export
     of that turn; this waiter's own CPU is not counted.

`daemon` is the daemon's CPU (/proc/PID/stat, its threads and waited-for
children) from before step 2 to after step 3: the turn boundary and the
export of the turn. The report gives, per variant and size, the mean of
cli, daemon and their sum in milliseconds (the mean, because the daemon's
CPU is counted in clock ticks of 10 ms: one checkpoint reads 0 or 10 ms,
the mean over many is the cost), the cli's median, the mean CPU of each
daemon thread alive across the checkpoint (`threads`, from schedstat, in
nanoseconds: exact, but a thread that ended, such as the control
connection's, is missing), and the load average at the start and the
end. JSON to --out.

Needs root (FUSE mounts).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import children_cpu, daemon_pid, proc_cpu  # noqa: E402

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_tree(root, n):
    os.makedirs(root)
    for i in range(n):
        d = os.path.join(root, f"d{i // 100:04d}")
        if i % 100 == 0:
            os.mkdir(d)
        with open(os.path.join(d, f"f{i:06d}.txt"), "w") as f:
            f.write(f"file {i}\n" + "line of text for the checkpoint benchmark\n" * 20)


def thread_ns(pid):
    """Nanoseconds on CPU so far per thread name of process `pid`
    (`/proc/PID/task/TID/schedstat`): exact, where /proc/PID/stat counts
    clock ticks; threads that ended are not in it."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        if comm.startswith("fuser-"):
            comm = "fuser"
        elif pid == int(tid):
            comm = "main"
        out[comm] = out.get(comm, 0) + ns
    return out


def run(cmd, env, stdin=None):
    r = subprocess.run(cmd, env=env, input=stdin, capture_output=True)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd} failed ({r.returncode}): {r.stderr.decode(errors='replace')}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(HERE, "target"))
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=PATH")
    ap.add_argument("--files", default="3000,30000")
    ap.add_argument("--checkpoints", type=int, default=20)
    ap.add_argument("--edits", type=int, default=5)
    ap.add_argument("--cmd", choices=["hook", "turn"], default="hook")
    ap.add_argument("--work", default="/tmp/opfs-bench-checkpoint")
    ap.add_argument("--out", default=os.path.join(target, "bench", "checkpoint.json"))
    a = ap.parse_args()
    variants = dict(v.split("=", 1) for v in a.variant) or {"opfs": os.path.join(target, "release", "opfs")}
    sizes = [int(x) for x in a.files.split(",")]
    load0 = os.getloadavg()
    results = {}
    shutil.rmtree(a.work, ignore_errors=True)
    for n in sizes:
        tmpl = os.path.join(a.work, f"tmpl-{n}")
        make_tree(tmpl, n)
        mounts = {}
        try:
            for name, binary in variants.items():
                d = os.path.join(a.work, f"{name}-{n}")
                os.makedirs(d)
                backing, mp, home = (os.path.join(d, x) for x in ("p", "mnt", "home"))
                subprocess.run(["cp", "-a", tmpl, backing], check=True)
                os.makedirs(mp)
                os.makedirs(home)
                env = dict(os.environ, OPFS_HOME=home)
                run([binary, "mount", backing, mp], env)
                run([binary, "-C", mp, "turn", "--label", "baseline"], env)
                run([binary, "-C", mp, "export"], env)
                mounts[name] = (binary, mp, env, daemon_pid(mp))
            rows = {name: {"cli_ms": [], "daemon_ms": [], "threads_ms": {}} for name in variants}
            for k in range(a.checkpoints):
                for name, (binary, mp, env, pid) in mounts.items():
                    for e in range(a.edits):
                        i = (k * a.edits * 37 + e * 101) % n
                        with open(os.path.join(mp, f"d{i // 100:04d}", f"f{i:06d}.txt"), "a") as f:
                            f.write(f"edit {k}\n")
                    d0, c0, t0 = proc_cpu(pid), children_cpu(), thread_ns(pid)
                    if a.cmd == "hook":
                        event = json.dumps({"hook_event_name": "UserPromptSubmit", "session_id": "bench",
                                            "cwd": mp, "prompt": f"prompt {k}"}).encode()
                        small = os.path.join(os.path.dirname(binary), "opfs-hook")
                        if os.path.basename(binary) == "opfs" and os.path.exists(small):
                            run([small, "-C", mp], env, stdin=event)
                        else:
                            run([binary, "-C", mp, "hook"], env, stdin=event)
                    else:
                        run([binary, "-C", mp, "turn", "--label", f"prompt {k}"], env)
                    c1 = children_cpu()
                    run([binary, "-C", mp, "export"], env)
                    d1, t1 = proc_cpu(pid), thread_ns(pid)
                    for comm, ns in t1.items():
                        rows[name]["threads_ms"].setdefault(comm, []).append(
                            round((ns - t0.get(comm, 0)) / 1e6, 3))
                    rows[name]["cli_ms"].append(round((c1 - c0) * 1000, 2))
                    rows[name]["daemon_ms"].append(round((d1 - d0) * 1000, 2))
            for name, r in rows.items():
                tot = [c + d for c, d in zip(r["cli_ms"], r["daemon_ms"])]
                r.update(mean_cli_ms=round(statistics.mean(r["cli_ms"]), 2),
                         median_cli_ms=statistics.median(r["cli_ms"]),
                         mean_daemon_ms=round(statistics.mean(r["daemon_ms"]), 2),
                         mean_total_ms=round(statistics.mean(tot), 2), total_ms=tot,
                         mean_threads_ms={c: round(statistics.mean(v), 2)
                                          for c, v in sorted(r["threads_ms"].items())})
                results.setdefault(str(n), {})[name] = r
                print(f"{n:>7} files  {name:<12} cli {r['mean_cli_ms']:6.2f} ms (median "
                      f"{r['median_cli_ms']:.2f})  daemon {r['mean_daemon_ms']:6.2f} ms  "
                      f"total {r['mean_total_ms']:6.2f} ms  threads (schedstat) "
                      + " ".join(f"{c} {v:.2f}" for c, v in r["mean_threads_ms"].items()),
                      flush=True)
        finally:
            for name, (binary, mp, env, pid) in mounts.items():
                subprocess.run(["umount", mp], capture_output=True)
    doc = {"command": "scripts/bench_checkpoint.py " + " ".join(sys.argv[1:]),
           "date": time.strftime("%Y-%m-%d %H:%M:%S"), "loadavg_start": load0,
           "loadavg_end": os.getloadavg(), "clk_tck": os.sysconf("SC_CLK_TCK"),
           "opfs_commit": subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                                         capture_output=True).stdout.decode().strip(),
           "config": vars(a), "variants": variants, "results": results}
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"load average {load0[0]:.2f} -> {doc['loadavg_end'][0]:.2f}; {a.out}")


if __name__ == "__main__":
    main()
