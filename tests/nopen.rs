//! `FUSE_NO_OPEN_SUPPORT`: with the watch active (the
//! default) the kernel sends no OPEN, FLUSH or RELEASE for files, so a
//! file's content is captured at the first mutating request of each turn,
//! an `O_TRUNC` open arrives as a size SETATTR, what the mount left is
//! fingerprinted after each mutating request, and the turn boundary finds
//! the files with dirty pages through the processes' shared mappings
//! (`docs/bench/2026-12-02-no-open.md`, "No OPEN"). The tests also pass with
//! `OPFS_NO_OPEN=0` (the OPEN path; the first checks which path is
//! engaged), but for one noted below.

mod common;

use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use common::mmap::Mapping;
use common::*;

/// `O_PATH` in `/proc/PID/fdinfo`'s octal `flags`.
const O_PATH_FLAG: u32 = 0o10000000;

/// The fds `pid` holds on `file` that are real opens (not `O_PATH`).
fn real_fds_of(pid: i32, file: &Path) -> Vec<String> {
    let want = fs::canonicalize(file).expect("canonicalize");
    let mut found = Vec::new();
    let dir = format!("/proc/{pid}/fd");
    for entry in fs::read_dir(&dir).expect("read the daemon's fds") {
        let Ok(entry) = entry else { continue };
        let Ok(target) = fs::read_link(entry.path()) else {
            continue;
        };
        if target != want {
            continue;
        }
        let n = entry.file_name().to_string_lossy().into_owned();
        let info = fs::read_to_string(format!("/proc/{pid}/fdinfo/{n}")).unwrap_or_default();
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
            .unwrap_or(0);
        if flags & O_PATH_FLAG == 0 {
            found.push(format!("fd {n} flags {flags:o}"));
        }
    }
    found
}

/// The first `n` bytes of the file at `path`.
fn head(path: &Path, n: usize) -> Vec<u8> {
    let mut bytes = fs::read(path).expect("read");
    bytes.truncate(n);
    bytes
}

/// The lever is engaged by default: a file held open for writing through
/// the mount costs the daemon no open of its own (with OPEN, the handle
/// holds one until RELEASE).
#[test]
fn a_file_open_through_the_mount_holds_no_fd_in_the_daemon() {
    let fx = Fixture::new();
    write_file(&fx.p("f.txt"), b"original\n", 0o644);
    fx.mount();
    let pid = fx.status()["pid"].as_i64().expect("pid") as i32;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(fx.m("f.txt"))
        .expect("open via mount");
    f.write_all(b"written!\n").expect("write");
    let held = real_fds_of(pid, &fx.p("f.txt"));
    // Asked for only while the watch is active at mount.
    let no_open = std::env::var("OPFS_NO_OPEN").map_or(true, |v| v != "0")
        && std::env::var("OPFS_WATCH").map_or(true, |v| v != "off" && v != "0");
    if no_open {
        assert!(held.is_empty(), "the daemon holds {held:?}");
    } else {
        assert!(!held.is_empty(), "with OPEN, the handle holds an fd");
    }
    drop(f);
    assert_eq!(fs::read(fx.p("f.txt")).expect("read"), b"written!\n");
}

/// A descriptor opened in one turn and written in the next: the second
/// write is captured in the turn it happened in (no OPEN reports the file
/// at the boundary; the node's epoch does).
#[test]
fn a_write_through_a_file_opened_before_a_turn_boundary_is_captured_in_the_new_turn() {
    let fx = Fixture::new();
    write_file(&fx.p("f.txt"), b"0000000000\n", 0o644);
    fx.mount();
    assert_eq!(fx.turn("two"), 2);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(fx.m("f.txt"))
        .expect("open via mount");
    f.write_all(b"11").expect("write in turn 2");
    assert_eq!(fx.turn("three"), 3);
    f.seek(SeekFrom::Start(5)).expect("seek");
    f.write_all(b"33").expect("write in turn 3");
    drop(f);
    assert_eq!(fx.turn("four"), 4);
    assert_eq!(fs::read(fx.p("f.txt")).expect("read"), b"1100033000\n");

    fx.rewind(3);
    assert_eq!(
        fs::read(fx.p("f.txt")).expect("read"),
        b"1100000000\n",
        "turn 3 began after the first write"
    );
    fx.rewind(2);
    assert_eq!(fs::read(fx.p("f.txt")).expect("read"), b"0000000000\n");
}

