#!/usr/bin/env python3
"""Workload 11 of scripts/bench: a scripted agent session.

One session is T turns (default 6) on a git repository of real sources
(this repository's tracked files under `opfs/`, and the sources of the
crates in cargo's registry under `vendor/`, `vendor-2/`, ... taken whole,
crate by crate, until the tree holds N files; files over 256 KiB are left
out). Per turn, in this order:

  1. `grep -rIl --exclude-dir=.git WORD .`    (WORD from a fixed list)
  2. one python process (`bench_agent.py --turn PLAN`): read 20 files,
     edit 5 (read, insert a line, write back in place), create 2,
     delete 1
  3. `sed -i` on 1 file
  4. `mv` of 1 file to a new name in its directory
  5. `git status`, then `git --no-pager diff --stat`
  6. the checkpoint of the way measured.

The plan (which files, which words, where the edits go) is drawn once from
a seeded RNG (`--agent-seed`), so every way does exactly the same work.

The ways, each on a fresh copy of the tree on a fresh ext4 filesystem
(copy, mount and each way's baseline are untimed):

- `plain`: the directory itself, no checkpoint.
- `shadow-git`: a separate repository outside the project,
  `git --git-dir=S --work-tree=P add -A && ... commit` per turn (how
  Gemini CLI and Cline checkpoint); baseline commit untimed.
- `stat-scan`: a walk of the tree comparing (mtime, size, inode) with the
  previous walk and copying each new or changed file to a side directory
  (`bench_agent.py --scan`, a separate process); baseline walk and full
  copy untimed. `.git` is not scanned (the shadow repo skips it too).
- `opfs`: `opfs mount PROJECT MNT` with the defaults (automatic export to
  the shadow git repository on), `opfs -C MNT turn` per turn. The wall
  time ends with the last `opfs turn`; the CPU time also covers the
  export of the last turn (`opfs export` waits for the background one),
  so the daemon's export work is paid for like the shadow repo's commits.
- `bindfs`, `overlay` (fuse-overlayfs, project as lower layer, empty
  upper): the FUSE peers, which capture nothing; and each `--peer` of
  scripts/bench.py (e.g. libfuse's passthrough_hp), under its name.

CPU = the workload's processes (RUSAGE_CHILDREN, which includes each
`opfs turn`, `git` and the scan) plus the FUSE daemon (/proc/PID/stat).
With `--requests` each FUSE way also records the kernel's FUSE requests by
opcode (the `fuse:fuse_request_send` tracepoint, `bench_reqs.py`).
"""

import os
import pickle
import random
import shutil
import statistics
import subprocess
import sys
import time

B = None  # the bench module (its sh, CPU accounting and log), set by w11_agent
WAYS = ["plain", "shadow-git", "stat-scan", "opfs", "bindfs", "overlay"]
LAYER = {"opfs": "opfs", "bindfs": "bindfs", "overlay": "overlay"}
WORDS = ["unsafe impl", "TODO", "deprecated", "from_utf8", "Mutex", "panic!(",
         "fn parse", "lifetime", "#[inline]", "PhantomData"]
MAX_FILE = 256 << 10
GENV = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b",
        "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}


# ---- the tree and the plan --------------------------------------------------

def source_files(repo):
    """(source path, relative path) of the real sources, in a stable order:
    `repo`'s tracked files, then each registry crate's files."""
    files = []
    tracked = subprocess.run(["git", "-C", repo, "ls-files", "-z"], check=True,
                             capture_output=True).stdout.decode().split("\0")
    for rel in sorted(t for t in tracked if t):
        p = os.path.join(repo, rel)
        if os.path.isfile(p) and not os.path.islink(p) and os.path.getsize(p) <= MAX_FILE:
            files.append((p, os.path.join("opfs", rel)))
    reg = os.path.expanduser("~/.cargo/registry/src")
    crates = []
    for idx in sorted(os.listdir(reg)):
        for dirpath, dirnames, filenames in os.walk(os.path.join(reg, idx)):
            dirnames.sort()
            for f in sorted(filenames):
                p = os.path.join(dirpath, f)
                if os.path.islink(p) or not os.path.isfile(p) or os.path.getsize(p) > MAX_FILE:
                    continue
                crates.append((p, os.path.relpath(p, os.path.join(reg, idx))))
    return files, crates


