//! `opfs doctor`: checks what opfs needs from the machine, one line per
//! check (`ok`, `warn` or `fail`), each problem with how to fix it; exit 1
//! when a required check fails. Reads only: the one write is a probe file
//! in the state home, removed at once.
//!
//! Required (`fail`): `/dev/fuse` usable, `fusermount3` on PATH, a kernel
//! with `openat2` (5.6 or later), the state home writable. Optional
//! (`warn`): `user_allow_other`, bubblewrap and its namespaces (only
//! `opfs run` needs them); when `opfs integrate codex` put its hook in
//! `~/.codex/config.toml`, whether Codex has trusted it (Codex skips a
//! hook the user has not reviewed, silently).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::cli::error::{CommandError, ErrorKind};
use crate::cli::Ctx;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Ok,
    Warn,
    Fail,
}

impl Level {
    fn as_str(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Warn => "warn",
            Level::Fail => "fail",
        }
    }
}

/// One check: what it looked at, what it found, how to fix it.
#[derive(Debug)]
struct Check {
    name: &'static str,
    level: Level,
    detail: String,
    fix: Option<String>,
}

impl Check {
    fn ok(name: &'static str, detail: impl Into<String>) -> Check {
        Check {
            name,
            level: Level::Ok,
            detail: detail.into(),
            fix: None,
        }
    }

    fn bad(name: &'static str, level: Level, detail: impl Into<String>, fix: &str) -> Check {
        Check {
            name,
            level,
            detail: detail.into(),
            fix: Some(fix.to_string()),
        }
    }
}

pub fn run(ctx: &Ctx, out: &mut dyn Write) -> Result<(), CommandError> {
    let search = ctx.env.run.search_path.clone();
    let find = |name: &str| -> Option<PathBuf> {
        std::env::split_paths(search.as_deref()?)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    };
    let mut checks = vec![dev_fuse(), fusermount(find("fusermount3")), kernel()];
    checks.push(fuse_conf(Path::new("/etc/fuse.conf")));
    let bwrap = ctx.env.bwrap.clone().or_else(|| find("bwrap"));
    checks.push(bubblewrap(bwrap.as_deref()));
    checks.push(state_home(ctx.home()));
    if let Some(c) = ctx.env.home.as_deref().and_then(codex_hook) {
        checks.push(c);
    }
    let failed = checks.iter().any(|c| c.level == Level::Fail);
    if ctx.format.is_json() {
        let list: Vec<_> = checks
            .iter()
            .map(|c| {
                serde_json::json!({
                    "check": c.name, "status": c.level.as_str(),
                    "detail": c.detail, "fix": c.fix,
                })
            })
            .collect();
        writeln!(
            out,
            "{}",
            serde_json::json!({ "ok": !failed, "checks": list })
        )?;
    } else {
        for c in &checks {
            writeln!(out, "{:<4}  {:<12}  {}", c.level.as_str(), c.name, c.detail)?;
            if let Some(f) = &c.fix {
                writeln!(out, "{:<4}  {:<12}  fix: {f}", "", "")?;
            }
        }
    }
    if failed {
        if !ctx.format.is_json() {
            writeln!(
                out,
                "opfs cannot mount here until the failed checks are fixed"
            )?;
        }
        return Err(CommandError::reported(ErrorKind::Failure));
    }
    Ok(())
}

/// `codex hook`: whether Codex runs opfs's hook (`None` when there is
/// none: nothing to check).
fn codex_hook(home: &Path) -> Option<Check> {
    use opfs::integrate::config::{codex_hook_trust, codex_trust_advice, CodexTrust};
    const NAME: &str = "codex hook";
    match codex_hook_trust(home) {
        Ok((_, CodexTrust::NoHook)) => None,
        Ok((path, CodexTrust::Trusted)) => Some(Check::ok(
            NAME,
            format!(
                "trusted in {}: Codex opens a turn per message",
                path.display()
            ),
        )),
        Ok((path, trust)) => {
            let advice = codex_trust_advice(&path, &trust)?;
            let (detail, fix) = advice.split_once(": ").unwrap_or((&advice, ""));
            Some(Check::bad(NAME, Level::Warn, detail, fix))
        }
        Err(e) => Some(Check::bad(
            NAME,
            Level::Warn,
            e.to_string(),
            "fix the file so Codex (and opfs) can read it",
        )),
    }
}