/// `open(O_TRUNC)` with no OPEN: the truncation reaches the project (as a
/// size SETATTR: with `ATOMIC_O_TRUNC` the kernel would leave it to an
/// OPEN that never comes) and is captured before it happens.
#[test]
fn an_o_trunc_open_truncates_and_is_captured_first() {
    let fx = Fixture::new();
    write_file(&fx.p("f.txt"), b"turn-one content\n", 0o644);
    write_file(&fx.p("g.txt"), b"more content\n", 0o644);
    fx.mount();
    assert_eq!(fx.turn("two"), 2);
    // Truncated, nothing written.
    drop(
        fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(fx.m("f.txt"))
            .expect("open O_TRUNC"),
    );
    assert_eq!(fs::read(fx.p("f.txt")).expect("read").len(), 0);
    assert_eq!(fs::read(fx.m("f.txt")).expect("read via mount").len(), 0);
    // Truncated and rewritten, read-write.
    let mut g = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(fx.m("g.txt"))
        .expect("open O_RDWR|O_TRUNC");
    g.write_all(b"new").expect("write");
    drop(g);
    assert_eq!(fs::read(fx.p("g.txt")).expect("read"), b"new");
    assert_eq!(fx.turn("three"), 3);

    fx.rewind(2);
    assert_eq!(
        fs::read(fx.p("f.txt")).expect("read"),
        b"turn-one content\n"
    );
    assert_eq!(fs::read(fx.p("g.txt")).expect("read"), b"more content\n");
}

/// A store through a shared mapping made read-only (`mprotect`) before the
/// boundary keeps its dirty page: it still belongs to the turn that made
/// it. (The boundary looks for every shared mapping of the mount, not only
/// the writable ones.)
#[test]
fn a_store_through_a_mapping_made_read_only_lands_in_the_turn_that_made_it() {
    let fx = Fixture::new();
    let mut content = b"original".to_vec();
    content.resize(64 * 1024, 0);
    write_file(&fx.p("f.bin"), &content, 0o644);
    fx.mount();
    assert_eq!(fx.turn("N"), 2);
    let map = Mapping::new(&fx.m("f.bin"));
    map.store(0, b"stored!!");
    map.protect_read_only();
    assert_eq!(fx.turn("N+1"), 3, "the mapping is still live");
    drop(map);
    assert_eq!(fx.turn("after"), 4);
    assert_eq!(head(&fx.p("f.bin"), 8), b"stored!!");
    fx.rewind(3);
    assert_eq!(
        head(&fx.p("f.bin"), 8),
        b"stored!!",
        "turn 3 began after the store"
    );
    fx.rewind(2);
    assert_eq!(fs::read(fx.p("f.bin")).expect("read"), content);
}

