#!/usr/bin/env python3
"""The opfs benchmark suite. Run it through `scripts/bench`.

Each workload runs on the plain directory (the physical limit), the opfs
mount (`--no-export`), and the peers bindfs and fuse-overlayfs (no capture),
several times; the report gives medians and the ratio to the plain
directory. Workloads 8-10 compare opfs with the approaches used without a
filesystem layer (a shadow git repository, a stat scan) and measure the
store. Results go to OUT/results.json and OUT/table.md.

Conventions:
- Destructive workloads get a fresh backing directory and a fresh mount
  (and, for opfs, a fresh state dir) per run; setup is not timed.
- Read workloads (git status/diff, grep) run once untimed on each mount to
  warm it, then N timed runs on the same mount: they measure the steady
  state an agent sees when it runs the same command again.
- fuse-overlayfs runs with the backing directory as its lower layer and an
  empty upper layer (how an overlay sandbox sits over a project).
- Workloads 1, 4, 5, 6 and 7 interleave the layers: run 1 of every layer,
  then run 2 of every layer, ... so that a change in the machine's load
  during the run falls on all layers alike.
- The column `hp` is the floor: libfuse's passthrough_hp `--single`, a FUSE
  layer that does nothing, built from Debian's fuse3 source package on first
  use (bench_floor.py; `--no-hp` leaves it out, `--hp-bin PATH` takes
  another build).
- `--peer NAME=TEMPLATE` adds a column for any other FUSE filesystem: the
  shell command TEMPLATE, with `{src}` replaced by the backing directory
  and `{mnt}` by the mountpoint, must mount it and return (daemonize); the
  suite finds the daemon by the mountpoint on its command line (for its
  CPU time) and unmounts it with `umount`. A peer whose program is not
  found is skipped with a message. The peer also runs as a way of
  workload 11.
- `--requests` also counts the kernel's FUSE requests by opcode of each
  FUSE layer's run (`bench_reqs.py`, the `fuse:fuse_request_send`
  tracepoint); the count costs some CPU per request, so take times from a
  run without it.
"""

import argparse
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import time

import shlex

import bench_agent
import bench_floor
import bench_reqs
import bench_worktrees

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYERS = ["plain", "opfs", "bindfs", "overlay"]
# Results that are not a row of the layer tables: opfs against the tools
# used without it (8-10), the agent session (11), and the opfs-only
# measurements run by name (`--only export,gc-pause`), and the
# worktrees (`wt`, bench_worktrees.py).
OWN = ("8", "9", "10", "11", "wt", "export", "gc-pause")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def sh(cmd, cwd=None, env=None, check=True, quiet=True):
    out = subprocess.DEVNULL if quiet else None
    r = subprocess.run(cmd, cwd=cwd, env=env, shell=isinstance(cmd, str),
                       stdout=out, stderr=subprocess.PIPE)
    if check and r.returncode != 0:
        raise RuntimeError(f"{cmd!r} failed ({r.returncode}): {r.stderr.decode(errors='replace')[-2000:]}")
    return r


def out(cmd, cwd=None, env=None):
    return subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True).stdout.decode()


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def daemon_pid(mp):
    """The pid of the FUSE daemon serving `mp` (its command line names it)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if mp.encode() in args and not any(a.endswith(b"umount") for a in args):
            return int(pid)
    return None


def proc_cpu(pid):
    """CPU seconds (user + system) used so far by process `pid`, its
    threads and the children it waited for (the `git gc` an export
    spawns)."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def measured(fn, pid):
    """(wall seconds, CPU seconds of the workload's processes plus the FUSE
    daemon). CPU time is the steadier figure on a shared, noisy machine."""
    c0, d0 = children_cpu(), proc_cpu(pid)
    wall = timed(fn)
    return wall, children_cpu() - c0 + proc_cpu(pid) - d0


def rmtree(path):
    if os.path.lexists(path):
        sh(["rm", "-rf", path])