fn dev_fuse() -> Check {
    const NAME: &str = "/dev/fuse";
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        Ok(_) => Check::ok(NAME, "present and opens for reading and writing"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Check::bad(
            NAME,
            Level::Fail,
            "missing",
            "load the module (`modprobe fuse`), or in a container pass the device \
             (`--device /dev/fuse`)",
        ),
        Err(e) => Check::bad(
            NAME,
            Level::Fail,
            format!("cannot be opened: {e}"),
            "make it readable and writable for your user (`chmod 666 /dev/fuse`), or run \
             with the rights a FUSE mount needs",
        ),
    }
}

fn fusermount(found: Option<PathBuf>) -> Check {
    const NAME: &str = "fusermount3";
    match found {
        Some(p) => Check::ok(NAME, p.display().to_string()),
        None => Check::bad(
            NAME,
            Level::Fail,
            "not on PATH",
            "install fuse3 (`apt-get install fuse3`, `dnf install fuse3`)",
        ),
    }
}

/// The kernel release, as `(major, minor)` and the whole string.
fn kernel_release() -> Option<(u32, u32, String)> {
    let text = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let text = text.trim().to_string();
    let mut nums = text
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty());
    let major = nums.next()?.parse().ok()?;
    let minor = nums.next()?.parse().ok()?;
    Some((major, minor, text))
}

fn kernel() -> Check {
    const NAME: &str = "kernel";
    match kernel_release() {
        Some((ma, mi, text)) if (ma, mi) >= (5, 6) => Check::ok(
            NAME,
            format!("Linux {text} (5.6 or later: openat2; the FUSE protocol is agreed at mount)"),
        ),
        Some((_, _, text)) => Check::bad(
            NAME,
            Level::Fail,
            format!("Linux {text}: opfs needs 5.6 or later (openat2 confines every path)"),
            "upgrade the kernel",
        ),
        None => Check::bad(
            NAME,
            Level::Warn,
            "cannot read /proc/sys/kernel/osrelease",
            "mount /proc; opfs needs Linux 5.6 or later",
        ),
    }
}

fn fuse_conf(path: &Path) -> Check {
    const NAME: &str = "fuse.conf";
    let set = std::fs::read_to_string(path).is_ok_and(|t| {
        t.lines()
            .any(|l| l.split('#').next().unwrap_or("").trim() == "user_allow_other")
    });
    if set {
        Check::ok(
            NAME,
            format!("user_allow_other is set in {}", path.display()),
        )
    } else {
        Check::bad(
            NAME,
            Level::Warn,
            format!("user_allow_other is not set in {}", path.display()),
            "add the line `user_allow_other` to /etc/fuse.conf if users other than the one \
             who mounts must reach a mount (as root opfs allows other users anyway)",
        )
    }
}