/// What the mount left is known without a FLUSH: an edit made behind the
/// mount right after the mount's writer closed the file (same size, so only
/// the timestamp tells) is the user's, for a `write(2)` without `O_TRUNC`
/// and for a store through a mapping written back at `munmap`.
///
/// Not run on the OPEN path (`OPFS_NO_OPEN=0`, or `OPFS_WATCH=off`, which
/// keeps OPEN too): it reports what a mapping's
/// writeback left at RELEASE, which the kernel sends after `munmap`
/// returned, so there the user's edit made right after is taken for the
/// mount's (`m.bin` is no conflict; a known gap of that path, which each
/// request's own `after` closes).
#[test]
fn an_edit_behind_the_mount_right_after_the_writer_closed_is_the_users() {
    if std::env::var("OPFS_NO_OPEN").is_ok_and(|v| v == "0")
        || std::env::var("OPFS_WATCH").is_ok_and(|v| v == "off" || v == "0")
    {
        eprintln!("skipped: the OPEN path (see the doc comment)");
        return;
    }
    let fx = Fixture::new();
    write_file(&fx.p("w.txt"), b"original\n", 0o644);
    let mut mapped = b"original".to_vec();
    mapped.resize(8192, b'.');
    write_file(&fx.p("m.bin"), &mapped, 0o644);
    fx.mount();
    assert_eq!(fx.turn("work"), 2);

    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(fx.m("w.txt"))
        .expect("open via mount");
    f.write_all(b"agent-1\n").expect("write via mount");
    drop(f);
    let map = Mapping::new(&fx.m("m.bin"));
    map.store(0, b"agent-2!");
    drop(map);
    // Behind the mount, at once, same sizes.
    for (name, bytes) in [("w.txt", &b"USER-01\n"[..]), ("m.bin", &b"USER-02!"[..])] {
        let mut u = fs::OpenOptions::new()
            .write(true)
            .open(fx.p(name))
            .expect("open in project");
        u.write_all(bytes).expect("write behind the mount");
    }

    let run = fx.opfs_c(&["rewind", "2", "--json"]);
    assert_eq!(run.code, Some(3), "{run}");
    let mut conflicts: Vec<String> = run.json()["conflicts"]
        .as_array()
        .expect("conflicts")
        .iter()
        .filter_map(|c| c["path"].as_str().map(String::from))
        .collect();
    conflicts.sort();
    assert_eq!(conflicts, ["m.bin", "w.txt"]);
    assert_eq!(fs::read(fx.p("w.txt")).expect("read"), b"USER-01\n\n");
    assert_eq!(head(&fx.p("m.bin"), 8), b"USER-02!");
}

/// Reads, appends and a size change through descriptors with no handle:
/// `O_APPEND` lands at the end, a large file written in place is captured
/// as ranges, and both rewind exactly.
#[test]
fn appends_and_ranged_writes_without_handles_rewind_exactly() {
    let fx = Fixture::new();
    write_file(&fx.p("log.txt"), b"line 1\n", 0o644);
    let big: Vec<u8> = (0..(3u32 << 20)).map(|i| (i % 251) as u8).collect();
    write_file(&fx.p("big.bin"), &big, 0o644);
    fx.mount();
    assert_eq!(fx.turn("two"), 2);
    let mut log = fs::OpenOptions::new()
        .append(true)
        .open(fx.m("log.txt"))
        .expect("open O_APPEND");
    log.write_all(b"line 2\n").expect("append");
    log.write_all(b"line 3\n").expect("append");
    drop(log);
    let mut b = fs::OpenOptions::new()
        .write(true)
        .open(fx.m("big.bin"))
        .expect("open big");
    b.seek(SeekFrom::Start(1 << 20)).expect("seek");
    b.write_all(&[0xAA; 4096]).expect("write in place");
    b.set_len(2 << 20).expect("shrink");
    drop(b);
    assert_eq!(
        fs::read(fx.m("log.txt")).expect("read"),
        b"line 1\nline 2\nline 3\n"
    );
    assert_eq!(fs::metadata(fx.p("big.bin")).expect("stat").len(), 2 << 20);
    assert_eq!(fx.turn("three"), 3);
    fx.rewind(2);
    assert_eq!(fs::read(fx.p("log.txt")).expect("read"), b"line 1\n");
    assert!(fs::read(fx.p("big.bin")).expect("read") == big);
}

