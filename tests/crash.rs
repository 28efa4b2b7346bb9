//! Crash safety (design §2.3; the write order is in
//! `docs/crash-model.md`).
//!
//! - `sigkill_under_workload_loses_no_preimage`: rounds of a mutation-heavy
//!   shell workload through the mount with `opfs turn` boundaries, the
//!   daemon SIGKILLed at a random moment in each round. After each kill the
//!   stale mount is cleaned up by the next `opfs mount`, and every turn
//!   start recorded (a manifest of the project taken right after `opfs turn`
//!   returned, the workload stopped) is rewound to and compared exactly.
//!   Rewinding to the start of the turn that was open at the kill proves no
//!   mutation that reached the project lacks its pre-image.
//! - `sigkill_during_rewind_is_finished_at_next_start`: the daemon is killed
//!   inside a rewind by the `OPFS_FAILPOINT` failpoints (before the restore
//!   is marked running, after recording the current states, after each step
//!   of the executor, before and after it is marked done). The next start
//!   finishes it and says so in `status`; the project is then exactly the
//!   rewound-to tree (or, when nothing had been written yet, exactly the tree
//!   before the rewind), never a mix.
//! - `sigkill_at_capture_failpoints`: the daemon dies between storing a
//!   pre-image's bytes and its record, and between the record and the
//!   mutation it guards.
//! - `sigkill_while_the_daemon_writes_back_its_own_mount_lets_it_die`: the
//!   daemon dies inside a WRITE its own write-back of dirty mmap pages
//!   caused; it must still exit, and the next mount must work.
//!
//! Replay: `OPFS_CRASH_SEED=<seed>`; more rounds: `OPFS_CRASH_ROUNDS=<n>`
//! (`scripts/crash` runs many).

mod common;

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

/// Rounds of the SIGKILL test in a plain `cargo test` (the whole file stays
/// well under two minutes on two cores).
const CI_ROUNDS: usize = 20;

fn env_usize(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// `opfs mount PROJECT MNT --no-export [extra]` with `env` added to the
/// daemon's environment; returns the outcome without asserting.
fn try_mount(f: &Fixture, extra: &[&str], env: &[(&str, &str)]) -> Run {
    let mut args = vec!["--no-export"];
    args.extend_from_slice(extra);
    f.try_mount(&args, env)
}

/// Mounts (asserting success and that the mount shows up) and returns the
/// daemon's pid.
fn mount(f: &Fixture, extra: &[&str], env: &[(&str, &str)]) -> i32 {
    let run = try_mount(f, extra, env);
    assert_eq!(run.code, Some(0), "opfs mount failed: {run}");
    assert!(
        wait_mount_state(&f.mnt, true, MOUNT_TIMEOUT),
        "{} is not mounted after opfs mount",
        f.mnt.display()
    );
    let s = f.status();
    s["pid"]
        .as_u64()
        .unwrap_or_else(|| panic!("status has no pid: {s:#}")) as i32
}

/// After the daemon died: the mountpoint must be a dead FUSE mount, which
/// the next `opfs mount` has to clean up itself. `statfs` (unlike `stat`,
/// which the kernel may answer from its attribute cache for a while) always
/// reaches the daemon, so it reports the dead connection at once.
fn assert_stale(f: &Fixture) {
    use std::os::unix::ffi::OsStrExt;
    assert!(is_mounted(&f.mnt), "the dead mount is still in the table");
    let c = std::ffi::CString::new(f.mnt.as_os_str().as_bytes()).expect("path");
    // SAFETY: valid C string and a zeroed out-struct.
    let rc = unsafe {
        let mut buf: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut buf)
    };
    let err = std::io::Error::last_os_error();
    assert!(
        rc < 0
            && matches!(
                err.raw_os_error(),
                Some(libc::ENOTCONN | libc::ECONNABORTED)
            ),
        "a killed daemon leaves a dead mount (statfs rc {rc}: {err})"
    );
}