def build_tree(dest, n, repo):
    """Fills `dest` with n real source files and commits them to a git
    repository there (packed, no automatic gc). Returns the relative paths."""
    own, crates = source_files(repo)
    picked = own[:n]
    copy = 1
    while len(picked) < n:
        prefix = "vendor" if copy == 1 else f"vendor-{copy}"
        for src, rel in crates:
            if len(picked) >= n:
                break
            picked.append((src, os.path.join(prefix, rel)))
        copy += 1
    for src, rel in picked:
        d = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        shutil.copyfile(src, d)
    env = dict(os.environ, **GENV)
    for cmd in (["git", "init", "-q"], ["git", "config", "gc.auto", "0"],
                ["git", "add", "-A"], ["git", "commit", "-q", "-m", "base"], ["git", "gc", "-q"]):
        subprocess.run(cmd, cwd=dest, env=env, check=True, stdout=subprocess.DEVNULL)
    return [rel for _, rel in picked]


def is_text(path):
    with open(path, "rb") as f:
        return b"\0" not in f.read(4096)


def make_plan(root, files, turns, seed):
    """The per-turn plan: the same for every way."""
    rng = random.Random(seed)
    alive = sorted(files)
    text = {rel for rel in alive if is_text(os.path.join(root, rel))}
    plan = []
    for t in range(1, turns + 1):
        editable = [r for r in alive if r in text]
        picks = rng.sample(editable, 8)
        edits, sed, delete, mv = picks[:5], picks[5], picks[6], picks[7]
        reads = rng.sample(alive, 20)
        dirs = sorted({os.path.dirname(r) for r in alive})
        creates = [os.path.join(rng.choice(dirs), f"agent_t{t}_{k}.rs") for k in range(2)]
        stem, ext = os.path.splitext(mv)
        mv_to = f"{stem}_moved_t{t}{ext}"
        plan.append({"turn": t, "word": rng.choice(WORDS), "reads": reads,
                     "edits": [(r, rng.random()) for r in edits], "sed": sed,
                     "creates": creates, "delete": delete, "mv": [mv, mv_to],
                     "seed": rng.randrange(1 << 30)})
        alive = sorted((set(alive) - {delete, mv}) | set(creates) | {mv_to})
        text |= set(creates) | {mv_to}
    return plan


# ---- the per-turn helpers (separate processes) ------------------------------

def run_turn(root, plan_file, turn):
    """Step 2 of a turn: read 20 files, edit 5, create 2, delete 1."""
    with open(plan_file, "rb") as f:
        p = pickle.load(f)[turn - 1]
    rng = random.Random(p["seed"])
    total = 0
    for rel in p["reads"]:
        with open(os.path.join(root, rel), "rb") as f:
            total += len(f.read())
    for k, (rel, where) in enumerate(p["edits"]):
        path = os.path.join(root, rel)
        with open(path, "rb") as f:
            lines = f.read().split(b"\n")
        at = int(where * len(lines))
        lines.insert(at, b"// agent edit, turn %d, edit %d" % (p["turn"], k))
        with open(path, "wb") as f:
            f.write(b"\n".join(lines))
    for rel in p["creates"]:
        body = "".join(f"pub fn f{rng.randrange(1 << 20)}() -> u32 {{ {i} }}\n" for i in range(60))
        with open(os.path.join(root, rel), "w") as f:
            f.write(body)
    os.unlink(os.path.join(root, p["delete"]))
    return total


def scan(root, state_file, side, turn):
    """The stat-scan checkpoint: walks `root` (not `.git`), compares each
    file's (mtime, size, inode) with the previous walk (in `state_file`),
    copies new and changed files to `side`/turnN/, and saves this walk."""
    prev = {}
    if os.path.exists(state_file):
        with open(state_file, "rb") as f:
            prev = pickle.load(f)
    now = {}
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        with os.scandir(os.path.join(root, rel_dir)) as it:
            for e in it:
                rel = os.path.join(rel_dir, e.name)
                if e.is_dir(follow_symlinks=False):
                    if rel != ".git":
                        stack.append(rel)
                    continue
                st = e.stat(follow_symlinks=False)
                now[rel] = (st.st_mtime_ns, st.st_size, st.st_ino)
    dest = os.path.join(side, f"turn{turn}")
    copied = 0
    for rel, key in now.items():
        if prev.get(rel) != key:
            d = os.path.join(dest, rel)
            os.makedirs(os.path.dirname(d), exist_ok=True)
            shutil.copy2(os.path.join(root, rel), d, follow_symlinks=False)
            copied += 1
    deleted = [rel for rel in prev if rel not in now]
    with open(os.path.join(side, f"turn{turn}.deleted"), "w") as f:
        f.write("\n".join(deleted))
    with open(state_file, "wb") as f:
        pickle.dump(now, f)
    return copied


# ---- the workload (called from bench.py) ------------------------------------