/// A daemon that cannot override file modes (not root, or root without
/// `CAP_DAC_OVERRIDE`) keeps OPEN: without it each write reopens the file
/// by its mode, so a write through a descriptor of a file created 0444
/// (how git writes its objects) or made read-only after the open failed
/// with `EACCES` (found by `git commit` through a mount of an unprivileged
/// user). The daemon here is root with `CAP_DAC_OVERRIDE` dropped from its
/// bounding set (`setpriv`), which checks modes as a user's daemon would.
#[test]
fn a_daemon_that_cannot_override_modes_writes_through_read_only_descriptors() {
    if std::process::Command::new("setpriv")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: setpriv (util-linux) is not installed");
        return;
    }
    let fx = Fixture::new();
    write_file(&fx.p("a.txt"), b"original\n", 0o644);
    let inner = fx.opfs_command(&[
        std::ffi::OsStr::new("mount"),
        fx.project.as_os_str(),
        fx.mnt.as_os_str(),
    ]);
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args(["--bounding-set", "-dac_override", "--"])
        .arg(inner.get_program())
        .args(inner.get_args())
        .current_dir(fx.root());
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let out = cmd.output().expect("run setpriv opfs mount");
    assert!(
        out.status.success(),
        "mount without CAP_DAC_OVERRIDE failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        wait_mount_state(&fx.mnt, true, MOUNT_TIMEOUT),
        "not mounted"
    );

    let mut made = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(fx.m("object"))
        .expect("create 0444 via mount");
    made.write_all(b"blob\n")
        .expect("write into a file created 0444");
    drop(made);
    let mut a = fs::OpenOptions::new()
        .write(true)
        .open(fx.m("a.txt"))
        .expect("open a.txt");
    fs::set_permissions(
        fx.m("a.txt"),
        std::os::unix::fs::PermissionsExt::from_mode(0o444),
    )
    .expect("chmod 0444");
    a.write_all(b"rewritten\n").expect("write after chmod 0444");
    drop(a);
    assert_eq!(fs::read(fx.p("object")).expect("read"), b"blob\n");
    assert_eq!(fs::read(fx.p("a.txt")).expect("read"), b"rewritten\n");
    fx.umount();
}

/// FUSE requests of one mount by opcode name, counted through the
/// `fuse:fuse_request_send` tracepoint (kernel 6.16+) in a private
/// tracefs instance, as `scripts/bench_reqs.py` does (mounting tracefs
/// first if it is not). `None` (said on stderr) where tracefs or the
/// tracepoint is missing.
struct Requests {
    inst: std::path::PathBuf,
}

impl Requests {
    fn start(mnt: &Path) -> Option<Requests> {
        use std::os::unix::fs::MetadataExt;
        let tracefs = Path::new("/sys/kernel/tracing");
        if !tracefs.join("events").is_dir() {
            // Not mounted yet (as `scripts/bench_reqs.py` does; needs root).
            let _ = std::process::Command::new("mount")
                .args(["-t", "tracefs", "nodev"])
                .arg(tracefs)
                .status();
        }
        if !tracefs.join("events/fuse/fuse_request_send").is_dir() {
            eprintln!("no fuse:fuse_request_send tracepoint under {tracefs:?}: not counted");
            return None;
        }
        // The connection number is the mount's anonymous device minor.
        let dev = fs::metadata(mnt).expect("stat mount").dev();
        let conn = libc::minor(dev);
        // One instance per call: the tests of this binary run in parallel
        // threads of one process.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let inst = tracefs.join(format!("instances/opfs-nopen-{}-{n}", std::process::id()));
        fs::create_dir(&inst).expect("tracefs instance");
        let ev = inst.join("events/fuse/fuse_request_send");
        fs::write(ev.join("filter"), format!("connection == {conn}")).expect("filter");
        fs::write(ev.join("enable"), "1").expect("enable");
        Some(Requests { inst })
    }

    /// The requests sent so far whose opcode is `name` (`FUSE_CREATE`).
    fn count(&self, name: &str) -> usize {
        let trace = fs::read_to_string(self.inst.join("trace")).expect("read trace");
        let want = format!("({name})");
        trace.lines().filter(|l| l.contains(&want)).count()
    }
}

impl Drop for Requests {
    fn drop(&mut self) {
        let _ = fs::write(self.inst.join("events/fuse/fuse_request_send/enable"), "0");
        let _ = fs::remove_dir(&self.inst);
    }
}

