#!/usr/bin/env python3
"""Workload `wt` of scripts/bench: worktrees (`--only wt`).

Three measurements, each on its own project (opfs only, `--no-export`):

- **create**: at each size of `--wt-create-files` (empty files, 100 a
  directory, 100 directories a parent: an empty file takes no data
  block, so 1,000,000 files fit in a few hundred MB of directories and
  inodes), `opfs worktree create` run `--wt-creates` times on one mount:
  wall time, CPU of the command (RUSAGE_CHILDREN) plus the project's
  daemon's, and the new worktree's daemon's own CPU until the command
  returned. Then a cold `ls -R` in the last worktree (wall, and the CPU
  of `ls` plus the worktree's daemon), a check that the worktree serves
  the whole tree.
- **reads**: at each size of `--wt-files` (files of about 3 KB, 100 a
  directory, a git repository), `--runs` rounds of: `opfs mount` (the
  kernel's caches of the mount empty), a cold `grep -r`, the same again
  (warm), `git status --porcelain`; then `worktree create` and the same
  three in the worktree. Wall, the serving daemon's CPU (`daemon`) and
  that plus the command's (`cpu`); the medians and the ratio worktree /
  main mount. Each `--variant` (e.g. `before:OPFS_BIN=PATH`, another
  build) runs too, interleaved with `opfs` round by round.
- **eight**: at `--wt-eight-files` (files as in reads), `--runs` rounds
  of, interleaved: one plain `grep -r` on the backing directory, then
  `--wt-agents` (8) at once; a cold `grep -r` in one fresh worktree,
  then in 8 fresh worktrees at once. Per process: each `grep`'s own CPU
  (`wait4`), each worktree daemon's CPU, its time waiting for a core
  (run-queue delay) and its context switches (`/proc/PID/task/*/schedstat`
  and `status`: nanoseconds, not clock ticks). The ratio eight / one of
  the plain `grep`'s CPU is what the machine charges a process for
  sharing its cores eight ways, the floor daemon's what it charges a
  FUSE daemon; the worktree daemon's ratio above the floor's is opfs's.

CPU of daemons is read from `/proc/PID/task/*/schedstat` (nanoseconds
on the core, summed over the daemon's threads); a thread that exited
between two reads would be missed, which the daemons' fixed thread
pools do not do during a measurement.
"""

import os
import random
import statistics
import subprocess
import time

B = None  # the bench module (sh, out, children_cpu, log), set by w_worktrees