fn bubblewrap(bwrap: Option<&Path>) -> Check {
    const NAME: &str = "bubblewrap";
    let Some(bwrap) = bwrap else {
        return Check::bad(
            NAME,
            Level::Warn,
            "bwrap is not on PATH (only `opfs run` and `opfs shell` need it)",
            "install bubblewrap (`apt-get install bubblewrap`), or set OPFS_BWRAP",
        );
    };
    // What `opfs shell` needs (a mount namespace: for a user without
    // root, bwrap makes it in a user namespace), then what `opfs run`'s
    // sandbox needs besides (a pid namespace, a fresh /dev and /proc).
    let probes: [(&str, &[&str]); 2] = [
        ("opfs shell", &["--dev-bind", "/", "/"]),
        (
            "opfs run",
            &[
                "--unshare-pid",
                "--ro-bind",
                "/",
                "/",
                "--dev",
                "/dev",
                "--proc",
                "/proc",
            ],
        ),
    ];
    for (what, args) in probes {
        let out = Command::new(bwrap)
            .args(args)
            .arg("true")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                let stderr = String::from_utf8_lossy(&o.stderr).trim().to_string();
                let why = if stderr.is_empty() {
                    o.status.to_string()
                } else {
                    stderr
                };
                return Check::bad(
                    NAME,
                    Level::Warn,
                    format!(
                        "{} cannot make the namespaces {what} needs ({}): {}, so {what} \
                         cannot show the project at its own path; work at a mountpoint \
                         instead (`opfs mount PROJECT MOUNTPOINT`: README, \"Working at a \
                         mountpoint\")",
                        bwrap.display(),
                        userns_state(),
                        why
                    ),
                    "allow unprivileged user namespaces (`sysctl user.max_user_namespaces=15000`; \
                     `sysctl kernel.unprivileged_userns_clone=1` on Debian; on Ubuntu \
                     `sysctl kernel.apparmor_restrict_unprivileged_userns=0` or an AppArmor \
                     profile for bwrap); in a container, run it with a seccomp profile that \
                     allows them; or run opfs as root",
                );
            }
            Err(e) => {
                return Check::bad(
                    NAME,
                    Level::Warn,
                    format!("cannot run {}: {e}", bwrap.display()),
                    "install bubblewrap, or point OPFS_BWRAP at it",
                )
            }
        }
    }
    Check::ok(
        NAME,
        format!(
            "{} makes the namespaces `opfs shell` and `opfs run` need ({})",
            bwrap.display(),
            userns_state()
        ),
    )
}

/// Whether this process needs a user namespace for a mount namespace, and
/// what the kernel's knobs say about them.
fn userns_state() -> String {
    if rustix::process::geteuid().is_root() {
        return "as root: no user namespace needed".into();
    }
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|t| t.trim().to_string())
    };
    let mut knobs = Vec::new();
    for (knob, off) in [
        ("/proc/sys/user/max_user_namespaces", "0"),
        ("/proc/sys/kernel/unprivileged_userns_clone", "0"),
        (
            "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            "1",
        ),
    ] {
        if let Some(v) = read(knob) {
            if v == off {
                knobs.push(format!("{knob} = {v} forbids them"));
            }
        }
    }
    if knobs.is_empty() {
        "without root: through a user namespace".into()
    } else {
        format!(
            "without root: through a user namespace; {}",
            knobs.join(", ")
        )
    }
}

fn state_home(home: &Path) -> Check {
    const NAME: &str = "state home";
    // The home may not exist yet: the first mount creates it under the
    // nearest existing ancestor.
    let Some(existing) = home.ancestors().find(|p| p.is_dir()) else {
        return Check::bad(
            NAME,
            Level::Fail,
            format!("{}: no ancestor exists", home.display()),
            "set OPFS_HOME to a writable directory",
        );
    };
    let probe = existing.join(format!(".opfs-doctor-{}", std::process::id()));
    match std::fs::write(&probe, b"") {
        Ok(()) => {
            if let Err(e) = std::fs::remove_file(&probe) {
                log::warn!("cannot remove {}: {e}", probe.display());
            }
            Check::ok(NAME, format!("{} is writable", home.display()))
        }
        Err(e) => Check::bad(
            NAME,
            Level::Fail,
            format!(
                "{} is not writable ({}: {e})",
                home.display(),
                existing.display()
            ),
            "set OPFS_HOME (or XDG_DATA_HOME) to a writable directory outside the project",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuse_conf_reads_the_option_not_a_comment() {
        let dir = std::env::temp_dir().join(format!("opfs-doctor-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let conf = dir.join("fuse.conf");
        std::fs::write(&conf, "# user_allow_other\nmount_max = 1000\n").expect("write");
        assert_eq!(fuse_conf(&conf).level, Level::Warn);
        std::fs::write(&conf, "user_allow_other # yes\n").expect("write");
        assert_eq!(fuse_conf(&conf).level, Level::Ok);
        assert_eq!(fuse_conf(&dir.join("missing")).level, Level::Warn);
        std::fs::remove_dir_all(&dir).expect("rm");
        assert_eq!(fusermount(None).level, Level::Fail);
        assert_eq!(state_home(Path::new("/proc/opfs-no")).level, Level::Fail);
    }
}
