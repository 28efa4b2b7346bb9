//! History commands and the shadow git export, on real mounts.
//!
//! Each test mounts a temp project with the `opfs` binary (OPFS_HOME in a
//! temp dir), records turns through the mount, takes the project's manifest
//! at the end of each turn, and compares what `opfs export` wrote with stock
//! `git` (`ls-tree -r`, `cat-file`, `fsck --strict`).

// A failed unwrap is a failed test, with the error in the message.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// path → (git mode, bytes): files and symlinks, as git sees a tree.
type Manifest = BTreeMap<Vec<u8>, (String, Vec<u8>)>;

/// A project mounted by the `opfs` binary: the shared `common::Fixture`
/// (temp dirs, the pinned environment, unmount on drop), with the output of
/// commands kept as raw bytes.
struct Fixture {
    fx: common::Fixture,
    project: PathBuf,
    mp: PathBuf,
}

impl Fixture {
    fn new(setup: impl FnOnce(&Path), mount_args: &[&str]) -> Fixture {
        let fx = common::Fixture::new();
        setup(&fx.project);
        fx.mount_with(mount_args);
        Fixture {
            project: fx.project.clone(),
            mp: fx.mnt.clone(),
            fx,
        }
    }

    /// The fixture's temp root (where git dirs and work trees go).
    fn root(&self) -> &Path {
        self.fx.root()
    }