def gen_empty(root, n):
    """`n` empty files, 100 a directory, 100 directories a parent."""
    for d in range((n + 99) // 100):
        p = os.path.join(root, f"d{d // 100}", f"e{d % 100}")
        os.makedirs(p, exist_ok=True)
        for i in range(min(100, n - d * 100)):
            os.close(os.open(os.path.join(p, f"f{i}.txt"), os.O_CREAT | os.O_WRONLY, 0o644))


def gen_text(root, n):
    """`n` files of about 3 KB of words, 100 a directory, committed to git."""
    rng = random.Random(1)
    words = [f"w{i}" for i in range(500)]
    for d in range((n + 99) // 100):
        os.makedirs(os.path.join(root, f"d{d}"))
        for i in range(min(100, n - d * 100)):
            with open(os.path.join(root, f"d{d}", f"f{i}.txt"), "w") as f:
                f.write(" ".join(rng.choice(words) for _ in range(700)))
    B.sh(["git", "init", "-q", root])
    # No `git gc --auto` left running in the background over the runs.
    B.sh(["git", "-C", root, "config", "gc.auto", "0"])
    B.sh(["git", "-C", root, "add", "-A"])
    B.sh(["git", "-C", root, "-c", "user.email=b@b", "-c", "user.name=bench", "commit", "-qm", "tree"])


def sched(pid):
    """(ns on a core, ns waiting for one, context switches) of `pid`'s
    threads so far."""
    on = wait = switches = 0
    tasks = f"/proc/{pid}/task"
    for t in os.listdir(tasks):
        try:
            with open(f"{tasks}/{t}/schedstat") as f:
                a, b, _ = f.read().split()
            on += int(a)
            wait += int(b)
            with open(f"{tasks}/{t}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        switches += int(line.split()[1])
        except (OSError, ValueError):
            continue
    return on, wait, switches


def sched_delta(pid, before):
    now = sched(pid)
    return {"cpu_ms": (now[0] - before[0]) / 1e6, "runq_wait_ms": (now[1] - before[1]) / 1e6,
            "switches": now[2] - before[2]}


class Opfs:
    """One `opfs mount` of a project and its worktrees."""

    def __init__(self, suite, backing, way="opfs"):
        extra = dict(suite.variants.get(way, {}))
        self.bin = extra.pop("OPFS_BIN", suite.opfs)
        extra.pop("OPFS_EXPORT", None)
        self.home = suite.side("home")
        self.env = dict(os.environ, OPFS_HOME=self.home, **extra)
        self.mp = suite.fresh("mnt")
        B.sh([self.bin, "mount", "--no-export", backing, self.mp], env=self.env)
        self.pid = self.daemon(self.mp)

    def cli(self, *args):
        return B.out([self.bin, "-C", self.mp, *args], env=self.env).strip()

    def daemon(self, path):
        import json
        return json.loads(B.out([self.bin, "-C", path, "status", "--json"], env=self.env))["pid"]

    def umount(self):
        B.sh([self.bin, "umount", self.mp], env=self.env, check=False)
        B.rmtree(self.mp)
        B.rmtree(self.home)


def timed(cmd, cwd, pid):
    """(wall ms, daemon CPU ms, command + daemon CPU ms) of `cmd` in `cwd`."""
    s0 = sched(pid)
    c0 = B.children_cpu()
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = (time.perf_counter() - t0) * 1000
    d = sched_delta(pid, s0)["cpu_ms"]
    return wall, d, d + (B.children_cpu() - c0) * 1000


GREP = ["grep", "-r", "--exclude-dir=.git", "zzz", "."]
STATUS = ["git", "status", "--porcelain"]


def drop(path):
    """Removes a backing tree, again if something still writing in it
    refilled a folder."""
    for _ in range(10):
        if B.sh(["rm", "-rf", path], check=False).returncode == 0:
            return
        time.sleep(0.5)
    B.rmtree(path)


def med(v):
    return round(statistics.median(v), 2)


def create(suite, n):
    a = suite.args
    backing = suite.fresh("wtc")
    t0 = time.time()
    gen_empty(backing, n)
    # The tree's inodes written back before the creates: otherwise each
    # create's commits (SQLite's fsyncs) wait behind that writeback.
    os.sync()
    B.log(f"  wt create {n}: tree made in {time.time() - t0:.0f} s")
    o = Opfs(suite, backing)
    runs = []
    try:
        names = []
        for i in range(a.wt_creates):
            name = f"c{i}"
            d0 = sched(o.pid)
            c0 = B.children_cpu()
            t = time.perf_counter()
            path = o.cli("worktree", "create", name)
            wall = (time.perf_counter() - t) * 1000
            cmd = (B.children_cpu() - c0) * 1000
            proj = sched_delta(o.pid, d0)["cpu_ms"]
            wpid = o.daemon(path)
            own = sched(wpid)[0] / 1e6
            runs.append({"wall_ms": round(wall, 2), "cmd_cpu_ms": round(cmd, 2),
                         "project_daemon_cpu_ms": round(proj, 2), "cpu_ms": round(cmd + proj, 2),
                         "worktree_daemon_cpu_ms": round(own, 2)})
            names.append((name, path, wpid))
        _, path, wpid = names[-1]
        s0 = sched(wpid)
        c0 = B.children_cpu()
        t = time.perf_counter()
        B.sh(["ls", "-R", path])
        ls = {"wall_ms": round((time.perf_counter() - t) * 1000, 1),
              "cpu_ms": round(sched_delta(wpid, s0)["cpu_ms"] + (B.children_cpu() - c0) * 1000, 1)}
        for name, _, _ in names:
            o.cli("worktree", "discard", name)
    finally:
        o.umount()
        drop(backing)
    r = {"runs": runs, "median_wall_ms": med([x["wall_ms"] for x in runs]),
         "median_cpu_ms": med([x["cpu_ms"] for x in runs]), "cold_ls_R": ls}
    B.log(f"  wt create {n}: median {r['median_wall_ms']} ms wall, {r['median_cpu_ms']} ms cpu; "
          f"ls -R {ls['wall_ms']} ms")
    return r


def reads(suite, n):
    a = suite.args
    backing = suite.fresh("wtr")
    gen_text(backing, n)
    B.sh(["grep", "-r", "zzz", backing], check=False)  # the backing files' page cache warm
    ways = ["opfs"] + list(suite.variants)
    by_way = {w: {} for w in ways}

    def add(k, v):
        for suf, x in zip(("wall", "daemon", "cpu"), v):
            res.setdefault(f"{k}_{suf}_ms", []).append(round(x, 2))

    for r, way in ((r, w) for r in range(a.runs) for w in ways):
        res = by_way[way]
        o = Opfs(suite, backing, way)
        try:
            add("main_cold", timed(GREP, o.mp, o.pid))
            add("main_warm", timed(GREP, o.mp, o.pid))
            add("main_git", timed(STATUS, o.mp, o.pid))
            path = o.cli("worktree", "create", f"r{r}")
            wp = o.daemon(path)
            add("wt_cold", timed(GREP, path, wp))
            add("wt_warm", timed(GREP, path, wp))
            add("wt_git", timed(STATUS, path, wp))
            o.cli("worktree", "discard", f"r{r}")
        finally:
            o.umount()
    drop(backing)
    out = {}
    for way, res in by_way.items():
        m = {k: med(v) for k, v in res.items()}
        ratios = {}
        for k in ("cold", "warm", "git"):
            for suf in ("wall", "daemon", "cpu"):
                main = m[f"main_{k}_{suf}_ms"]
                ratios[f"{k}_{suf}"] = round(m[f"wt_{k}_{suf}_ms"] / main, 3) if main else None
        B.log(f"  wt reads {n} {way}: ratios {ratios}")
        out[way] = {"medians_ms": m, "ratios": ratios, "runs_ms": res}
    return out


def eight(suite, n):
    a = suite.args
    k = a.wt_agents
    backing = suite.fresh("wte")
    gen_text(backing, n)
    B.sh(["grep", "-r", "zzz", backing], check=False)
    floor = suite.peers.get("hp")
    rows = {"plain x1": [], f"plain x{k}": []}
    if floor:
        rows.update({"floor x1": [], f"floor x{k}": []})
    rows.update({"worktree x1": [], f"worktree x{k}": []})

    def greps(dirs):
        """Runs one `grep -r` in each of `dirs` at once: (wall ms, each one's CPU ms)."""
        t = time.perf_counter()
        procs = [subprocess.Popen(GREP, cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for d in dirs]
        cpu = []
        for p in procs:
            _, _, ru = os.wait4(p.pid, 0)
            p.returncode = 0
            cpu.append(round((ru.ru_utime + ru.ru_stime) * 1000, 2))
        return (time.perf_counter() - t) * 1000, cpu

    o = Opfs(suite, backing)
    try:
        for r in range(a.runs):
            for count in (1, k):
                wall, cpu = greps([backing] * count)
                rows[f"plain x{count}"].append({"wall_ms": round(wall, 1), "grep_cpu_ms": cpu})
                if floor:
                    mounts = [suite.mount("hp", backing) for _ in range(count)]
                    try:
                        before = [sched(h["pid"]) for _, h in mounts]
                        wall, cpu = greps([mp for mp, _ in mounts])
                        ds = [sched_delta(h["pid"], b) for (_, h), b in zip(mounts, before)]
                    finally:
                        for _, h in mounts:
                            suite.umount(h)
                    rows[f"floor x{count}"].append({
                        "wall_ms": round(wall, 1), "grep_cpu_ms": cpu,
                        "daemon_cpu_ms": [round(d["cpu_ms"], 2) for d in ds],
                        "daemon_runq_wait_ms": [round(d["runq_wait_ms"], 2) for d in ds],
                        "daemon_switches": [d["switches"] for d in ds]})
                paths = [o.cli("worktree", "create", f"e{r}-{count}-{i}") for i in range(count)]
                pids = [o.daemon(p) for p in paths]
                before = [sched(p) for p in pids]
                p0 = sched(o.pid)
                wall, cpu = greps(paths)
                ds = [sched_delta(p, b) for p, b in zip(pids, before)]
                rows[f"worktree x{count}"].append({
                    "wall_ms": round(wall, 1), "grep_cpu_ms": cpu,
                    "daemon_cpu_ms": [round(d["cpu_ms"], 2) for d in ds],
                    "daemon_runq_wait_ms": [round(d["runq_wait_ms"], 2) for d in ds],
                    "daemon_switches": [d["switches"] for d in ds],
                    "project_daemon_cpu_ms": round(sched_delta(o.pid, p0)["cpu_ms"], 2)})
                for i in range(count):
                    o.cli("worktree", "discard", f"e{r}-{count}-{i}")
    finally:
        o.umount()
        drop(backing)

    def mean_of(key, rows_):
        xs = [x for row in rows_ for x in row.get(key, [])]
        return round(statistics.mean(xs), 2) if xs else None

    summary = {}
    for label, rs in rows.items():
        summary[label] = {"grep_cpu_ms": mean_of("grep_cpu_ms", rs),
                          "daemon_cpu_ms": mean_of("daemon_cpu_ms", rs),
                          "daemon_runq_wait_ms": mean_of("daemon_runq_wait_ms", rs),
                          "daemon_switches": mean_of("daemon_switches", rs),
                          "median_wall_ms": med([r["wall_ms"] for r in rs])}

    def ratio(key, what):
        one, many = summary[f"{what} x1"][key], summary[f"{what} x{k}"][key]
        return round(many / one, 3) if one and many is not None else None

    ratios = {"plain grep cpu": ratio("grep_cpu_ms", "plain"),
              "worktree grep cpu": ratio("grep_cpu_ms", "worktree"),
              "worktree daemon cpu": ratio("daemon_cpu_ms", "worktree"),
              "worktree daemon switches": ratio("daemon_switches", "worktree")}
    if floor:
        ratios.update({"floor grep cpu": ratio("grep_cpu_ms", "floor"),
                       "floor daemon cpu": ratio("daemon_cpu_ms", "floor"),
                       "floor daemon switches": ratio("daemon_switches", "floor")})
    B.log(f"  wt eight {n}: {ratios}")
    return {"agents": k, "per_process_mean": summary, "ratios_many_over_one": ratios, "runs": rows}


def w_worktrees(suite, bench):
    """Workload `wt`; `bench` is the bench module."""
    global B
    B = bench
    a = suite.args
    res = {"create": {}, "reads": {}, "eight": {}}
    for n in a.wt_create_files:
        res["create"][n] = create(suite, n)
    for n in a.wt_files:
        res["reads"][n] = reads(suite, n)
    if a.wt_eight_files:
        res["eight"][a.wt_eight_files] = eight(suite, a.wt_eight_files)
    suite.results["wt worktrees"] = res


def table(results):
    res = results.get("wt worktrees")
    if not res:
        return ""
    lines = []
    if res["create"]:
        lines += ["", "**wt: `opfs worktree create`** (median ms: wall; CPU of the command and the "
                  "project's daemon; then a cold `ls -R` of the worktree)", "",
                  "| files | wall | CPU | cold `ls -R` wall | its CPU |", "| --- | --- | --- | --- | --- |"]
        for n, r in res["create"].items():
            lines.append(f"| {n} | {r['median_wall_ms']} | {r['median_cpu_ms']} | "
                         f"{r['cold_ls_R']['wall_ms']} | {r['cold_ls_R']['cpu_ms']} |")
    if res["reads"]:
        lines += ["", "**wt: reads in a fresh worktree against the main mount** (median ms, "
                  "main / worktree (ratio); cpu = command + serving daemon)", "",
                  "| files | build | run | wall | cpu | daemon |", "| --- | --- | --- | --- | --- | --- |"]
        for n, ways in res["reads"].items():
            for way, r in ways.items():
                m = r["medians_ms"]
                for k, label in (("cold", "`grep -r` cold"), ("warm", "`grep -r` warm"), ("git", "`git status`")):
                    cells = [f"{m[f'main_{k}_{s}_ms']:.0f} / {m[f'wt_{k}_{s}_ms']:.0f} ({r['ratios'][f'{k}_{s}']})"
                             for s in ("wall", "cpu", "daemon")]
                    lines.append(f"| {n} | {way} | {label} | " + " | ".join(cells) + " |")
    for n, r in res["eight"].items():
        k = r["agents"]
        lines += ["", f"**wt: {k} at once against one** ({n} files; mean per process, ms)", "",
                  "| run | grep CPU | daemon CPU | daemon run-queue wait | daemon switches | wall (median) |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for label, s in r["per_process_mean"].items():
            lines.append(f"| {label} | {s['grep_cpu_ms']} | {s['daemon_cpu_ms'] or ''} | "
                         f"{s['daemon_runq_wait_ms'] or ''} | {s['daemon_switches'] or ''} | {s['median_wall_ms']} |")
        lines.append("")
        lines.append(f"{k} / 1: " + ", ".join(f"{key} {v}×" for key, v in r["ratios_many_over_one"].items()))
    return "\n".join(lines) + "\n"