/// The project, read from the backing directory.
fn project_tree(f: &Fixture) -> Manifest {
    manifest(&f.project)
}

/// `rewind N --json` through the mount: exit 0, no conflicts.
fn rewind_ok(f: &Fixture, n: u64, ctx: &str) -> serde_json::Value {
    f.rewind_in(&format!("{ctx}: "), n)
}

/// A bash workload of `ops` random mutations through the mount: writes,
/// appends, overwrites with random bytes, truncates, renames of files and
/// directories (also over existing targets), deletes, `rm -rf`, new
/// directories, chmod and symlinks. Each operation's failure (a name that
/// does not exist, a non-empty directory, the dead mount) is ignored: the
/// workload only has to mutate, the checks come after.
fn workload_script(seed: u64, ops: usize) -> String {
    format!(
        r#"
RANDOM={seed}
n=(a b c d e f)
d=(. d1 d2 d1/x d2/y)
p() {{ echo "${{d[RANDOM%5]}}/${{n[RANDOM%6]}}"; }}
for ((i = 0; i < {ops}; i++)); do
  case $((RANDOM % 18)) in
    0|1) printf 'write %d %d\n' $i $RANDOM > "$(p)" ;;
    2) printf 'append %d\n' $i >> "$(p)" ;;
    3) head -c $((RANDOM % 40000)) /dev/urandom > "$(p)" ;;
    4) truncate -s $((RANDOM % 3000)) "$(p)" ;;
    5|6) mv -f "$(p)" "$(p)" ;;
    7) rm -f "$(p)" ;;
    8) mkdir -p "${{d[RANDOM%5]}}" ;;
    9) rm -rf "${{d[1 + RANDOM%4]}}" ;;
    10) mv -T "${{d[1 + RANDOM%4]}}" "${{d[1 + RANDOM%4]}}" ;;
    11) chmod $((RANDOM % 2 ? 600 : 755)) "$(p)" ;;
    12) ln -sfn "t$RANDOM" "$(p)" ;;
    13) mkdir -p "$(p)" ;;
    14) cp -r d1 d2/y 2>/dev/null ;;
    15) sed -i "s/[0-9]/N/" "$(p)" ;;
    16|17) head -c $((RANDOM % 9000)) /dev/urandom |
        dd of="$(p)" bs=4096 oflag=seek_bytes seek=$((RANDOM % 30000)) conv=notrunc status=none ;;
  esac 2>/dev/null
done
exit 0
"#
    )
}

/// Runs the workload in the mount; returns when it ends (it ends quickly
/// once the mount is dead: every operation fails).
fn run_workload(f: &Fixture, seed: u64, ops: usize) {
    let status = Command::new("bash")
        .arg("-c")
        .arg(workload_script(seed, ops))
        .current_dir(&f.mnt)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    // A workload whose cwd died with the mount may exit non-zero, or not
    // start at all (chdir fails with ENOTCONN); either way it has stopped
    // mutating, and the caller sees the daemon is dead.
    if let Err(e) = status {
        assert!(
            matches!(e.raw_os_error(), Some(libc::ENOTCONN | libc::ECONNABORTED)),
            "cannot start the workload: {e}"
        );
    }
}