    /// Runs `opfs -C <mountpoint> ARGS`.
    fn opfs(&self, args: &[&str]) -> Output {
        let mut a: Vec<&OsStr> = vec!["-C".as_ref(), self.mp.as_os_str()];
        a.extend(args.iter().map(OsStr::new));
        self.fx
            .opfs_command(&a)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// Runs `opfs -C <mountpoint> ARGS`, which must succeed; its stdout.
    fn ok(&self, args: &[&str]) -> Vec<u8> {
        let out = self.opfs(args);
        assert!(
            out.status.success(),
            "opfs {args:?} failed ({}): {}",
            out.status,
            stderr(&out)
        );
        out.stdout
    }

    fn turn(&self, label: &str) -> u64 {
        let out = self.ok(&["turn", "--label", label]);
        String::from_utf8(out).unwrap().trim().parse().unwrap()
    }

    fn m(&self, rel: &str) -> PathBuf {
        self.mp.join(rel)
    }

    fn state_dir(&self) -> PathBuf {
        self.fx.state_dir()
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn bytes_path(root: &Path, rel: &[u8]) -> PathBuf {
    root.join(OsStr::from_bytes(rel))
}

/// The files and symlinks under `root` (its top-level `.git` left out), as
/// git sees a tree: the shared walk of `common`, in git's terms.
fn manifest(root: &Path) -> Manifest {
    let mut out = Manifest::new();
    for common::Found { rel, path, meta } in common::walk_tree(root, &[b".git"]).unwrap() {
        if meta.file_type().is_symlink() {
            out.insert(rel, ("120000".into(), common::link_target(&path).unwrap()));
        } else if meta.is_file() {
            let mode = if meta.permissions().mode() & 0o111 != 0 {
                "100755"
            } else {
                "100644"
            };
            out.insert(rel, (mode.into(), fs::read(&path).unwrap()));
        }
    }
    out
}

/// Writes `m` into the empty directory `root`.
fn materialize(m: &Manifest, root: &Path) {
    for (rel, (mode, data)) in m {
        let p = bytes_path(root, rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        if mode == "120000" {
            symlink(OsStr::from_bytes(data), &p).unwrap();
        } else {
            fs::write(&p, data).unwrap();
            let perm = if mode == "100755" { 0o755 } else { 0o644 };
            fs::set_permissions(&p, fs::Permissions::from_mode(perm)).unwrap();
        }
    }
}

use common::{git_in as git, git_in_ok as git_ok, wait_for};

/// The tree of `rev` as stock git reads it: `ls-tree -r -z` for modes and
/// ids, `cat-file --batch` for the bytes.
fn git_manifest(git_dir: &Path, rev: &str) -> Manifest {
    let listing = git_ok(git_dir, &["ls-tree", "-r", "-z", rev]);
    let mut entries = Vec::new();
    for rec in listing.split(|&b| b == 0).filter(|r| !r.is_empty()) {
        let tab = rec.iter().position(|&b| b == b'\t').unwrap();
        let meta = String::from_utf8(rec[..tab].to_vec()).unwrap();
        let mut parts = meta.split(' ');
        let mode = parts.next().unwrap().to_string();
        assert_eq!(parts.next(), Some("blob"), "{meta}");
        let oid = parts.next().unwrap().to_string();
        entries.push((rec[tab + 1..].to_vec(), mode, oid));
    }
    let mut child = Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .args(["cat-file", "--batch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let ids: String = entries.iter().map(|e| format!("{}\n", e.2)).collect();
    let writer = std::thread::spawn(move || stdin.write_all(ids.as_bytes()).unwrap());
    let mut all = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut all).unwrap();
    writer.join().unwrap();
    assert!(child.wait().unwrap().success());
    let mut out = Manifest::new();
    let mut pos = 0;
    for (path, mode, oid) in entries {
        let nl = pos + all[pos..].iter().position(|&b| b == b'\n').unwrap();
        let head = String::from_utf8(all[pos..nl].to_vec()).unwrap();
        let size: usize = head.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(head.starts_with(&oid), "{head} vs {oid}");
        let data = all[nl + 1..nl + 1 + size].to_vec();
        pos = nl + 1 + size + 1;
        out.insert(path, (mode, data));
    }
    out
}

fn show_diff(a: &Manifest, b: &Manifest) -> String {
    let mut s = String::new();
    for (k, v) in a {
        match b.get(k) {
            None => s += &format!("only in export: {}\n", String::from_utf8_lossy(k)),
            Some(w) if w != v => s += &format!("differs: {}\n", String::from_utf8_lossy(k)),
            _ => {}
        }
    }
    for k in b.keys().filter(|k| !a.contains_key(*k)) {
        s += &format!("only in project: {}\n", String::from_utf8_lossy(k));
    }
    s
}

fn assert_tree(git_dir: &Path, rev: &str, expected: &Manifest) {
    let got = git_manifest(git_dir, rev);
    assert!(
        &got == expected,
        "tree of {rev} differs from the project:\n{}",
        show_diff(&got, expected)
    );
}

/// Every file under `dir` with its bytes and mode (for byte-identity checks).
fn snapshot_dir(dir: &Path) -> BTreeMap<PathBuf, (u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let md = fs::symlink_metadata(&p).unwrap();
            if md.is_dir() {
                stack.push(p.clone());
                out.insert(p, (md.permissions().mode(), Vec::new()));
            } else {
                out.insert(p.clone(), (md.permissions().mode(), fs::read(&p).unwrap()));
            }
        }
    }
    out
}

fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).unwrap()
}

fn initial_project(p: &Path) {
    fs::create_dir_all(p.join(".git/objects/ab")).unwrap();
    fs::write(p.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    fs::write(p.join(".git/objects/ab/cdef"), b"\x78\x01binary-ish").unwrap();
    fs::create_dir_all(p.join("src")).unwrap();
    fs::write(
        p.join("src/main.rs"),
        "fn main() {\n    println!(\"hi\");\n}\n",
    )
    .unwrap();
    fs::write(p.join("README"), "readme line 1\nline 2\n").unwrap();
    fs::write(p.join("bin.dat"), b"\x00\x01\x02binary\x00").unwrap();
    fs::write(p.join("run.sh"), "#!/bin/sh\necho run\n").unwrap();
    fs::set_permissions(p.join("run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    symlink("README", p.join("link")).unwrap();
    fs::create_dir_all(p.join("dir/sub")).unwrap();
    fs::write(p.join("dir/sub/deep.txt"), "deep\n").unwrap();
    fs::write(p.join(OsStr::from_bytes(b"caf\xe9.txt")), "latin-1 name\n").unwrap();
}

#[test]
fn export_matches_the_project_at_the_end_of_every_turn() {
    let f = Fixture::new(initial_project, &["--no-export"]);
    let mut ends: BTreeMap<u64, Manifest> = BTreeMap::new();
    let start = manifest(&f.project);

    // Turn 1: text edits, a mode change, a delete, a directory rename, a
    // non-UTF-8 name, an empty directory, and the agent touching .git.
    fs::write(
        f.m("src/main.rs"),
        "fn main() {\n    println!(\"hello\");\n}\n",
    )
    .unwrap();
    fs::set_permissions(f.m("src/main.rs"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(f.m("new.txt"), "new file\n").unwrap();
    fs::remove_file(f.m("README")).unwrap();
    fs::rename(f.m("dir/sub"), f.m("dir/moved")).unwrap();
    fs::write(bytes_path(&f.mp, b"\xff\xfe.txt"), "odd name\n").unwrap();
    fs::create_dir(f.m("empty")).unwrap();
    fs::write(f.m(".git/HEAD"), "ref: refs/heads/agent\n").unwrap();
    ends.insert(1, manifest(&f.project));
    assert_eq!(f.turn("two"), 2);

    // Turn 2: a symlink retargeted, a file replaced by a directory, a
    // binary change, an edit under a non-UTF-8 name.
    fs::remove_file(f.m("link")).unwrap();
    symlink("src", f.m("link")).unwrap();
    fs::remove_file(f.m("new.txt")).unwrap();
    fs::create_dir(f.m("new.txt")).unwrap();
    fs::write(f.m("new.txt/inner"), "inner\n").unwrap();
    fs::write(f.m("bin.dat"), b"\x00changed\x00binary").unwrap();
    fs::write(
        bytes_path(&f.mp, b"caf\xe9.txt"),
        "latin-1 name\nsecond line\n",
    )
    .unwrap();
    ends.insert(2, manifest(&f.project));
    assert_eq!(f.turn("three"), 3);

    // Turn 3: a directory tree removed, an executable edited.
    fs::remove_dir_all(f.m("dir")).unwrap();
    fs::write(f.m("run.sh"), "#!/bin/sh\necho run\necho again\n").unwrap();
    ends.insert(3, manifest(&f.project));

    // Rewind to the start of turn 2: turn 3 closes, turn 4 is the rewind.
    let r = json(&f.ok(&["rewind", "2", "--json"]));
    assert_eq!(r["turn"], 4, "{r}");
    assert_eq!(r["open_turn"], 5, "{r}");
    ends.insert(4, manifest(&f.project));
    assert_eq!(
        ends[&4], ends[&1],
        "the rewind restored the start of turn 2"
    );

    // Turn 5: one more edit, then close it.
    fs::write(f.m("src/main.rs"), "fn main() {}\n").unwrap();
    ends.insert(5, manifest(&f.project));
    assert_eq!(f.turn("six"), 6);

    // --no-export: nothing was exported behind our back.
    assert!(!f.state_dir().join("export.git").exists());

    let git_dir = f.root().join("shadow.git");
    let dot_git_before = snapshot_dir(&f.project.join(".git"));
    let report = json(&f.ok(&["export", "--git-dir", git_dir.to_str().unwrap(), "--json"]));
    assert_eq!(report["baseline"], true, "{report}");
    assert_eq!(
        report["turns"],
        serde_json::json!([1, 2, 3, 4, 5]),
        "{report}"
    );
    assert_eq!(
        snapshot_dir(&f.project.join(".git")),
        dot_git_before,
        "the project's .git changed during the export"
    );

    assert_tree(&git_dir, "refs/opfs/baseline", &start);
    for (n, m) in &ends {
        assert_tree(&git_dir, &format!("refs/opfs/turns/{n}"), m);
    }
    assert_tree(&git_dir, "refs/heads/opfs", &ends[&5]);
    assert_tree(&git_dir, "HEAD", &ends[&5]);
    let fsck = git(&git_dir, &["fsck", "--strict", "--no-dangling"]);
    assert!(
        fsck.status.success(),
        "git fsck --strict: {}{}",
        stderr(&fsck),
        String::from_utf8_lossy(&fsck.stdout)
    );
    assert!(fsck.stderr.is_empty(), "fsck complained: {}", stderr(&fsck));

    // One commit per turn on top of the baseline, labels and turn numbers
    // in the messages, author time = turn end.
    let subjects = String::from_utf8(git_ok(&git_dir, &["log", "--format=%s"])).unwrap();
    assert_eq!(
        subjects.lines().collect::<Vec<_>>(),
        vec![
            "Turn 5 (agent)",
            "Turn 4: rewind to turn 2",
            "Turn 3: three",
            "Turn 2: two",
            "Turn 1 (agent)",
            "Baseline: the project as first seen"
        ]
    );
    let log = json(&f.ok(&["log", "--json"]));
    let t2_end = log
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["turn"] == 2)
        .unwrap()["ended_at_ns"]
        .as_i64()
        .unwrap();
    let author_time = String::from_utf8(git_ok(
        &git_dir,
        &["log", "-1", "--format=%at", "refs/opfs/turns/2"],
    ))
    .unwrap();
    assert_eq!(author_time.trim(), (t2_end / 1_000_000_000).to_string());
    // `git log -p` works with stock git.
    git_ok(&git_dir, &["log", "-p", "--stat"]);

    // Exporting again writes nothing; the refs stay.
    let again = json(&f.ok(&["export", "--git-dir", git_dir.to_str().unwrap(), "--json"]));
    assert_eq!(again["turns"], serde_json::json!([]), "{again}");
    assert_eq!(again["baseline"], false, "{again}");
    assert_eq!(again["objects"], 0, "{again}");

    // A repository inside the project is refused.
    let inside = f.opfs(&[
        "export",
        "--git-dir",
        f.project.join("x.git").to_str().unwrap(),
    ]);
    assert_eq!(inside.status.code(), Some(1));
    assert!(
        stderr(&inside).contains("must not be inside the project"),
        "{}",
        stderr(&inside)
    );
    assert!(!f.project.join("x.git").exists());
    let via_mount = f.opfs(&["export", "--git-dir", f.m("y.git").to_str().unwrap()]);
    assert_eq!(via_mount.status.code(), Some(1), "{}", stderr(&via_mount));
    assert!(!f.project.join("y.git").exists());
}

/// Writes `end` into a fresh directory, pipes `opfs ARGS` (a diff) into
/// `git apply --reverse` there, and returns the resulting manifest.
fn reverse_apply(f: &Fixture, args: &[&str], end: &Manifest, name: &str) -> Manifest {
    let patch = f.ok(args);
    let work = f.root().join(name);
    fs::create_dir(&work).unwrap();
    materialize(end, &work);
    let mut child = Command::new("git")
        .args(["apply", "--reverse", "-"])
        .current_dir(&work)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CEILING_DIRECTORIES", f.root())
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&patch).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "git apply --reverse failed: {}\npatch:\n{}",
        stderr(&out),
        String::from_utf8_lossy(&patch)
    );
    manifest(&work)
}

#[test]
fn diff_applies_in_reverse_and_show_and_log_report_history() {
    let f = Fixture::new(initial_project, &["--no-export"]);
    let start = manifest(&f.project);
    // Turn 1: text only (edits, mode change, delete, add, rename, odd name).
    fs::write(
        f.m("src/main.rs"),
        "fn main() {\n    println!(\"hello\");\n}\n// end",
    )
    .unwrap();
    fs::set_permissions(f.m("src/main.rs"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::remove_file(f.m("README")).unwrap();
    fs::write(f.m("added.txt"), "added\n").unwrap();
    fs::rename(f.m("dir/sub/deep.txt"), f.m("dir/deep-moved.txt")).unwrap();
    fs::write(bytes_path(&f.mp, b"caf\xe9.txt"), "latin-1 name\nmore\n").unwrap();
    fs::write(bytes_path(&f.mp, b"tab\there"), "tab name\n").unwrap();
    let end1 = manifest(&f.project);
    f.turn("second");
    // Turn 2: symlink retarget, binary change, a file becomes a symlink.
    fs::remove_file(f.m("link")).unwrap();
    symlink("src/main.rs", f.m("link")).unwrap();
    fs::write(f.m("bin.dat"), b"\x00new binary").unwrap();
    fs::remove_file(f.m("run.sh")).unwrap();
    symlink("added.txt", f.m("run.sh")).unwrap();
    let end2 = manifest(&f.project);
    f.turn("third");

    // opfs diff N | git apply --reverse, on a copy of the end state, gives
    // the start state.
    let got = reverse_apply(&f, &["diff", "1"], &end1, "apply1");
    assert!(
        got == start,
        "reverse-applied diff of turn 1:\n{}",
        show_diff(&got, &start)
    );
    // Turn 2 without its binary file: symlink retarget and file -> symlink.
    let got = reverse_apply(&f, &["diff", "2", "link", "run.sh"], &end2, "apply2");
    let mut want = end2.clone();
    for p in [&b"link"[..], b"run.sh"] {
        want.insert(p.to_vec(), end1[p].clone());
    }
    // git apply --reverse recreates a deleted file without its execute bit
    // (stock git does the same with `git diff` output: "deleted file mode
    // 100755" reversed gives 100644), so only the bytes come back.
    want.get_mut(&b"run.sh"[..]).unwrap().0 = "100644".into();
    assert!(
        got == want,
        "reverse-applied diff of turn 2:\n{}",
        show_diff(&got, &want)
    );
    // The same for the symlink and type changes of turn 2, binary aside.
    let patch2 = String::from_utf8_lossy(&f.ok(&["diff", "2"])).into_owned();
    assert!(
        patch2.contains("Binary files a/bin.dat and b/bin.dat differ"),
        "{patch2}"
    );
    assert!(patch2.contains("deleted file mode 100755\n"), "{patch2}");
    assert!(patch2.contains("new file mode 120000\n"), "{patch2}");

    let ns = String::from_utf8(f.ok(&["diff", "1", "--name-status"])).unwrap();
    assert_eq!(
        ns,
        concat!(
            "D\tREADME\n",
            "A\tadded.txt\n",
            "M\t\"caf\\351.txt\"\n",
            "R100\tdir/sub/deep.txt\tdir/deep-moved.txt\n",
            "M\tsrc/main.rs\n",
            "A\t\"tab\\there\"\n",
        )
    );
    let stat = String::from_utf8(f.ok(&["diff", "1..2", "--stat"])).unwrap();
    assert!(stat.contains("Bin "), "{stat}");
    assert!(
        stat.trim_end().ends_with("deletions(-)") || stat.contains("deletion"),
        "{stat}"
    );
    let limited = String::from_utf8(f.ok(&["diff", "1", "--name-status", "src"])).unwrap();
    assert_eq!(limited, "M\tsrc/main.rs\n");
    // A range covering both turns equals the start-to-end difference.
    let range = String::from_utf8(f.ok(&["diff", "1..2", "--name-status"])).unwrap();
    assert!(
        range.contains("M\tlink\n") && range.contains("D\tREADME\n"),
        "{range}"
    );

    // show: bytes as of the start of a turn; a clear failure where absent.
    assert_eq!(f.ok(&["show", "1:README"]), b"readme line 1\nline 2\n");
    assert_eq!(f.ok(&["show", "1:link"]), b"README");
    assert_eq!(f.ok(&["show", "3:link"]), b"src/main.rs");
    assert_eq!(f.ok(&["show", "2:caf\\xe9.txt"]), b"latin-1 name\nmore\n");
    let absent = f.opfs(&["show", "2:README"]);
    assert_eq!(absent.status.code(), Some(1));
    assert!(
        stderr(&absent).contains("README did not exist when turn 2 began"),
        "{}",
        stderr(&absent)
    );
    let unknown = f.opfs(&["show", "99:README"]);
    assert_eq!(unknown.status.code(), Some(2), "{}", stderr(&unknown));
    let dir = f.opfs(&["show", "1:src"]);
    assert_eq!(dir.status.code(), Some(1));
    assert_eq!(f.opfs(&["diff", "3..1"]).status.code(), Some(2));

    // log: newest first, counts per turn.
    let log = json(&f.ok(&["log", "--json"]));
    let log = log.as_array().unwrap();
    assert_eq!(
        log.iter()
            .map(|e| e["turn"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        vec![3, 2, 1]
    );
    let t1 = &log[2];
    assert_eq!(
        (
            t1["added"].as_u64(),
            t1["modified"].as_u64(),
            t1["deleted"].as_u64()
        ),
        (Some(3), Some(2), Some(2)),
        "{t1}"
    );
    assert!(t1["bytes_stored"].as_u64().unwrap() > 0);
    assert_eq!(log[1]["label"], "second");
    assert!(log[0]["ended_at"].is_null());
    let text = String::from_utf8(f.ok(&["log"])).unwrap();
    assert!(text.starts_with("turn 3 (agent) (open)"), "{text}");
}

#[test]
fn turns_are_exported_automatically_in_the_background() {
    let f = Fixture::new(
        |p| {
            fs::write(p.join("a.txt"), "a\n").unwrap();
        },
        &[],
    );
    fs::write(f.m("a.txt"), "a2\n").unwrap();
    fs::write(f.m("b.txt"), "b\n").unwrap();
    let end1 = manifest(&f.project);
    assert_eq!(f.turn("next"), 2);
    let git_dir = f.state_dir().join("export.git");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if git(
            &git_dir,
            &["rev-parse", "--verify", "-q", "refs/opfs/turns/1"],
        )
        .status
        .success()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "turn 1 was not exported within 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_tree(&git_dir, "refs/opfs/turns/1", &end1);
    assert_tree(&git_dir, "refs/opfs/baseline", &{
        let mut m = Manifest::new();
        m.insert(b"a.txt".to_vec(), ("100644".into(), b"a\n".to_vec()));
        m
    });
}

/// The processes whose command line names `path` (a `git gc` the
/// daemon's export started in the state dir).
fn processes_naming(path: &Path) -> Vec<String> {
    let needle = path.as_os_str().as_bytes();
    let mut found = Vec::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        if !e.file_name().as_bytes().iter().all(u8::is_ascii_digit) {
            continue;
        }
        let Ok(cmdline) = fs::read(e.path().join("cmdline")) else {
            continue;
        };
        if cmdline.windows(needle.len()).any(|w| w == needle) {
            found.push(String::from_utf8_lossy(&cmdline).replace('\0', " "));
        }
    }
    found
}

/// `opfs umount` returns once the daemon's export is done: the baseline
/// of a project just mounted and a turn closed just before are in the
/// export, and no `git gc` the export started is still running in the
/// state dir (before, the daemon exited with its exporter mid-run: the
/// export was cut short and its `git gc` went on writing into the state
/// dir after the daemon had released it).
#[test]
fn an_unmount_waits_for_the_export_under_way_and_its_git_gc() {
    let f = Fixture::new(
        |p| {
            // Enough objects for `git gc --auto` to be due after the
            // baseline, and for its export to take longer than an unmount.
            for d in 0..30 {
                let dir = p.join(format!("d{d}"));
                fs::create_dir(&dir).unwrap();
                for i in 0..100 {
                    fs::write(dir.join(format!("f{i}")), format!("{d}/{i}\n")).unwrap();
                }
            }
        },
        &[],
    );
    fs::write(f.m("d0/f0"), "changed\n").unwrap();
    assert_eq!(f.turn("last"), 2);
    let git_dir = f.state_dir().join("export.git");
    f.fx.umount();
    let running = processes_naming(&git_dir);
    assert!(
        running.is_empty(),
        "still running in the export after the unmount: {running:?}"
    );
    for r in ["refs/opfs/baseline", "refs/opfs/turns/1"] {
        assert!(
            git(&git_dir, &["rev-parse", "--verify", "-q", r])
                .status
                .success(),
            "{r} is not in the export when the unmount returned"
        );
    }
    let out = git(&git_dir, &["show", "refs/opfs/turns/1:d0/f0"]);
    assert_eq!(out.stdout, b"changed\n");
}

fn loose_objects(git_dir: &Path) -> usize {
    let mut n = 0;
    for d in fs::read_dir(git_dir.join("objects")).unwrap() {
        let d = d.unwrap();
        let name = d.file_name();
        if name.len() == 2 {
            n += fs::read_dir(d.path()).unwrap().count();
        }
    }
    n
}

#[test]
fn export_of_10000_files_then_one_turn_writes_only_that_turn() {
    let f = Fixture::new(
        |p| {
            for d in 0..100 {
                let dir = p.join(format!("d{d:02}"));
                fs::create_dir(&dir).unwrap();
                for i in 0..100 {
                    fs::write(dir.join(format!("f{i:02}.txt")), format!("file {d} {i}\n")).unwrap();
                }
            }
        },
        &["--no-export"],
    );
    fs::write(f.m("d00/f00.txt"), "changed in turn 1\n").unwrap();
    assert_eq!(f.turn("two"), 2);
    let git_dir = f.root().join("big.git");
    let gd = git_dir.to_str().unwrap();

    let t = Instant::now();
    let first = json(&f.ok(&["export", "--git-dir", gd, "--json"]));
    let first_time = t.elapsed();
    assert_eq!(first["baseline"], true);
    assert_eq!(first["turns"], serde_json::json!([1]));
    assert!(first["baseline_entries"].as_u64().unwrap() >= 10_099);
    let objects_after_first = loose_objects(&git_dir);

    fs::write(f.m("d57/f42.txt"), "changed in turn 2\n").unwrap();
    let end2 = manifest(&f.project);
    assert_eq!(f.turn("three"), 3);
    let t = Instant::now();
    let second = json(&f.ok(&["export", "--git-dir", gd, "--json"]));
    let second_time = t.elapsed();
    assert_eq!(second["baseline"], false);
    assert_eq!(second["turns"], serde_json::json!([2]));
    // One blob, the trees on its path (d57 and the root), one commit.
    assert_eq!(second["objects"], 4, "{second}");
    assert_eq!(loose_objects(&git_dir) - objects_after_first, 4);
    assert_tree(&git_dir, "refs/opfs/turns/2", &end2);
    eprintln!(
        "10,000 files: first export (baseline + 1 turn) {:?}, {} objects; second export (1 turn) {:?}, {} objects",
        first_time, first["objects"], second_time, second["objects"]
    );
}

/// The baseline is the project when turn 1 began, even when the agent keeps
/// changing files while the export walks the project: a file read after the
/// agent changed it is replaced by its record, which the export sees only
/// once the daemon committed its pending captures (the capture log).
#[test]
fn baseline_while_the_agent_writes_is_the_turn_start() {
    let f = Fixture::new(
        |p| {
            for d in 0..20 {
                fs::create_dir_all(p.join(format!("d{d}"))).unwrap();
                for i in 0..100 {
                    fs::write(p.join(format!("d{d}/f{i}")), format!("orig {d} {i}\n")).unwrap();
                }
            }
        },
        &["--no-export"],
    );
    let start = manifest(&f.project);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let writer = {
        let (stop, done) = (stop.clone(), done.clone());
        let mp = f.mp.clone();
        std::thread::spawn(move || {
            let mut round = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for d in 0..20 {
                    let i = (round * 7 + d * 13) % 100;
                    fs::write(mp.join(format!("d{d}/f{i}")), format!("agent {round}\n")).unwrap();
                }
                round += 1;
                done.store(round, std::sync::atomic::Ordering::Relaxed);
            }
            round
        })
    };
    // The export runs while the writer is at work.
    assert!(
        wait_for(Duration::from_secs(60), || done
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0),
        "the writer wrote nothing within 60 s"
    );
    f.ok(&["export"]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = writer.join().unwrap();
    assert!(rounds > 0, "the writer never ran");
    let git_dir = f.state_dir().join("export.git");
    assert_tree(&git_dir, "refs/opfs/baseline", &start);
}

/// An export of a turn that wrote a few objects starts no `git` process:
/// whether `git gc --auto` would find work is judged in-process (it
/// started git on every export to learn that it had nothing to do). The
/// baseline is still packed by `git gc`. `git` on `PATH` is a wrapper
/// that logs each run and then runs the real one.
#[test]
fn export_of_a_small_turn_starts_no_git_process() {
    let f = Fixture::new(
        |p| {
            for i in 0..20 {
                fs::write(p.join(format!("f{i:02}.txt")), format!("file {i}\n")).unwrap();
            }
        },
        &["--no-export"],
    );
    let real_git = common::which("git").expect("git on PATH");
    let bin = f.root().join("fake-bin");
    fs::create_dir(&bin).unwrap();
    let log = f.root().join("git-runs.log");
    let wrapper = bin.join("git");
    fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"$*\" >> {}\nexec {} \"$@\"\n",
            common::q(log.to_str().unwrap()),
            common::q(real_git.to_str().unwrap())
        ),
    )
    .unwrap();
    fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let git_dir = f.root().join("small.git");
    let export = |what: &str| {
        let mut cmd = f.fx.opfs_command(&[
            OsStr::new("-C"),
            f.mp.as_os_str(),
            OsStr::new("export"),
            OsStr::new("--git-dir"),
            git_dir.as_os_str(),
            OsStr::new("--json"),
        ]);
        let out = cmd
            .env("PATH", &path)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{what}: {}", stderr(&out));
        json(&out.stdout)
    };
    let runs = || fs::read_to_string(&log).unwrap_or_default();

    fs::write(f.m("f00.txt"), "changed in turn 1\n").unwrap();
    assert_eq!(f.turn("two"), 2);
    let first = export("first export");
    assert_eq!(first["baseline"], true, "{first}");
    assert_eq!(first["packed"], "git", "{first}");
    let baseline_runs = runs();
    assert!(
        baseline_runs.contains("gc --prune=now"),
        "the baseline was not packed: {baseline_runs:?}"
    );

    fs::write(f.m("f07.txt"), "changed in turn 2\n").unwrap();
    let end2 = manifest(&f.project);
    assert_eq!(f.turn("three"), 3);
    let second = export("second export");
    assert_eq!(second["turns"], serde_json::json!([2]), "{second}");
    assert_eq!(second["objects"], 3, "{second}");
    assert_eq!(second["packed"], "no", "{second}");
    assert_eq!(
        runs(),
        baseline_runs,
        "the export of one small turn started git"
    );
    assert_tree(&git_dir, "refs/opfs/turns/2", &end2);
}

/// A `.gitmodules` (or an alias of it) or a `.gitattributes` that a remote
/// checking what it receives would refuse (`receive.fsckObjects`, as
/// GitHub, GitLab and Gitea do) is left out of the export and listed in
/// `skipped`, so the history still passes `git fsck --strict` and can be
/// pushed; a sound `.gitmodules` is exported as it is.
#[test]
fn files_git_fsck_refuses_are_left_out_and_the_history_stays_pushable() {
    let f = Fixture::new(|p| fs::write(p.join("README"), "r\n").unwrap(), &[]);
    let sound = "[submodule \"lib\"]\n\tpath = lib\n\turl = https://example.com/lib.git\n";
    fs::write(f.m(".gitmodules"), sound).unwrap();
    fs::create_dir(f.m("a")).unwrap();
    fs::write(
        f.m("a/.gitmodules"),
        "[submodule \"../../x\"]\n\tpath = x\n\turl = -u./payload\n",
    )
    .unwrap();
    fs::create_dir(f.m("b")).unwrap();
    fs::write(
        f.m("b/.GITMODULES"),
        "[submodule \"y\"]\n\tpath = y\n\turl = \"-oProxyCommand=x\"\n",
    )
    .unwrap();
    fs::write(
        f.m("b/.gitattributes"),
        format!("*.x {}\n", "a".repeat(3000)),
    )
    .unwrap();
    fs::write(f.m("b/notes.txt"), "[submodule \"../../x\"]\n").unwrap();
    f.turn("t");
    let git_dir = f.root().join("shadow.git");
    let report = json(&f.ok(&["export", "--git-dir", git_dir.to_str().unwrap(), "--json"]));
    let mut skipped: Vec<String> = report["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect();
    skipped.sort();
    skipped.dedup();
    assert_eq!(
        skipped,
        ["a/.gitmodules", "b/.GITMODULES", "b/.gitattributes"],
        "{report:#}"
    );
    let tree = git_manifest(&git_dir, "HEAD");
    assert_eq!(tree[b".gitmodules".as_slice()].1, sound.as_bytes());
    assert!(tree.contains_key(b"b/notes.txt".as_slice()));
    for left in ["a/.gitmodules", "b/.GITMODULES", "b/.gitattributes"] {
        assert!(!tree.contains_key(left.as_bytes()), "{left} exported");
    }
    // What the remote runs on a push.
    let fsck = git(&git_dir, &["fsck", "--strict", "--no-dangling"]);
    assert!(
        fsck.status.success() && fsck.stderr.is_empty(),
        "git fsck --strict: {}{}",
        stderr(&fsck),
        String::from_utf8_lossy(&fsck.stdout)
    );
    // And a bare repository that checks what it receives takes the push.
    let remote = f.root().join("checked.git");
    let init = Command::new("git")
        .args(["init", "-q", "--bare"])
        .arg(&remote)
        .output()
        .unwrap();
    assert!(init.status.success());
    git_ok(&remote, &["config", "receive.fsckObjects", "true"]);
    let push = git(
        &git_dir,
        &[
            "push",
            "-q",
            remote.to_str().unwrap(),
            "refs/heads/opfs:refs/heads/opfs",
        ],
    );
    assert!(push.status.success(), "push refused: {}", stderr(&push));
}
