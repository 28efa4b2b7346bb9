//! Running the command: bwrap in its own process group with the sandbox's
//! pid read from `--info-fd`, signals forwarded, and the exit status as a
//! shell reports it; or, for `danger-full-access`, a plain child.

use std::io::{self, Read};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use super::{Mode, RunError, RunOptions, RunOutcome};

/// Signals `opfs run` passes on to the sandboxed command.
const FORWARDED: &[i32] = &[
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
];

/// The file descriptor bwrap reports the sandbox's pid on.
pub(super) const INFO_FD: RawFd = 3;

/// Spawns bwrap in its own process group (so the terminal's signals reach
/// only `opfs run`, which forwards them), learns the sandbox's pid from
/// `--info-fd`, and waits.
pub(super) fn spawn_and_wait(mut cmd: Command) -> Result<i32, RunError> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: fds is a valid array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(RunError::io("cannot create a pipe")(
            io::Error::last_os_error(),
        ));
    }
    // SAFETY: pipe2 returned two fresh descriptors that we now own.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let w = fds[1];
    // SAFETY: only async-signal-safe calls (setpgid, dup2, fcntl) between
    // fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setpgid(0, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            let r = if w == INFO_FD {
                libc::fcntl(w, libc::F_SETFD, 0)
            } else {
                libc::dup2(w, INFO_FD)
            };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .map_err(|e| RunError::Setup(format!("cannot start bwrap: {e}")))?;
    drop(write_end);
    let sandbox_pid = Arc::new(AtomicI32::new(0));
    {
        let sandbox_pid = sandbox_pid.clone();
        std::thread::spawn(move || {
            if let Some(pid) = read_child_pid(read_end) {
                sandbox_pid.store(pid, Ordering::SeqCst);
            }
        });
    }
    let status = wait_forwarding(child, FORWARDED, move |sig, bwrap_pid| {
        let pid = sandbox_pid.load(Ordering::SeqCst);
        // SAFETY: kill has no memory-safety preconditions.
        unsafe {
            if pid > 0 {
                // The sandbox's init leads the new session and process group
                // the command runs in: signal the group, as a terminal would.
                libc::kill(-pid, sig);
            } else {
                // Not started yet: bwrap dies of it and takes the sandbox
                // with it (--die-with-parent).
                libc::kill(bwrap_pid, sig);
            }
        }
    })
    .map_err(RunError::io("cannot wait for bwrap"))?;
    Ok(exit_code(status))
}

/// Reads bwrap's `--info-fd` JSON up to the end of the first object and
/// returns its `child-pid`. The fd may stay open in the sandbox, so this
/// does not wait for end of file.
fn read_child_pid(fd: OwnedFd) -> Option<i32> {
    let mut f = std::fs::File::from(fd);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 512];
    loop {
        let n = f.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&buf) {
            return v["child-pid"].as_i64().and_then(|p| i32::try_from(p).ok());
        }
    }
}

/// Waits for `child`, calling `forward(signal, child_pid)` for each of
/// `signals` this process receives meanwhile.
fn wait_forwarding(
    mut child: Child,
    signals: &[i32],
    forward: impl Fn(i32, i32) + Send + 'static,
) -> io::Result<ExitStatus> {
    let mut sigs = signal_hook::iterator::Signals::new(signals)?;
    let handle = sigs.handle();
    let pid = child.id() as i32;
    let thread = std::thread::spawn(move || {
        for sig in sigs.forever() {
            forward(sig, pid);
        }
    });
    let status = child.wait();
    handle.close();
    let _ = thread.join();
    status
}

fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

/// `danger-full-access`: the command runs as a plain child in the caller's
/// directory (`-C` if given), with no mount namespace and no sandbox.
/// `--turn` still opens a turn.
pub(super) fn run_unsandboxed(opts: &RunOptions, home: &Path) -> Result<RunOutcome, RunError> {
    if !opts.writable.is_empty() {
        return Err(RunError::Usage(
            "--writable has no effect with danger-full-access (everything is writable)".into(),
        ));
    }
    if let Some(label) = &opts.turn {
        let st = super::locate(home, &opts.dir)?;
        super::open_turn(&st, label)?;
    }
    let mut cmd = Command::new(&opts.command[0]);
    cmd.args(&opts.command[1..])
        .current_dir(&opts.dir)
        .env("OPFS_SANDBOX", Mode::DangerFullAccess.as_str());
    let child = cmd.spawn().map_err(RunError::io(format!(
        "cannot run {}",
        Path::new(&opts.command[0]).display()
    )))?;
    // The child shares our process group, so the terminal's SIGINT, SIGQUIT
    // and SIGWINCH reach it directly; only signals aimed at this process
    // are passed on.
    let status = wait_forwarding(
        child,
        &[
            libc::SIGHUP,
            libc::SIGTERM,
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGINT,
            libc::SIGQUIT,
        ],
        |sig, pid| {
            if sig != libc::SIGINT && sig != libc::SIGQUIT {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe {
                    libc::kill(pid, sig);
                }
            }
        },
    )
    .map_err(RunError::io("cannot wait for the command"))?;
    Ok(RunOutcome {
        code: exit_code(status),
        warnings: Vec::new(),
    })
}