#[test]
fn sigkill_under_workload_loses_no_preimage() {
    let (mut rng, _seed) = Rng::from_env("OPFS_CRASH_SEED", 0x00C4_A511);
    let rounds = env_usize("OPFS_CRASH_ROUNDS", CI_ROUNDS);
    let f = Fixture::new();
    // Something to start with, made directly in the project before the first
    // mount (it is the baseline of turn 1).
    write_file(&f.p("d1/a"), b"first a\n", 0o644);
    write_file(&f.p("d1/x/b"), b"first b\n", 0o600);
    write_file(&f.p("c"), &[7u8; 5000], 0o755);
    let mut history: Vec<(u64, Manifest)> = Vec::new();
    let mut kills_in_turn = 0;
    let mut kills_in_workload = 0;
    let mut verified = 0;
    let started = Instant::now();
    for round in 0..rounds {
        let sync = rng.below(3) == 0;
        let extra: &[&str] = if sync { &["--sync"] } else { &[] };
        // Half the mounts capture every file written in place as ranges
        // (docs/ranges.md), chosen again for the mount after the kill.
        let ranges = |rng: &mut Rng| -> &'static [(&'static str, &'static str)] {
            if rng.below(2) == 0 {
                &[("OPFS_RANGE_MIN", "0")]
            } else {
                &[]
            }
        };
        let pid = mount(&f, extra, ranges(&mut rng));
        // The turn open at mount started where the project is now (the
        // previous round ended with a verified rewind, or this is turn 1).
        let open = f.open_turn();
        let mut recorded: Vec<(u64, Manifest)> = vec![(open, project_tree(&f))];
        if round == 0 {
            assert_eq!(open, 1);
        }
        // The kill comes at a random moment within roughly the first few
        // workload segments and turn switches; in one round of four it is
        // aimed at an `opfs turn` in flight instead.
        let aim_at_turn = rng.below(4) == 0;
        let delay = Duration::from_millis(20 + rng.below(900) as u64);
        let turn_delay = Duration::from_micros(rng.below(15_000) as u64);
        let in_turn = Arc::new(AtomicBool::new(false));
        let killer = {
            let in_turn = in_turn.clone();
            std::thread::spawn(move || {
                if aim_at_turn {
                    let deadline = Instant::now() + Duration::from_secs(20);
                    while !in_turn.load(Ordering::SeqCst) && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    std::thread::sleep(turn_delay);
                } else {
                    std::thread::sleep(delay);
                }
                let during_turn = in_turn.load(Ordering::SeqCst);
                sigkill(pid);
                during_turn
            })
        };
        let mut segments = 0;
        loop {
            let ops = 10 + rng.below(40);
            run_workload(&f, rng.next_u64() & 0x7fff, ops);
            segments += 1;
            if is_dead(pid) || segments > 500 {
                break;
            }
            in_turn.store(true, Ordering::SeqCst);
            let run = f.opfs_c(&["turn", "--label", &format!("r{round}s{segments}")]);
            in_turn.store(false, Ordering::SeqCst);
            if run.code != Some(0) {
                break;
            }
            let n = parse_turn_number(&run);
            // The workload is not running: this is the tree turn n began with,
            // whether or not the daemon is still alive.
            recorded.push((n, project_tree(&f)));
        }
        if killer.join().expect("killer thread") {
            kills_in_turn += 1;
        } else {
            kills_in_workload += 1;
        }
        assert!(
            wait_dead(pid, Duration::from_secs(10)),
            "round {round}: daemon {pid} survived SIGKILL"
        );
        assert_stale(&f);

        // The next mount cleans up the dead one and starts again.
        let _pid = mount(&f, extra, ranges(&mut rng));
        let st = f.status();
        assert!(
            st["recovered"].is_null(),
            "round {round}: no rewind was running, nothing to recover: {st:#}"
        );
        let last = recorded.last().map(|r| r.0).unwrap_or(open);
        assert!(
            st["turn"].as_u64() >= Some(last),
            "round {round}: turn {last} was recorded but the open turn is {st:#}"
        );
        // Every turn start of this round, newest first (the newest is the turn
        // the kill interrupted: its rewind undoes every mutation that reached
        // the project before the kill), then a few older ones.
        let mut checks: Vec<(u64, Manifest)> = recorded.iter().rev().cloned().collect();
        for _ in 0..2.min(history.len()) {
            checks.push(history[rng.below(history.len())].clone());
        }
        for (n, expected) in &checks {
            let ctx = format!("round {round} (sync {sync}), rewind to turn {n}");
            rewind_ok(&f, *n, &ctx);
            f.assert_tree(&ctx, expected);
            verified += 1;
        }
        // End the round at the newest turn start of this round, so the next
        // round's open turn starts from a known tree.
        let (n, expected) = recorded.last().cloned().expect("at least the open turn");
        rewind_ok(&f, n, &format!("round {round}: back to turn {n}"));
        f.assert_tree(&format!("round {round}: back to turn {n}"), &expected);
        history.extend(recorded);
        f.umount();
    }
    eprintln!(
        "{rounds} rounds in {:?}: {kills_in_workload} kills during the workload, \
         {kills_in_turn} during `opfs turn`, {verified} rewinds verified",
        started.elapsed()
    );
}

