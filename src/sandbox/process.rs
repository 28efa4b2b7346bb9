//! Running the command: bwrap in its own process group with the sandbox's
//! pid read from `--info-fd`, signals forwarded, and the exit status as a
//! shell reports it; or, for `danger-full-access`, a plain child.

use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
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

/// The pipe bwrap reports the sandbox's pid on (`--info-fd`): a read end
/// for this process (close-on-exec) and a write end bwrap inherits.
#[derive(Debug)]
pub(super) struct InfoPipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl InfoPipe {
    /// A fresh pipe whose write end stays open across exec. Another child
    /// spawned meanwhile may inherit a copy of it too; that is harmless,
    /// because the pid is read up to the end of the first JSON object, not
    /// to end of file.
    pub(super) fn new() -> Result<InfoPipe, RunError> {
        let make = || -> io::Result<InfoPipe> {
            let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
            rustix::io::fcntl_setfd(&write, rustix::io::FdFlags::empty())?;
            Ok(InfoPipe { read, write })
        };
        make().map_err(RunError::io("cannot create a pipe"))
    }

    /// The fd number to pass as `--info-fd`.
    pub(super) fn fd(&self) -> RawFd {
        self.write.as_raw_fd()
    }
}

/// What runs between bwrap setting up the sandbox and the command
/// starting (bwrap's `--block-fd`): `ready(child_pid)` is called once the
/// sandbox's pid is known, then the command is let go. If the pid never
/// comes, the pipe is closed and bwrap goes on (it reads end of file).
pub(super) struct Gate {
    read: OwnedFd,
    write: OwnedFd,
    ready: Box<dyn FnOnce(i32) + Send>,
}

impl Gate {
    /// A gate calling `ready`; its read end stays open across exec.
    pub(super) fn new(ready: Box<dyn FnOnce(i32) + Send>) -> Result<Gate, RunError> {
        let make = || -> io::Result<(OwnedFd, OwnedFd)> {
            let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
            rustix::io::fcntl_setfd(&read, rustix::io::FdFlags::empty())?;
            Ok((read, write))
        };
        let (read, write) = make().map_err(RunError::io("cannot create a pipe"))?;
        Ok(Gate { read, write, ready })
    }

    /// The fd number to pass as `--block-fd`.
    pub(super) fn fd(&self) -> RawFd {
        self.read.as_raw_fd()
    }
}

/// Signals `pid` (a process group when `group`); a process already gone
/// is not an error worth reporting while forwarding.
fn signal(pid: i32, sig: i32, group: bool) {
    let (Some(pid), Some(sig)) = (
        rustix::process::Pid::from_raw(pid),
        rustix::process::Signal::from_named_raw(sig),
    ) else {
        return;
    };
    let _ = if group {
        rustix::process::kill_process_group(pid, sig)
    } else {
        rustix::process::kill_process(pid, sig)
    };
}

/// Spawns bwrap in its own process group (so the terminal's signals reach
/// only `opfs run`, which forwards them), learns the sandbox's pid from
/// `--info-fd` (`info`, whose fd `cmd` names), and waits.
///
/// `foreground` (`unrestricted`, which makes no new session): bwrap stays
/// in this process's group, so a shell inside keeps the terminal (job
/// control, reads from it); the terminal's SIGINT and SIGQUIT reach it
/// directly and are not passed on, the other signals go to the command
/// alone.
pub(super) fn spawn_and_wait(
    mut cmd: Command,
    info: InfoPipe,
    foreground: bool,
    gate: Option<Gate>,
) -> Result<i32, RunError> {
    if !foreground {
        cmd.process_group(0);
    }
    let child = cmd
        .spawn()
        .map_err(|e| RunError::Setup(format!("cannot start bwrap: {e}")))?;
    let InfoPipe { read, write } = info;
    drop(write);
    let gate = gate.map(|g| {
        drop(g.read);
        (g.write, g.ready)
    });
    let sandbox_pid = Arc::new(AtomicI32::new(0));
    {
        let sandbox_pid = sandbox_pid.clone();
        std::thread::spawn(move || {
            let pid = read_child_pid(read);
            if let Some(pid) = pid {
                sandbox_pid.store(pid, Ordering::SeqCst);
            }
            if let Some((write, ready)) = gate {
                if let Some(pid) = pid {
                    ready(pid);
                }
                let _ = rustix::io::write(&write, b"x");
            }
        });
    }
    let status = wait_forwarding(child, FORWARDED, move |sig, bwrap_pid| {
        let pid = sandbox_pid.load(Ordering::SeqCst);
        if foreground {
            if sig != libc::SIGINT && sig != libc::SIGQUIT && sig != libc::SIGWINCH {
                signal(if pid > 0 { pid } else { bwrap_pid }, sig, false);
            }
        } else if pid > 0 {
            // The sandbox's init leads the new session and process group
            // the command runs in: signal the group, as a terminal would.
            signal(pid, sig, true);
        } else {
            // Not started yet: bwrap dies of it and takes the sandbox
            // with it (--die-with-parent).
            signal(bwrap_pid, sig, false);
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
    let mut warnings = Vec::new();
    if let Some(label) = &opts.turn {
        let st = super::locate(home, &opts.dir)?;
        let (turn, via) = crate::control::Project::new(st.clone())
            .turn_via(Some(label), None, true)
            .map_err(RunError::Turn)?;
        if via == crate::control::client::Via::Direct {
            warnings.push(format!(
                "no opfs daemon serves {}: turn {turn} was opened in its state dir, but the \
                 command's changes are not recorded (danger-full-access runs outside any mount)",
                st.project.display()
            ));
        }
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
                signal(pid, sig, false);
            }
        },
    )
    .map_err(RunError::io("cannot wait for the command"))?;
    Ok(RunOutcome {
        code: exit_code(status),
        warnings,
        daemon_stopped: false,
    })
}