/// Without OPEN, new files are made by MKNOD, not CREATE (the first CREATE
/// is answered `ENOSYS`, after which the kernel sends none): one request
/// per new file. The birth is captured as before (a rewind removes the
/// files and leaves the one that existed), the files get the caller's
/// mode under its umask, `O_EXCL` still refuses an existing name, and an
/// `O_CREAT` open of an existing name opens (and truncates) it.
#[test]
fn without_open_new_files_are_made_by_mknod_and_captured() {
    let fx = Fixture::new();
    write_file(&fx.p("old.txt"), b"old bytes\n", 0o644);
    fx.mount();
    assert_eq!(fx.turn("two"), 2);
    let reqs = Requests::start(&fx.mnt);
    let n = 20;
    for i in 0..n {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o640)
            .open(fx.m(format!("new{i}.txt")))
            .expect("create via mount");
        f.write_all(format!("file {i}\n").as_bytes())
            .expect("write");
    }
    let excl = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(fx.m("old.txt"));
    assert_eq!(
        excl.expect_err("O_EXCL of an existing name").kind(),
        std::io::ErrorKind::AlreadyExists
    );
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(fx.m("old.txt"))
        .expect("O_CREAT of an existing name");
    f.write_all(b"new").expect("write old");
    drop(f);
    use std::os::unix::fs::PermissionsExt;
    for i in 0..n {
        let meta = fs::metadata(fx.p(format!("new{i}.txt"))).expect("stat new");
        assert!(meta.is_file());
        // The test process's umask is the default 022: 0640 stays.
        assert_eq!(meta.permissions().mode() & 0o7777, 0o640, "new{i}.txt");
        assert_eq!(
            fs::read(fx.p(format!("new{i}.txt"))).expect("read"),
            format!("file {i}\n").as_bytes()
        );
    }
    let no_open = std::env::var("OPFS_NO_OPEN").map_or(true, |v| v != "0")
        && std::env::var("OPFS_WATCH").map_or(true, |v| v != "off" && v != "0");
    if let (Some(r), true) = (&reqs, no_open) {
        let (create, mknod) = (r.count("FUSE_CREATE"), r.count("FUSE_MKNOD"));
        // The first CREATE may fall in this test (answered ENOSYS), none
        // after it.
        assert!(create <= 1, "{create} CREATE requests for {n} new files");
        assert_eq!(mknod, n, "MKNOD requests for {n} new files");
    }
    drop(reqs);
    assert_eq!(fx.turn("three"), 3);
    fx.rewind(2);
    for i in 0..n {
        assert!(!fx.p(format!("new{i}.txt")).exists(), "new{i}.txt rewound");
    }
    assert_eq!(fs::read(fx.p("old.txt")).expect("read"), b"old bytes\n");
}

/// The cache policies that are fixed behaviour (`docs/benchmarks.md`,
/// "Measurement levers": `FOPEN_NOFLUSH`, `FOPEN_KEEP_CACHE`,
/// `FOPEN_CACHE_DIR`, `READDIRPLUS_AUTO`) stay on whatever the
/// environment says: on the OPEN path (`OPFS_NO_OPEN=0`), where file
/// handles exist, closing a file opened read-only sends no FLUSH even with
/// the variables that used to turn them off.
#[test]
fn the_fixed_cache_policies_ignore_the_environment() {
    let fx = Fixture::new();
    write_file(&fx.p("r.txt"), b"read me\n", 0o644);
    for (k, v) in [
        ("OPFS_NO_OPEN", "0"),
        ("OPFS_NO_FLUSH", "0"),
        ("OPFS_KEEP_CACHE", "0"),
        ("OPFS_CACHE_DIR", "0"),
        ("OPFS_READDIRPLUS_AUTO", "0"),
    ] {
        fx.set_env(k, v);
    }
    fx.mount_with(&["--no-export"]);
    let Some(reqs) = Requests::start(&fx.mnt) else {
        fx.umount();
        return;
    };
    for _ in 0..5 {
        assert_eq!(
            fs::read(fx.m("r.txt")).expect("read through the mount"),
            b"read me\n"
        );
    }
    let (open, flush) = (reqs.count("FUSE_OPEN"), reqs.count("FUSE_FLUSH"));
    drop(reqs);
    fx.umount();
    assert!(open >= 1, "the OPEN path is engaged ({open} OPEN requests)");
    assert_eq!(flush, 0, "FLUSH requests for 5 read-only opens");
}