class Suite:
    def __init__(self, args):
        self.args = args
        self.work = args.work
        self.opfs = args.opfs
        self.results = {}
        self.n = 0
        self.scratch = None
        # Extra opfs columns: "opfs[NAME]" mounts with extra environment
        # (the daemon's tuning knobs), to compare levers within one run.
        self.variants = {}
        for v in args.variant:
            name, _, kvs = v.partition(":")
            self.variants[f"opfs[{name}]"] = dict(kv.split("=", 1) for kv in kvs.split(",") if kv)
        # Extra peers: NAME -> shell command template mounting {src} at {mnt}.
        self.peers = {}
        if args.hp:
            self.peers["hp"] = f"{shlex.quote(args.hp)} --single {{src}} {{mnt}}"
        for p in args.peer:
            name, eq, tmpl = p.partition("=")
            if not eq or not name or "{src}" not in tmpl or "{mnt}" not in tmpl:
                sys.exit(f"bench: --peer {p!r}: expected NAME='COMMAND ... {{src}} {{mnt}}' "
                         f"(the command mounts the directory {{src}} at {{mnt}} and returns)")
            if name in LAYERS or name.startswith("opfs") or name in bench_agent.WAYS:
                sys.exit(f"bench: --peer {name}: the name is taken by a built-in column; choose another")
            prog = shlex.split(tmpl)[0]
            if shutil.which(prog) is None:
                log(f"bench: peer {name} skipped: its program {prog} is not found "
                    f"(not installed, or not on PATH)")
                continue
            self.peers[name] = tmpl
        os.makedirs(self.work, exist_ok=True)

    # ---- layers -------------------------------------------------------

    def fresh(self, name):
        self.n += 1
        d = os.path.join(self.work, f"{name}-{self.n}")
        rmtree(d)
        os.makedirs(d)
        return d

    def mount(self, layer, backing, export=False):
        """Serves `backing` through `layer`; returns (path, handle)."""
        if layer == "plain":
            return backing, None
        mp = self.fresh("mnt")
        h = {"layer": layer, "mp": mp, "extra": []}
        if layer.startswith("opfs"):
            home = self.side("home")
            h["home"] = home
            extra = dict(self.variants.get(layer, {}))
            h["bin"] = extra.pop("OPFS_BIN", self.opfs)
            export = export and extra.pop("OPFS_EXPORT", "1") != "0"
            h["env"] = dict(os.environ, OPFS_HOME=home, **extra)
            h["export"] = export
            cmd = [h["bin"], "mount"] + ([] if export else ["--no-export"]) + [backing, mp]
            sh(cmd, env=h["env"])
        elif layer == "bindfs":
            sh(["bindfs", backing, mp])
        elif layer == "overlay":
            upper, wd = self.side("upper"), self.side("ovwork")
            h["extra"] = [upper, wd]
            sh(["fuse-overlayfs", "-o", f"lowerdir={backing},upperdir={upper},workdir={wd}", mp])
        elif layer in self.peers:
            sh(self.peers[layer].replace("{src}", shlex.quote(backing)).replace("{mnt}", shlex.quote(mp)))
        deadline = time.time() + 20
        while not os.path.ismount(mp):
            if time.time() > deadline:
                raise RuntimeError(f"{layer} did not mount at {mp}")
            time.sleep(0.02)
        h["pid"] = daemon_pid(mp)
        return mp, h

    def umount(self, h):
        if h is None:
            return
        mp = h["mp"]
        if h["layer"].startswith("opfs"):
            sh([h["bin"], "umount", mp], env=h["env"], check=False)
        deadline = time.time() + 20
        while os.path.ismount(mp):
            if not h["layer"].startswith("opfs") or time.time() > deadline - 15:
                sh(["umount", mp], check=False)
            if time.time() > deadline:
                sh(["umount", "-l", mp], check=False)
                break
            time.sleep(0.05)
        for d in [mp] + h["extra"] + ([h["home"]] if "home" in h else []):
            rmtree(d)

    def opfs_cli(self, h, *args):
        return out([h["bin"], "-C", h["mp"], *args], env=h["env"]).strip()

    def record(self, workload, layer, runs, **extra):
        times = [w for w, _ in runs]
        cpus = [c for _, c in runs]
        entry = {"times_s": [round(t, 4) for t in times],
                 "median_s": round(statistics.median(times), 4),
                 "cpu_s": [round(c, 4) for c in cpus],
                 "median_cpu_s": round(statistics.median(cpus), 4)}
        entry.update(extra)
        self.results.setdefault(workload, {})[layer] = entry
        log(f"  {workload:<28} {layer:<14} median {entry['median_s']:.3f} s  cpu {entry['median_cpu_s']:.3f} s  runs {entry['times_s']}")

    def layers(self):
        return [l for l in LAYERS if l in self.args.layers] + list(self.peers) + list(self.variants)

    # ---- inputs -------------------------------------------------------

    def registry_files(self, limit):
        """Up to `limit` (path, relpath) pairs of real source files from
        cargo's registry, in a stable order."""
        roots = sorted(os.path.join(os.path.expanduser("~/.cargo/registry/src"), d)
                       for d in os.listdir(os.path.expanduser("~/.cargo/registry/src")))
        files = []
        for root in roots:
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames.sort()
                for f in sorted(filenames):
                    p = os.path.join(dirpath, f)
                    if os.path.islink(p) or not os.path.isfile(p):
                        continue
                    files.append((p, os.path.relpath(p, root)))
                    if len(files) >= limit:
                        return files
        return files

    def source_tree(self, dest, limit):
        """Copies `limit` real source files into `dest`."""
        for src, rel in self.registry_files(limit):
            d = os.path.join(dest, rel)
            os.makedirs(os.path.dirname(d), exist_ok=True)
            shutil.copyfile(src, d)

    def archive(self):
        path = os.path.join(self.work, f"src-{self.args.untar_files}.tar.gz")
        if not os.path.exists(path):
            with tarfile.open(path, "w:gz") as t:
                for src, rel in self.registry_files(self.args.untar_files):
                    t.add(src, arcname="src/" + rel)
        return path

    def git_template(self):
        path = os.path.join(self.work, f"repo-{self.args.git_files}")
        if not os.path.exists(path):
            tmp = path + ".tmp"
            rmtree(tmp)
            os.makedirs(tmp)
            self.source_tree(tmp, self.args.git_files)
            env = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@b",
                       GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@b")
            sh(["git", "init", "-q"], cwd=tmp)
            # No automatic gc: a detached `git gc --auto` would still be
            # repacking the template while the runs copy it. Packed once,
            # in the foreground, like a repository that has seen a gc.
            sh(["git", "config", "gc.auto", "0"], cwd=tmp)
            sh(["git", "add", "-A"], cwd=tmp)
            sh(["git", "commit", "-q", "-m", "base"], cwd=tmp, env=env)
            sh(["git", "gc", "-q"], cwd=tmp)
            os.rename(tmp, path)
        return path

    @staticmethod
    def gen_tree(root, n, size=200):
        """n small files, 100 per directory."""
        for i in range(n):
            d = os.path.join(root, f"d{i // 100:05d}")
            if i % 100 == 0:
                os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, f"f{i:06d}.txt"), "wb") as f:
                f.write((b"line %d of a small file\n" % i) * (size // 24 + 1))

    # ---- workloads 1-7 --------------------------------------------------

    def side(self, name):
        """A directory a layer writes besides the backing directory (opfs's
        state dir, fuse-overlayfs's upper and work dirs): on the run's fresh
        filesystem when there is one, like a state dir on the same disk."""
        if self.scratch is None:
            return self.fresh(name)
        self.n += 1
        d = os.path.join(self.scratch, f"{name}-{self.n}")
        os.makedirs(d)
        return d

    def fresh_backing(self):
        """A fresh, empty backing directory; with --fresh-fs (the default)
        the root of a new ext4 filesystem (a loop-mounted image on the same
        disk). ext4 makes file creation slower while many inodes were freed
        in the last ~30 s (it skips "recently deleted" inodes), so without a
        fresh filesystem every layer would pay for the deletions of the
        layers measured before it."""
        d = self.fresh("b")
        if not self.args.fresh_fs:
            return d, None
        img = d + ".img"
        sh(["truncate", "-s", self.args.fs_size, img])
        sh(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=1,lazy_journal_init=1", img])
        sh(["mount", "-o", "loop", img, d])
        p = os.path.join(d, "p")
        os.mkdir(p)
        self.scratch = d
        return p, (d, img)

    def drop_backing(self, backing, fs):
        self.scratch = None
        if fs is None:
            rmtree(backing)
            return
        d, img = fs
        sh(["umount", d], check=False)
        if os.path.ismount(d):
            sh(["umount", "-l", d], check=False)
        rmtree(d)
        os.unlink(img)

    def one_run(self, layer, setup, work, export=False, reqs=None):
        """One run on a fresh backing directory and mount; `work(path,
        handle)` is timed. With `--requests` and a list `reqs`, the FUSE
        requests of the run (by opcode) are appended to `reqs`."""
        backing, fs = self.fresh_backing()
        setup(backing)
        path, h = self.mount(layer, backing, export)
        try:
            if h and h["layer"].startswith("opfs"):
                self.opfs_cli(h, "turn", "--label", "bench")
            counter = bench_reqs.FuseRequests(path) if self.args.requests and h and reqs is not None else None
            try:
                t = measured(lambda: work(path, h), h and h["pid"])
            finally:
                if counter:
                    reqs.append(counter.stop())
            return t
        finally:
            self.umount(h)
            self.drop_backing(backing, fs)

    def per_run(self, name, layer, setup, work, export=False):
        """`--runs` runs of one layer."""
        return [self.one_run(layer, setup, work, export) for _ in range(self.args.runs)]

    def interleaved(self, workload, setup, work):
        """`--runs` rounds of one run of every layer; records each layer's
        runs (and, with `--requests`, its FUSE requests per run)."""
        times = {l: [] for l in self.layers()}
        reqs = {l: [] for l in self.layers()}
        for _ in range(self.args.runs):
            for layer in self.layers():
                times[layer].append(self.one_run(layer, setup, work, reqs=reqs[layer]))
        for layer in self.layers():
            extra = {"requests": reqs[layer]} if reqs[layer] else {}
            self.record(workload, layer, times[layer], **extra)

    def w1_untar(self):
        arc = self.archive()
        self.interleaved("1 untar", lambda b: None, lambda p, h: sh(["tar", "xzf", arc, "-C", p]))
        if "opfs" in self.layers() and not self.args.no_export_row:
            # The export's cost: the same untar, then the turn boundary and a
            # foreground export of that turn (waits for the background one).
            for export in (False, True):
                def work(p, h):
                    sh(["tar", "xzf", arc, "-C", p])
                    self.opfs_cli(h, "turn")
                    if export:
                        self.opfs_cli(h, "export")
                t = self.per_run("untar", "opfs", lambda b: None, work, export=export)
                self.record("1b untar+turn(+export)", "opfs+export" if export else "opfs", t)

    def w23_git_grep(self):
        tmpl = self.git_template()
        for layer in self.layers():
            backing = self.fresh("b")
            sh(["cp", "-a", tmpl + "/.", backing])
            # 20 changed files for status/diff to find.
            changed = 0
            for dirpath, _, files in os.walk(backing):
                if "/.git" in dirpath:
                    continue
                for f in files:
                    if f.endswith(".rs") and changed < 20:
                        with open(os.path.join(dirpath, f), "a") as fh:
                            fh.write("\n// changed\n")
                        changed += 1
            path, h = self.mount(layer, backing)
            try:
                def git():
                    sh(["git", "status", "--porcelain"], cwd=path)
                    sh(["git", "--no-pager", "diff"], cwd=path)

                def grep():
                    sh(["grep", "-r", "--exclude-dir=.git", "-c", "XYZZY_NOT_THERE", "."],
                       cwd=path, check=False)
                for name, fn in (("2 git status+diff", git), ("3 grep -r", grep)):
                    fn()
                    self.record(name, layer, [measured(fn, h and h["pid"]) for _ in range(self.args.runs)])
            finally:
                self.umount(h)
                rmtree(backing)

    def build_sources(self):
        reg = os.path.expanduser("~/.cargo/registry/src")
        reg = os.path.join(reg, sorted(os.listdir(reg))[0])
        files = {}
        b3 = os.path.join(reg, "blake3-1.8.7", "c")
        for f in ["blake3.c", "blake3_dispatch.c", "blake3_portable.c", "blake3_sse2.c",
                  "blake3_sse41.c", "blake3_avx2.c", "blake3_avx512.c", "blake3.h",
                  "blake3_impl.h", "example.c"]:
            files[f] = os.path.join(b3, f)
        if not self.args.quick:
            sq = os.path.join(reg, "libsqlite3-sys-0.30.1", "sqlite3")
            for f in ["sqlite3.c", "sqlite3.h"]:
                files[f] = os.path.join(sq, f)
        return files

    def w4_build(self):
        files = self.build_sources()
        objs = [f[:-2] + ".o" for f in files if f.endswith(".c") and f != "example.c"]
        flags = {"blake3_sse2.o": "-msse2", "blake3_sse41.o": "-msse4.1",
                 "blake3_avx2.o": "-mavx2", "blake3_avx512.o": "-mavx512f -mavx512vl"}
        mk = ["CFLAGS = " + ("-O0" if self.args.quick else "-O1 -g"), "all: example", "example: example.o " + " ".join(objs),
              "\t$(CC) -o $@ $^ -lpthread -ldl -lm"]
        for o in objs + ["example.o"]:
            mk.append(f"{o}: {o[:-2]}.c\n\t$(CC) $(CFLAGS) {flags.get(o, '')} -c -o $@ $<")
        mk.append("clean:\n\trm -f *.o example")

        def setup(b):
            for name, src in files.items():
                shutil.copyfile(src, os.path.join(b, name))
            with open(os.path.join(b, "Makefile"), "w") as f:
                f.write("\n".join(mk) + "\n")
        self.interleaved("4 make -j2 (C)", setup, lambda p, h: sh(["make", "-s", "-j2"], cwd=p))

    def w5_rm(self):
        n = self.args.rm_files
        self.interleaved(f"5 rm -rf {n} files", lambda b: self.gen_tree(os.path.join(b, "t"), n),
                         lambda p, h: sh(["rm", "-rf", os.path.join(p, "t")]))

    def w6_meta(self):
        n = self.args.meta_files
        script = os.path.join(HERE, "scripts", "bench_meta.py")
        self.interleaved(f"6 metadata storm {n}", lambda b: None,
                         lambda p, h: sh([sys.executable, script, p, str(n)]))

    def w7_large(self):
        mib = self.args.large_mib
        script = os.path.join(HERE, "scripts", "bench_meta.py")
        self.interleaved(f"7a write {mib} MiB seq", lambda b: None,
                         lambda p, h: sh(["dd", "if=/dev/zero", f"of={p}/big", "bs=1M", f"count={mib}"]))

        def setup(b):
            sh(["dd", "if=/dev/urandom", f"of={b}/big", "bs=1M", f"count={mib}"])
        self.interleaved(f"7b 1000x4KiB into {mib} MiB", setup,
                         lambda p, h: sh([sys.executable, script, "--random-writes", f"{p}/big", "1000"]))

    # ---- workloads 8-10 -------------------------------------------------

    def w89_turn_rewind(self):
        genv = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@b",
                    GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@b")
        res8, res9 = {}, {}
        for n in self.args.tree_sizes:
            backing = self.fresh("b")
            self.gen_tree(backing, n)
            shadow = self.fresh("shadow")
            genv2 = dict(genv, GIT_DIR=shadow, GIT_WORK_TREE=backing)
            sh(["git", "init", "-q", "--bare", shadow])
            sh(["git", "add", "-A"], cwd=backing, env=genv2)
            base = out(["git", "write-tree"], cwd=backing, env=genv2).strip()
            step = max(1, n // 100)
            targets = [os.path.join(f"d{i // 100:05d}", f"f{i:06d}.txt") for i in range(0, n, step)][:100]

            def touch(root, k, tag):
                for rel in targets[:k]:
                    with open(os.path.join(root, rel), "a") as f:
                        f.write(f"changed {tag}\n")
            g, sc, rt = [], [], []
            for r in range(self.args.runs):
                touch(backing, 10, f"g{r}")

                def gitsnap():
                    sh(["git", "add", "-A"], cwd=backing, env=genv2)
                    sh(["git", "write-tree"], cwd=backing, env=genv2)
                g.append(timed(gitsnap))
                sc.append(timed(lambda: sh(["find", backing, "-printf", "%s %T@\n"])))
            # Rewind: restore the base tree after 100 changes.
            sh(["git", "read-tree", "--reset", "-u", base], cwd=backing, env=genv2)
            for r in range(self.args.runs):
                touch(backing, 100, f"r{r}")
                sh(["git", "add", "-A"], cwd=backing, env=genv2)
                rt.append(timed(lambda: sh(["git", "read-tree", "--reset", "-u", base],
                                           cwd=backing, env=genv2)))
            ot, orw = [], []
            if "opfs" in self.layers():
                path, h = self.mount("opfs", backing)
                try:
                    for r in range(self.args.runs):
                        touch(path, 10, f"o{r}")
                        ot.append(timed(lambda: self.opfs_cli(h, "turn")))
                    for r in range(self.args.runs):
                        start = self.opfs_cli(h, "turn")
                        touch(path, 100, f"w{r}")
                        orw.append(timed(lambda: self.opfs_cli(h, "rewind", start)))
                finally:
                    self.umount(h)
            rmtree(backing)
            rmtree(shadow)
            med = lambda xs: round(statistics.median(xs), 4) if xs else None
            res8[n] = {"opfs turn": med(ot), "git add -A && write-tree": med(g), "stat scan (find)": med(sc),
                       "runs": {"opfs": ot, "git": g, "scan": sc}}
            res9[n] = {"opfs rewind": med(orw), "git read-tree -u": med(rt),
                       "runs": {"opfs": orw, "git": rt}}
            log(f"  8/9 n={n}: {res8[n]} {res9[n]}")
        self.results["8 turn boundary (10 changed)"] = res8
        self.results["9 rewind 100 files"] = res9

    def w_export(self):
        """`opfs export` on a tree of N files (`--export-files`, default
        10,000): the first export (the baseline read of the whole project
        plus one turn), then the incremental export of one more turn that
        changed one file. Wall seconds of each, loose objects written, and
        the repository's size; `git fsck --strict` must pass."""
        n = self.args.export_files
        backing = self.fresh("b")
        self.gen_tree(backing, n)
        path, h = self.mount("opfs", backing)
        git_dir = self.side("export.git")
        res = {"files": n}
        try:
            def loose():
                return sum(len(fs) for d, _, fs in os.walk(os.path.join(git_dir, "objects"))
                           if len(os.path.basename(d)) == 2)
            for step, rel in (("first", "d00000/f000000.txt"), ("second", f"d{(n // 2) // 100:05d}/f{n // 2:06d}.txt")):
                with open(os.path.join(path, rel), "a") as f:
                    f.write(f"changed before the {step} export\n")
                self.opfs_cli(h, "turn")
                before = loose() if os.path.isdir(git_dir) else 0
                wall = timed(lambda: self.opfs_cli(h, "export", "--git-dir", git_dir, "--json"))
                res[f"{step} export s"] = round(wall, 3)
                res[f"{step} export loose objects"] = loose() - before
            sh(["git", "--git-dir", git_dir, "fsck", "--strict", "--no-dangling"])
            res["repository bytes"] = dir_bytes(git_dir)
        finally:
            self.umount(h)
            rmtree(backing)
            rmtree(git_dir)
        log(f"  export: {res}")
        self.results["export"] = res

    def w_gc_pause(self):
        """How long `opfs gc` while mounted makes the agent's writes wait
        (`docs/design.md`, "Retention while mounted"): T turns
        (`--gc-turns`, default 100) that each rewrite F files
        (`--gc-files`, default 200; one in ten of 20 KB, the rest 100 B),
        then `gc --keep 10` while a writer rewrites small files through the
        mount. gc's report (`paused_ms`: how long mutations waited), its
        wall time, and the writer's longest write."""
        backing = self.fresh("b")
        path, h = self.mount("opfs", backing)
        res = {"turns": self.args.gc_turns, "files": self.args.gc_files}
        try:
            for _ in range(self.args.gc_turns):
                for i in range(self.args.gc_files):
                    with open(os.path.join(path, f"f{i}"), "wb") as f:
                        f.write(os.urandom(100 if i % 10 else 20000))
                self.opfs_cli(h, "turn")
            st = json.loads(self.opfs_cli(h, "status", "--json"))
            res["records"], res["store_bytes"] = st["records"], st["store_bytes"]
            writer = subprocess.Popen([sys.executable, "-c", GC_WRITER, path], stdout=subprocess.PIPE)
            # gc starts once the writer has written (it prints its first line).
            writer.stdout.readline()
            t0 = time.perf_counter()
            report = json.loads(self.opfs_cli(h, "gc", "--keep", "10", "--json"))
            res["gc wall s"] = round(time.perf_counter() - t0, 3)
            res.update({k: report.get(k) for k in ("dropped_turns", "records_deleted", "blobs_removed", "paused_ms")})
            writes, worst = writer.communicate()[0].decode().split()
            res["writer writes"], res["writer longest write ms"] = int(writes), float(worst)
        finally:
            self.umount(h)
            rmtree(backing)
        log(f"  gc-pause: {res}")
        self.results["gc-pause"] = res

    def w10_store(self):
        """State growth: the whole state dir (index, blobs,
        capture log, export.git, logs) of a mount with the export on, for a
        tree of small files plus one large file: after the baseline, each of
        10 small edits, one 4 KiB write into the large file, and a rewind.
        Each turn is followed by `opfs export`, which waits for the daemon's
        background export and catches up, so the export is counted."""
        if "opfs" not in self.layers():
            return
        n, big_mib = self.args.growth_files, self.args.growth_big_mib
        backing = self.fresh("b")
        self.gen_tree(backing, n, size=1000)
        big = os.path.join(backing, "big.bin")
        with open(big, "wb") as f:
            for _ in range(big_mib):
                f.write(os.urandom(1 << 20))
        tree_bytes = sum(os.lstat(os.path.join(d, f)).st_size
                         for d, _, fs in os.walk(backing) for f in fs)
        gz = os.path.join(self.work, "w10-tree.tar.gz")
        sh(["tar", "-C", backing, "-czf", gz, "."])
        tree_gz = os.path.getsize(gz)
        os.unlink(gz)
        path, h = self.mount("opfs", backing, export=True)
        rows = []

        def state_bytes():
            """(whole state dir, of which export.git): apparent bytes."""
            total = export = 0
            for dirpath, _, files in os.walk(h["home"]):
                for f in files:
                    try:
                        size = os.lstat(os.path.join(dirpath, f)).st_size
                    except OSError:
                        continue
                    total += size
                    if "/export.git" in dirpath:
                        export += size
            return total, export

        def step(label, written, fn):
            before = state_bytes()
            t0 = time.time()
            fn()
            self.opfs_cli(h, "turn")
            self.opfs_cli(h, "export")
            after = state_bytes()
            rows.append({"turn": label, "bytes written": written,
                         "state dir growth": after[0] - before[0],
                         "export growth": after[1] - before[1],
                         "seconds": round(time.time() - t0, 2)})
            log(f"  10 {label}: wrote {written} B, state dir +{after[0] - before[0]} B "
                f"(export +{after[1] - before[1]} B) in {time.time() - t0:.1f} s")
        try:
            t0 = time.time()
            self.opfs_cli(h, "export")  # waits for the baseline
            base = state_bytes()
            rows.append({"turn": f"baseline ({n} files + {big_mib} MiB, {tree_bytes} B; tar.gz {tree_gz} B)",
                         "bytes written": 0, "state dir growth": base[0], "export growth": base[1],
                         "seconds": round(time.time() - t0, 2)})
            log(f"  10 baseline: state dir {base[0]} B (export {base[1]} B), tree {tree_bytes} B, "
                f"tar.gz {tree_gz} B, {time.time() - t0:.1f} s")
            names = [os.path.join(f"d{i // 100:05d}", f"f{i:06d}.txt") for i in range(n)]
            rng = random.Random(1)
            for k, rel in enumerate(rng.sample(names, 10)):
                def edit(rel=rel):
                    with open(os.path.join(path, rel), "r+b") as f:
                        f.seek(0)
                        f.write(b"X" * 64)
                step(f"small edit {k + 1} (64 B)", 64, edit)

            def big_write():
                with open(os.path.join(path, "big.bin"), "r+b") as f:
                    f.seek((big_mib << 20) // 2)
                    f.write(os.urandom(4096))
            step("4 KiB write into the large file", 4096, big_write)
            step("rewind to turn 2", 0, lambda: self.opfs_cli(h, "rewind", "2"))
            end = state_bytes()
            rows.append({"turn": "state dir at the end", "bytes written": 0,
                         "state dir growth": end[0], "export growth": end[1], "seconds": 0})
        finally:
            self.umount(h)
            rmtree(backing)
        self.results["10 store growth"] = rows

    # ---- report ---------------------------------------------------------

    def table(self):
        main = any(not wl.startswith(OWN) for wl in self.results)
        return ((self.table_of("median_s", "Wall time, median (ratio to plain)") + "\n"
                 + self.table_of("median_cpu_s", "CPU time of the workload plus the FUSE daemon, median (ratio to plain)")
                 + self.table_requests()
                 if main else "") + self.table_89_10() + bench_agent.table(self.results)
                + bench_worktrees.table(self.results))

    def table_requests(self):
        """FUSE requests per run (median of the runs' totals), when counted."""
        rows = [(wl, by) for wl, by in self.results.items()
                if not wl.startswith(OWN) and any("requests" in e for e in by.values())]
        if not rows:
            return ""
        cols = [l for l in self.layers() if l != "plain"]
        lines = ["", "**FUSE requests per run** (median total; `--requests`)", "",
                 "| workload | " + " | ".join(cols) + " |", "| --- |" + " --- |" * len(cols)]
        for wl, by in rows:
            cells = []
            for l in cols:
                rs = by.get(l, {}).get("requests")
                cells.append(f"{statistics.median(sum(v for k, v in r.items() if k != 'lost') for r in rs):.0f}"
                             if rs else "")
            lines.append(f"| {wl} | " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"

    def table_of(self, key, title):
        lines = [f"**{title}**", ""]
        layers = self.layers()
        export = any("opfs+export" in by for by in self.results.values())
        cols = layers + (["opfs+export"] if export else [])
        lines.append("| workload | " + " | ".join(cols) + " |")
        lines.append("| --- |" + " --- |" * len(cols))
        for wl, by in self.results.items():
            if wl.startswith(OWN):
                continue
            cells = []
            for l in cols:
                if l not in by:
                    cells.append("")
                    continue
                m = by[l][key]
                base = by.get("plain", {}).get(key)
                ratio = f" ({m / base:.2f}×)" if base and l != "plain" else ""
                cells.append(f"{m:.3f} s{ratio}")
            lines.append(f"| {wl} | " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"

    def table_89_10(self):
        lines = []
        for key, cols in (("8 turn boundary (10 changed)", ["opfs turn", "git add -A && write-tree", "stat scan (find)"]),
                          ("9 rewind 100 files", ["opfs rewind", "git read-tree -u"])):
            if key not in self.results:
                continue
            lines += ["", f"**{key}** (median seconds)", "",
                      "| files | " + " | ".join(cols) + " |", "| --- |" + " --- |" * len(cols)]
            for n, r in self.results[key].items():
                lines.append(f"| {n} | " + " | ".join("" if r[c] is None else f"{r[c]:.3f}" for c in cols) + " |")
        for key in ("export", "gc-pause"):
            if key in self.results:
                lines += ["", f"**{key}**", "", "| | |", "| --- | --- |"]
                lines += [f"| {k} | {v} |" for k, v in self.results[key].items()]
        if "10 store growth" in self.results:
            lines += ["", "**10 state growth** (apparent bytes of the whole state dir, export on)", "",
                      "| step | bytes written | state dir growth | of which export.git | seconds |",
                      "| --- | --- | --- | --- | --- |"]
            for r in self.results["10 store growth"]:
                lines.append(f"| {r['turn']} | {r['bytes written']} | {r['state dir growth']} | "
                             f"{r['export growth']} | {r['seconds']} |")
        return "\n".join(lines) + "\n"


# The writer of `gc-pause`: rewrites small files through the mount for
# 6 s, prints a line once it has started, then "WRITES LONGEST_MS".
GC_WRITER = """
import sys, time
m = sys.argv[1]; worst = 0; n = 0; end = time.time() + 6
while time.time() < end:
    a = time.time()
    with open(f"{m}/w{n % 100}", "wb") as f:
        f.write(b"x" * 100)
    worst = max(worst, time.time() - a); n += 1
    if n == 1:
        print("started", flush=True)
print(n, round(worst * 1000, 1))
"""


def dir_bytes(root):
    return sum(os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(root) for f in fs)


def machine():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 30
    fs = out(["stat", "-f", "-c", "%T", "/work"]).strip() if os.path.exists("/work") else ""
    return {"kernel": platform.release(), "cpu": cpu, "cores": os.cpu_count(), "mem_gib": mem,
            "fs": fs}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, 2 runs (~3 minutes)")
    ap.add_argument("--runs", type=int)
    ap.add_argument("--work", default=os.environ.get("BENCH_WORK", "/tmp/opfs-bench"))
    ap.add_argument("--out", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(HERE, "target")), "bench"))
    ap.add_argument("--opfs", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(HERE, "target")), "release", "opfs"))
    ap.add_argument("--layers", default=",".join(LAYERS))
    ap.add_argument("--only", default="", help="comma-separated workloads, e.g. 1,5,6; "
                    "the opfs-only measurements export and gc-pause run only when named")
    ap.add_argument("--export-files", type=int, default=10000, help="files of the export measurement")
    ap.add_argument("--gc-turns", type=int, default=100, help="turns before gc in gc-pause")
    ap.add_argument("--gc-files", type=int, default=200, help="files each turn rewrites in gc-pause")
    ap.add_argument("--untar-files", type=int)
    ap.add_argument("--git-files", type=int)
    ap.add_argument("--rm-files", type=int)
    ap.add_argument("--meta-files", type=int)
    ap.add_argument("--large-mib", type=int)
    ap.add_argument("--tree-sizes")
    ap.add_argument("--growth-files", type=int, help="workload 10 small files (default 50000; quick 3000)")
    ap.add_argument("--growth-big-mib", type=int, help="workload 10 large file in MiB (default 500; quick 16)")
    ap.add_argument("--agent-files", help="workload 11 tree sizes (default 3000,30000; quick 3000)")
    ap.add_argument("--agent-turns", type=int, default=6)
    ap.add_argument("--agent-seed", type=int, default=11)
    ap.add_argument("--agent-ways", default=",".join(bench_agent.WAYS))
    ap.add_argument("--wt-create-files", help="workload wt: tree sizes (empty files) of "
                    "`worktree create` (default 1000,100000; quick 1000,10000; 0 leaves it out)")
    ap.add_argument("--wt-creates", type=int, default=5, help="workload wt: creates per size")
    ap.add_argument("--wt-files", help="workload wt: tree sizes of the reads in a worktree against "
                    "the main mount (default 10000,60000; quick 3000; 0 leaves it out)")
    ap.add_argument("--wt-eight-files", type=int,
                    help="workload wt: tree size of eight worktrees at once against one "
                         "(default 10000; quick 3000; 0 leaves it out)")
    ap.add_argument("--wt-agents", type=int, default=8, help="workload wt: worktrees at once")
    ap.add_argument("--requests", action="store_true",
                    help="workloads 1, 4-7 and 11 also count each FUSE layer's requests by opcode "
                         "(bench_reqs.py; costs CPU per request: take times from a run without it)")
    ap.add_argument("--no-export-row", action="store_true")
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME:K=V,... an extra opfs column mounted with these environment "
                         "variables (e.g. open:OPFS_NO_OPEN=0); OPFS_BIN=PATH "
                         "mounts with another opfs binary (e.g. the build before a change); "
                         "OPFS_EXPORT=0 mounts with --no-export")
    ap.add_argument("--peer", action="append", default=[], metavar="NAME=TEMPLATE",
                    help="an extra FUSE peer column: TEMPLATE is a shell command that mounts the "
                         "directory {src} at {mnt} and returns (the daemon in the background), e.g. "
                         "hp='passthrough_hp {src} {mnt}'; unmounted with umount; skipped with a "
                         "message when its program is not found; also a way of workload 11")
    ap.add_argument("--no-hp", action="store_true",
                    help="leave out the do-nothing floor column hp (libfuse's passthrough_hp --single, "
                         "built from Debian's fuse3 source package into CARGO_TARGET_DIR/floor when missing)")
    ap.add_argument("--hp-bin", help="the passthrough_hp binary of the hp column (default: the cached build)")
    ap.add_argument("--label", default="")
    ap.add_argument("--no-fresh-fs", dest="fresh_fs", action="store_false",
                    help="destructive workloads run in a plain subdirectory of --work instead of "
                         "on a fresh loop-mounted ext4 filesystem per run")
    ap.add_argument("--fs-size", default="4G", help="size of each fresh filesystem image (sparse)")
    a = ap.parse_args()
    q = a.quick
    a.runs = a.runs or (2 if q else 3)
    a.untar_files = a.untar_files or (2000 if q else 5000)
    a.git_files = a.git_files or (3000 if q else 10000)
    a.growth_files = a.growth_files or (3000 if q else 50000)
    a.growth_big_mib = a.growth_big_mib or (16 if q else 500)
    a.rm_files = a.rm_files or (5000 if q else 20000)
    a.meta_files = a.meta_files or (3000 if q else 10000)
    a.large_mib = a.large_mib or (256 if q else 1024)
    a.tree_sizes = [int(x) for x in (a.tree_sizes or ("1000,10000" if q else "1000,10000,100000")).split(",")]
    a.agent_files = [int(x) for x in (a.agent_files or ("3000" if q else "3000,30000")).split(",")]
    a.agent_ways = a.agent_ways.split(",")
    a.wt_create_files = [int(x) for x in (a.wt_create_files or ("1000,10000" if q else "1000,100000")).split(",") if x and int(x)]
    a.wt_files = [int(x) for x in (a.wt_files or ("3000" if q else "10000,60000")).split(",") if x and int(x)]
    if a.wt_eight_files is None:
        a.wt_eight_files = 3000 if q else 10000
    unknown = [w for w in a.agent_ways if w not in bench_agent.WAYS]
    if unknown:
        ap.error(f"--agent-ways: unknown way(s) {', '.join(unknown)}; "
                 f"the ways are {', '.join(bench_agent.WAYS)} (fuse-overlayfs is `overlay`)")
    a.layers = a.layers.split(",")
    only = set(a.only.split(",")) if a.only else None
    for layer, tool in [("bindfs", "bindfs"), ("overlay", "fuse-overlayfs")]:
        if layer in a.layers and shutil.which(tool) is None:
            sys.exit(f"bench: {tool} is missing (apt-get install bindfs fuse-overlayfs)")
    if not os.access(a.opfs, os.X_OK):
        sys.exit(f"bench: {a.opfs} is missing (cargo build --release)")
    a.hp = None
    if not a.no_hp:
        if a.hp_bin:
            a.hp = a.hp_bin
        else:
            try:
                a.hp = bench_floor.ensure(os.environ.get("CARGO_TARGET_DIR", os.path.join(HERE, "target")), log)
            except bench_floor.FloorError as e:
                sys.exit(f"bench: could not build the floor column hp: {e}\n"
                         f"(it needs the Debian package registry; pass --hp-bin PATH to use a built "
                         f"passthrough_hp, or --no-hp to run without the floor)")
    s = Suite(a)
    t0 = time.time()
    steps = [("1", s.w1_untar), ("2", s.w23_git_grep), ("4", s.w4_build), ("5", s.w5_rm),
             ("6", s.w6_meta), ("7", s.w7_large), ("8", s.w89_turn_rewind), ("10", s.w10_store),
             ("11", lambda: bench_agent.w11_agent(s, sys.modules[__name__])),
             ("wt", lambda: bench_worktrees.w_worktrees(s, sys.modules[__name__])),
             ("export", s.w_export), ("gc-pause", s.w_gc_pause)]
    try:
        for key, fn in steps:
            if only and key not in only and not (key == "2" and "3" in only) and not (key == "8" and "9" in only):
                continue
            if not only and key in ("export", "gc-pause"):
                continue
            log(f"workload {key}")
            fn()
    finally:
        for d in os.listdir(s.work):
            p = os.path.join(s.work, d)
            if os.path.ismount(p):
                sh(["umount", "-l", p], check=False)
    elapsed = time.time() - t0
    os.makedirs(a.out, exist_ok=True)
    cmd = "scripts/bench " + " ".join(sys.argv[1:])
    doc = {"command": cmd.strip(), "label": a.label, "machine": machine(),
           "date": time.strftime("%Y-%m-%d %H:%M:%S"), "elapsed_s": round(elapsed, 1),
           "opfs_commit": out(["git", "-C", HERE, "rev-parse", "--short", "HEAD"]).strip(),
           "config": {k: v for k, v in vars(a).items() if k not in ("opfs", "out", "work")},
           "results": s.results}
    tag = f"-{a.label}" if a.label else ""
    with open(os.path.join(a.out, f"results{tag}.json"), "w") as f:
        json.dump(doc, f, indent=1)
    table = s.table()
    with open(os.path.join(a.out, f"table{tag}.md"), "w") as f:
        f.write(table)
    print(table)
    log(f"{elapsed:.0f} s; results in {a.out}")


if __name__ == "__main__":
    main()