/// A project with every kind of entry, and turn 2 holding heavy changes to
/// it. Returns (turn 2's start tree, the tree after turn 2's work).
fn rewind_fixture(f: &Fixture) -> (Manifest, Manifest) {
    f.sh(r#"
mkdir -p src/deep/er keep empty ro docs
for i in 1 2 3 4 5 6 7 8; do printf 'file %d\n' $i > src/f$i; done
printf 'deep\n' > src/deep/er/x
head -c 300000 /dev/urandom > big.bin
printf '#!/bin/sh\n' > run.sh && chmod 755 run.sh
ln -s src/f1 link
printf 'in ro\n' > ro/inside && chmod 555 ro
printf 'doc\n' > docs/readme
"#);
    let t2 = f.turn("before the work");
    assert_eq!(t2, 2);
    let start = project_tree(f);
    f.sh(r#"
for i in 1 2 3; do printf 'changed %d\n' $i >> src/f$i; done
rm src/f4 src/f5
mv src/deep moved-deep
rm -rf docs
rmdir empty
chmod 700 ro
printf 'changed in ro\n' > ro/inside
mkdir -p new/a/b && printf 'new\n' > new/a/b/file && ln -s ../.. new/a/up
head -c 100 /dev/urandom > big.bin
chmod 600 run.sh
ln -sfn elsewhere link
rm keep -r && printf 'now a file\n' > keep
mkdir src/f6.d && mv src/f6 src/f6.d/
"#);
    let after = project_tree(f);
    (start, after)
}

#[test]
fn sigkill_during_rewind_is_finished_at_next_start() {
    let f = Fixture::new();
    mount(&f, &[], &[]);
    let (start, after) = rewind_fixture(&f);
    let dry = f
        .opfs_c(&["rewind", "2", "--dry-run", "--json"])
        .ok()
        .json();
    let planned = dry["plan"].as_array().map(Vec::len).unwrap_or(0);
    assert!(planned >= 15, "the plan should be long: {dry:#}");
    f.umount();
    let mut points: Vec<String> = vec![
        "rewind-begin:1".into(),
        "rewind-after-capture:1".into(),
        format!("rewind-after-capture:{}", planned / 2),
        "rewind-before-done:1".into(),
        "rewind-after-done:1".into(),
    ];
    // Steps: removals, then creations/rewrites, then directory modes; at most
    // two per path in the first two phases plus one per directory.
    // `OPFS_CRASH_ALL_STEPS=1` (scripts/crash) kills after every single step
    // and capture instead of a sample.
    let all = std::env::var_os("OPFS_CRASH_ALL_STEPS").is_some();
    let steps: Vec<usize> = if all {
        (1..=planned * 2 + 2).collect()
    } else {
        vec![1, 2, 3, planned / 2, planned, planned + planned / 2]
    };
    for k in steps {
        points.push(format!("rewind-after-step:{k}"));
    }
    if all {
        points.extend((2..=planned).map(|k| format!("rewind-after-capture:{k}")));
    }
    let mut mixes = 0;
    for (i, point) in points.iter().enumerate() {
        let ctx = format!("failpoint {point}");
        let sync: &[&str] = if i % 2 == 1 { &["--sync"] } else { &[] };
        let pid = mount(&f, sync, &[("OPFS_FAILPOINT", point)]);
        f.assert_tree(&format!("{ctx}: before"), &after);
        // The interrupted rewind's turn: the next one.
        let interrupted = f.open_turn() + 1;
        let run = f.opfs_c(&["rewind", "2", "--json"]);
        if run.code == Some(0) && all && point.starts_with("rewind-after-") {
            // Counting past the rewind's last step or capture: it finished.
            // Put the tree back for the next failpoint.
            f.assert_tree(&format!("{ctx}: not reached"), &start);
            let rw = rewind_turn(&run.json());
            // The redo must not run under the still-armed failpoint.
            f.umount();
            mount(&f, sync, &[]);
            rewind_ok(&f, rw, &format!("{ctx}: not reached, redo"));
            f.umount();
            continue;
        }
        assert_ne!(
            run.code,
            Some(0),
            "{ctx}: the daemon should have died inside the rewind: {run}"
        );
        assert!(
            wait_dead(pid, Duration::from_secs(10)),
            "{ctx}: still alive"
        );
        assert_stale(&f);
        let between = project_tree(&f);
        if between != start && between != after {
            mixes += 1;
        }
        mount(&f, sync, &[]);
        let st = f.status();
        let recovered = st["recovered"].as_str().unwrap_or("");
        if point.starts_with("rewind-begin") || point.starts_with("rewind-after-capture") {
            // Killed before the restore was marked running (it is marked
            // only once every record is committed): nothing was written,
            // the project is exactly as before the rewind.
            f.assert_tree(&ctx, &after);
            assert!(
                recovered.contains("before it changed anything"),
                "{ctx}: status must say the rewind was rolled back: {st:#}"
            );
        } else {
            f.assert_tree(&ctx, &start);
            if point.starts_with("rewind-after-done") {
                assert!(
                    recovered.is_empty() || recovered.contains("finished"),
                    "{ctx}: {st:#}"
                );
            } else {
                assert!(
                    recovered.contains("finished an interrupted rewind to turn 2"),
                    "{ctx}: status must say the rewind was finished: {st:#}"
                );
            }
            // The interrupted rewind is a turn like any other: rewinding to it
            // is the redo, back to the tree before the rewind (the start
            // finished it as a turn of its own, which recorded the
            // half-restored state it overwrote).
            rewind_ok(&f, interrupted, &format!("{ctx}: redo"));
            f.assert_tree(&format!("{ctx}: redo"), &after);
        }
        // The open turn must be an agent turn again.
        let log = f.opfs_c(&["log", "--json"]).ok().json();
        let open = f.open_turn();
        let kind = log
            .as_array()
            .and_then(|a| a.iter().find(|t| t["turn"].as_u64() == Some(open)))
            .map(|t| t["kind"].clone());
        assert_eq!(
            kind,
            Some(serde_json::json!("agent")),
            "{ctx}: open turn {open} should be an agent turn: {log:#}"
        );
        f.umount();
    }
    assert!(
        mixes >= 3,
        "the step failpoints should have left a half-restored project to recover from ({mixes})"
    );
}

#[test]
fn sigkill_at_capture_failpoints() {
    let f = Fixture::new();
    write_file(&f.p("a"), b"a0\n", 0o644);
    write_file(&f.p("d/b"), &vec![1u8; 70000], 0o644);
    for point in [
        "capture-after-blob:1",
        "capture-after-record:1",
        "capture-after-blob:2",
        "capture-after-record:4",
    ] {
        let pid = mount(&f, &[], &[("OPFS_FAILPOINT", point)]);
        let start_turn = f.turn(point);
        let start = project_tree(&f);
        // Each step's hook may be the one that kills the daemon.
        for script in [
            "printf 'a1\\n' >> a",
            "printf 'new\\n' > d/new",
            "mv d/b d/c",
            "rm -f a",
            "mkdir -p e/f",
        ] {
            let _ = Command::new("bash")
                .arg("-c")
                .arg(script)
                .current_dir(&f.mnt)
                .stderr(Stdio::null())
                .status();
        }
        assert!(
            wait_dead(pid, Duration::from_secs(10)),
            "{point}: the failpoint was not reached"
        );
        assert_stale(&f);
        mount(&f, &[], &[]);
        rewind_ok(&f, start_turn, point);
        f.assert_tree(point, &start);
        f.umount();
    }
}

/// Aborts the FUSE connection of the mount at `mnt` (`umount2` with
/// `MNT_FORCE` runs the filesystem's `umount_begin`, which for FUSE aborts
/// the connection even when the unmount itself then fails as busy), so that
/// a wedged daemon and every request waiting on it end.
fn abort_connection(mnt: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(mnt.as_os_str().as_bytes()).expect("path");
    // SAFETY: valid C string.
    unsafe { libc::umount2(c.as_ptr(), libc::MNT_FORCE) };
}

/// Regression: a daemon killed while it wrote back its own mount could not
/// die. `opfs turn` first writes the mount's dirty mmap pages back
/// (`Controller::write_back`: an `fdatasync` of the file through the
/// mountpoint, which the kernel turns into WRITEs to the daemon itself).
/// When the kill took the worker serving such a WRITE, the thread in
/// `fdatasync` waited for its answer uninterruptibly, and since the process
/// still held `/dev/fuse` the kernel never aborted the connection: the
/// daemon stayed half dead, holding the state lock, its mount hanging every
/// caller. Range capture records inside the WRITE, so the failpoint kills
/// the daemon exactly there.
#[test]
fn sigkill_while_the_daemon_writes_back_its_own_mount_lets_it_die() {
    let f = Fixture::new();
    let before = vec![b'a'; 8192];
    write_file(&f.p("mapped"), &before, 0o644);
    let pid = mount(
        &f,
        &[],
        &[
            ("OPFS_RANGE_MIN", "0"),
            ("OPFS_FAILPOINT", "capture-after-record:1"),
        ],
    );
    let map = mmap::Mapping::new(&f.m("mapped"));
    map.store(4096, b"stored through the mapping");
    let mut turn = f
        .opfs_command(&[
            std::ffi::OsStr::new("-C"),
            f.mnt.as_os_str(),
            std::ffi::OsStr::new("turn"),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start opfs turn");
    let died = wait_dead(pid, Duration::from_secs(10));
    if !died {
        // Unwedge the daemon and this test before failing.
        abort_connection(&f.mnt);
    }
    let status = turn.wait().expect("wait for opfs turn");
    assert!(
        died,
        "daemon {pid} did not die: a thread stayed in its own write-back"
    );
    assert!(
        !status.success(),
        "the daemon died inside the turn's write-back, the turn cannot have succeeded"
    );
    assert_stale(&f);
    drop(map);
    mount(&f, &[], &[]);
    assert_eq!(
        std::fs::read(f.p("mapped")).expect("read the project file"),
        before,
        "the store whose capture the kill interrupted reached the project"
    );
    rewind_ok(&f, 1, "after the kill");
    assert_eq!(
        std::fs::read(f.p("mapped")).expect("read the project file"),
        before
    );
    f.umount();
}

/// Found by the SIGKILL rounds (seed 424242, round 31), not crash-specific:
/// a directory the agent created and then replaced by a symlink made every
/// path once recorded under it a conflict ("cannot read its current state:
/// Too many levels of symbolic links") although rewinding needs nothing
/// there.
#[test]
fn regression_symlink_over_a_recorded_directory_is_no_conflict() {
    let f = Fixture::new();
    mount(&f, &[], &[]);
    let t = f.turn("start");
    let start = project_tree(&f);
    f.sh("mkdir -p d2/c/e && printf 'f\\n' > d2/c/e/f && ln -s x d2/c/e/l");
    let t2 = f.turn("dir made");
    f.sh("rm -rf d2/c && ln -s elsewhere d2/c");
    rewind_ok(&f, t, "rewind over the symlink");
    f.assert_tree("rewind over the symlink", &start);
    // And to a turn where the directory existed: the symlink goes, the tree
    // comes back.
    f.sh("mkdir -p d2 && ln -s elsewhere d2/c");
    rewind_ok(&f, t2, "back to the directory");
    assert!(f.p("d2/c/e/f").is_file());
    f.umount();
}