def template(suite, n):
    path = os.path.join(suite.work, f"agent-{n}")
    if not os.path.exists(path):
        tmp = path + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        files = build_tree(tmp, n, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        with open(os.path.join(suite.work, f"agent-{n}.files"), "wb") as f:
            pickle.dump(files, f)
        os.rename(tmp, path)
    with open(os.path.join(suite.work, f"agent-{n}.files"), "rb") as f:
        return path, pickle.load(f)


class Way:
    """One way of running the session: its checkpoint, set up untimed."""

    def __init__(self, suite, way, backing, mp, h):
        self.suite, self.way, self.backing, self.mp, self.h = suite, way, backing, mp, h
        self.env = dict(os.environ, **GENV)
        if way == "shadow-git":
            self.git = ["git", f"--git-dir={suite.side('shadow')}", f"--work-tree={backing}"]
            self.sh(self.git + ["init", "-q"])
            self.sh(self.git + ["config", "gc.auto", "0"])
            self.checkpoint(0)
        elif way == "stat-scan":
            self.side = suite.side("scan")
            self.state = os.path.join(self.side, "state.pickle")
            self.checkpoint(0)

    def sh(self, cmd, **kw):
        kw.setdefault("cwd", self.backing)
        return B.sh(cmd, env=self.env, **kw)

    def checkpoint(self, turn):
        if self.way == "shadow-git":
            self.sh(self.git + ["add", "-A"])
            self.sh(self.git + ["commit", "-q", "--allow-empty", "-m", f"turn {turn}"])
        elif self.way == "stat-scan":
            self.sh([sys.executable, __file__, "--scan", self.backing, self.state, self.side, str(turn)])
        elif self.way.startswith("opfs"):
            self.suite.opfs_cli(self.h, "turn")


def session(suite, way, plan_file, plan, pid=None, reqs=None):
    """Runs the turns in `way.mp`; returns the wall time of each turn, each
    step's wall time summed over the turns, each step's CPU summed over the
    turns: {step: [workload's processes, FUSE daemon]} (the daemon's CPU
    during a step includes its background work then, e.g. an export), and
    each turn's CPU as [workload's processes, FUSE daemon]. With `reqs` (a
    bench_reqs.FuseRequests) each step is marked "TURN STEP" in the count."""
    walls, steps, cpus, turn_cpus = [], {}, {}, []
    mp = way.mp
    for p in plan:
        t0, tc0, td0 = time.perf_counter(), B.children_cpu(), B.proc_cpu(pid)
        for step, fn in (
                ("grep", lambda: way.sh(["grep", "-rIl", "--exclude-dir=.git", p["word"], "."],
                                        cwd=mp, check=False)),
                ("read+edit+create+delete", lambda: way.sh(
                    [sys.executable, __file__, "--turn", mp, plan_file, str(p["turn"])])),
                ("sed -i", lambda: way.sh(["sed", "-i", "s/e/E/", p["sed"]], cwd=mp)),
                ("mv", lambda: way.sh(["mv", p["mv"][0], p["mv"][1]], cwd=mp)),
                ("git status", lambda: way.sh(["git", "status"], cwd=mp)),
                ("git diff --stat", lambda: way.sh(["git", "--no-pager", "diff", "--stat"], cwd=mp)),
                ("checkpoint", lambda: way.checkpoint(p["turn"]))):
            if reqs:
                reqs.mark(f"{p['turn']} {step}")
            s0, c0, d0 = time.perf_counter(), B.children_cpu(), B.proc_cpu(pid)
            fn()
            steps[step] = steps.get(step, 0.0) + time.perf_counter() - s0
            c = cpus.setdefault(step, [0.0, 0.0])
            c[0] += B.children_cpu() - c0
            c[1] += B.proc_cpu(pid) - d0
        walls.append(time.perf_counter() - t0)
        turn_cpus.append([round(B.children_cpu() - tc0, 4), round(B.proc_cpu(pid) - td0, 4)])
    return (walls, {k: round(v, 4) for k, v in steps.items()},
            {k: [round(x, 4) for x in v] for k, v in cpus.items()}, turn_cpus)


def w11_agent(suite, bench):
    """Workload 11 at each of `--agent-files`; `bench` is the bench module
    (for its CPU accounting)."""
    global B
    B = bench
    a = suite.args
    # `--variant` columns run as extra opfs ways.
    ways = [w for w in WAYS if w in a.agent_ways] + list(suite.peers) + list(suite.variants)
    if a.requests:
        import bench_reqs
    res = {}
    for n in a.agent_files:
        tmpl, files = template(suite, n)
        plan = make_plan(tmpl, files, a.agent_turns, a.agent_seed)
        plan_file = os.path.join(suite.work, f"agent-{n}.plan")
        with open(plan_file, "wb") as f:
            pickle.dump(plan, f)
        runs = {w: [] for w in ways}
        for r in range(a.runs):
            for w in ways:
                backing, fs = suite.fresh_backing()
                bench.sh(["cp", "-a", tmpl + "/.", backing])
                layer = w if w.startswith("opfs") or w in suite.peers else LAYER.get(w, "plain")
                mp, h = suite.mount(layer, backing, export=True)
                try:
                    pid = h and h["pid"]
                    # Each way's baseline (the shadow repo's first commit,
                    # the scan's first walk and copy, opfs's first export,
                    # which the daemon starts at mount) is untimed but
                    # recorded: an opfs way waits for it here, so that it
                    # does not run under the session.
                    c0, d0 = bench.children_cpu(), bench.proc_cpu(pid)
                    b0 = time.perf_counter()
                    way = Way(suite, w, backing, mp, h)
                    # `opfs export` waits for the daemon's background
                    # export; without one (`OPFS_EXPORT=0`) it would do the
                    # export itself, which that way does not pay for.
                    exports = w.startswith("opfs") and h.get("export")
                    if exports:
                        suite.opfs_cli(h, "export")
                    base = {"wall_s": round(time.perf_counter() - b0, 4),
                            "cpu_s": round(bench.children_cpu() - c0 + bench.proc_cpu(pid) - d0, 4)}
                    reqs = bench_reqs.FuseRequests(mp) if a.requests and h else None
                    c0, d0 = bench.children_cpu(), bench.proc_cpu(pid)
                    t0 = time.perf_counter()
                    walls, steps, step_cpu, turn_cpu = session(suite, way, plan_file, plan, pid, reqs)
                    wall = time.perf_counter() - t0
                    e0, f0 = bench.children_cpu(), bench.proc_cpu(pid)
                    if reqs:
                        reqs.mark("last export")
                    if exports:
                        suite.opfs_cli(h, "export")
                    step_cpu["last export"] = [round(bench.children_cpu() - e0, 4),
                                               round(bench.proc_cpu(pid) - f0, 4)]
                    work_cpu, daemon_cpu = bench.children_cpu() - c0, bench.proc_cpu(pid) - d0
                    cpu = work_cpu + daemon_cpu
                    run = {"wall_s": round(wall, 4), "cpu_s": round(cpu, 4),
                           "workload_cpu_s": round(work_cpu, 4), "daemon_cpu_s": round(daemon_cpu, 4),
                           "baseline": base,
                           "turn_wall_s": [round(x, 4) for x in walls], "step_wall_s": steps,
                           "step_cpu_s": step_cpu, "turn_cpu_s": turn_cpu}
                    if reqs:
                        run["requests"] = reqs.stop()
                        # "TURN STEP" -> {opcode: count}, and who sent them
                        # (counted by bench_reqs.py).
                        run["requests_by_step"] = reqs.parts
                        run["request_senders"] = reqs.senders
                    runs[w].append(run)
                    bench.log(f"  11 agent n={n} {w:<11} wall {wall:.3f} s  cpu {cpu:.3f} s"
                              f" (workload {work_cpu:.3f}, daemon {daemon_cpu:.3f};"
                              f" baseline untimed {base['cpu_s']:.3f})"
                              + (f"  requests {sum(run['requests'].values())}" if reqs else ""))
                finally:
                    suite.umount(h)
                    suite.drop_backing(backing, fs)
        res[n] = {}
        for w in ways:
            rs = runs[w]
            res[n][w] = {"median_wall_s": round(statistics.median(x["wall_s"] for x in rs), 4),
                         "median_cpu_s": round(statistics.median(x["cpu_s"] for x in rs), 4),
                         "runs": rs}
    suite.results["11 agent session"] = res


def table(results):
    res = results.get("11 agent session")
    if not res:
        return ""
    lines = ["", "**11 agent session** (median wall and CPU seconds, ratio to plain)", "",
             "| files | way | wall | CPU |", "| --- | --- | --- | --- |"]
    for n, by in res.items():
        base = by.get("plain")
        for w, r in by.items():
            cells = []
            for key in ("median_wall_s", "median_cpu_s"):
                ratio = f" ({r[key] / base[key]:.2f}×)" if base and base[key] else ""
                cells.append(f"{r[key]:.3f} s{ratio}")
            lines.append(f"| {n} | {w} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if sys.argv[1] == "--turn":
        run_turn(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif sys.argv[1] == "--scan":
        scan(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        sys.exit(__doc__)
