//! The bwrap command line: the ordered arguments of the module
//! documentation of [`crate::sandbox`], finding bwrap, and proving the
//! sandbox can be built before the real command starts.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{Mode, Policy, RunError};
use crate::state;

/// Where the project is and where the sandboxed command starts.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The project's canonical path: where it appears inside.
    pub project: PathBuf,
    /// What is bound there: the mountpoint serving the project.
    pub source: PathBuf,
    /// Other paths that name the project outside (the mountpoint a user
    /// mounted it at): `source` is bound at each too, with the same git
    /// binds and hidden paths as at `project`, so an absolute path a tool
    /// wrote through the mountpoint resolves to the same view inside.
    pub aliases: Vec<PathBuf>,
    /// The working directory inside.
    pub cwd: PathBuf,
    /// The narrow socket of `opfs mcp` (`crate::mcp::narrow`), outside,
    /// if any: bound alone at [`NARROW_SOCKET`] inside.
    pub narrow: Option<PathBuf>,
    /// Worktree mountpoints (outside) and where each appears inside
    /// (`crate::mcp::tools::WORKTREES_INSIDE`), bound writable in
    /// `workspace-write` mode: their mounts only, never the state dir
    /// around them.
    pub worktrees: Vec<(PathBuf, PathBuf)>,
    /// The run's shared worktree folder (outside), if it could be made:
    /// bound at `WORKTREES_INSIDE` inside, its own mount read-only (only
    /// the worktree mounts in it are writable; `share.rs`).
    pub shared_worktrees: Option<PathBuf>,
    /// What git executes or trusts, bound read-only over itself after the
    /// project (`super::git`); empty with `--writable-git-config` and in
    /// `read-only` mode (where the whole project is read-only).
    pub git: Vec<super::git::GitBind>,
}

/// Where the narrow socket appears inside the sandbox (on its private
/// `/tmp`); `OPFS_MCP_SOCKET` names it there.
pub const NARROW_SOCKET: &str = "/tmp/.opfs-mcp.sock";

/// The bwrap arguments (everything before `--`) for `policy` and `layout`,
/// in the order the module documentation gives. Looks at the filesystem
/// only to skip missing hidden paths and to tell directories from files.
///
/// Errors: `DangerFullAccess` (it has no sandbox), a relative path.
pub fn bwrap_args(policy: &Policy, layout: &Layout) -> Result<Vec<OsString>, RunError> {
    if policy.mode == Mode::DangerFullAccess {
        return Err(RunError::Usage(
            "danger-full-access runs without a sandbox; there are no bwrap arguments".into(),
        ));
    }
    for p in [&layout.project, &layout.source, &layout.cwd]
        .into_iter()
        .chain(&policy.writable)
        .chain(&layout.aliases)
    {
        if !p.is_absolute() {
            return Err(RunError::Usage(format!(
                "{} is not an absolute path",
                p.display()
            )));
        }
    }
    if policy.mode == Mode::Unrestricted {
        return Ok(unrestricted_args(layout));
    }
    let mut a: Vec<OsString> = Vec::new();
    let mut push = |items: &[&OsStr]| a.extend(items.iter().map(|s| s.to_os_string()));
    push(&[
        "--die-with-parent".as_ref(),
        "--new-session".as_ref(),
        "--unshare-pid".as_ref(),
        "--unshare-ipc".as_ref(),
        "--unshare-uts".as_ref(),
        "--unshare-cgroup-try".as_ref(),
        "--cap-drop".as_ref(),
        "ALL".as_ref(),
    ]);
    if !policy.net {
        push(&["--unshare-net".as_ref()]);
    }
    push(&[
        "--ro-bind".as_ref(),
        "/".as_ref(),
        "/".as_ref(),
        "--dev".as_ref(),
        "/dev".as_ref(),
        "--proc".as_ref(),
        "/proc".as_ref(),
        "--tmpfs".as_ref(),
        "/tmp".as_ref(),
    ]);
    if policy.mode == Mode::WorkspaceWrite {
        for w in &policy.writable {
            push(&["--bind".as_ref(), w.as_os_str(), w.as_os_str()]);
        }
    }
    if let Some(sock) = &layout.narrow {
        push(&["--bind".as_ref(), sock.as_os_str(), NARROW_SOCKET.as_ref()]);
    }
    if policy.mode == Mode::WorkspaceWrite {
        if let Some(shared) = &layout.shared_worktrees {
            let inside: &OsStr = crate::mcp::tools::WORKTREES_INSIDE.as_ref();
            // Not recursive: the worktree binds in it stay writable.
            push(&[
                "--bind".as_ref(),
                shared.as_os_str(),
                inside,
                "--remount-ro".as_ref(),
                inside,
            ]);
        }
        for (outside, inside) in &layout.worktrees {
            push(&["--bind".as_ref(), outside.as_os_str(), inside.as_os_str()]);
        }
    }
    let hides = hide_targets(&policy.hide);
    let (inside, outside): (Vec<_>, Vec<_>) = hides
        .into_iter()
        .partition(|(p, _)| p.starts_with(&layout.project));
    for (p, is_dir) in &outside {
        push_hide(&mut a, p, *is_dir);
    }
    let bind = if policy.mode == Mode::ReadOnly {
        "--ro-bind"
    } else {
        "--bind"
    };
    for dest in std::iter::once(&layout.project).chain(&layout.aliases) {
        a.extend([
            OsString::from(bind),
            layout.source.clone().into(),
            dest.clone().into(),
        ]);
    }
    if policy.mode == Mode::WorkspaceWrite {
        for g in &layout.git {
            let how = if g.writable { "--bind" } else { "--ro-bind" };
            a.extend([
                OsString::from(how),
                g.source.clone().into(),
                g.dest.clone().into(),
            ]);
        }
    }
    for (p, is_dir) in &inside {
        push_hide(&mut a, p, *is_dir);
        if let Ok(rest) = p.strip_prefix(&layout.project) {
            for alias in &layout.aliases {
                push_hide(&mut a, &alias.join(rest), *is_dir);
            }
        }
    }
    a.extend([OsString::from("--chdir"), layout.cwd.clone().into()]);
    Ok(a)
}

/// `unrestricted`: the host as it is, writable where the caller may write
/// (`--dev-bind / /` is recursive: every mount, `/dev` and `/proc` as
/// they are), in a mount namespace of its own where the project's path
/// (and each alias) shows `source`. No other namespace, no dropped
/// capability, no new session (a person's shell keeps its terminal and
/// job control); `--die-with-parent` ends it with `opfs`.
fn unrestricted_args(layout: &Layout) -> Vec<OsString> {
    let mut a: Vec<OsString> = ["--die-with-parent", "--dev-bind", "/", "/"]
        .into_iter()
        .map(OsString::from)
        .collect();
    for dest in std::iter::once(&layout.project).chain(&layout.aliases) {
        a.extend([
            OsString::from("--bind"),
            layout.source.clone().into(),
            dest.clone().into(),
        ]);
    }
    a.extend([OsString::from("--chdir"), layout.cwd.clone().into()]);
    a
}

/// The existing hidden paths, resolved (a symlink hides its target),
/// deduplicated, without those under `/tmp` (private inside anyway).
fn hide_targets(paths: &[PathBuf]) -> Vec<(PathBuf, bool)> {
    let mut out: Vec<(PathBuf, bool)> = Vec::new();
    for p in paths {
        let Ok(real) = std::fs::canonicalize(p) else {
            continue;
        };
        if real.starts_with("/tmp") || out.iter().any(|(q, _)| *q == real) {
            continue;
        }
        let is_dir = real.is_dir();
        out.push((real, is_dir));
    }
    out
}

fn push_hide(a: &mut Vec<OsString>, p: &Path, is_dir: bool) {
    if is_dir {
        a.extend([
            "--tmpfs".into(),
            p.as_os_str().to_os_string(),
            "--remount-ro".into(),
            p.as_os_str().to_os_string(),
        ]);
    } else {
        a.extend([
            "--ro-bind".into(),
            "/dev/null".into(),
            p.as_os_str().to_os_string(),
        ]);
    }
}

/// The working directory inside for a caller in `dir`: the same place in
/// the project when `dir` is in the project or in the mountpoint, else the
/// project root.
pub fn map_cwd(dir: &Path, project: &Path, mountpoint: &Path) -> PathBuf {
    let d = state::absolute(dir);
    if let Ok(rest) = d.strip_prefix(mountpoint) {
        return project.join(rest);
    }
    if d.starts_with(project) {
        return d;
    }
    project.to_path_buf()
}

/// The bwrap binary: `explicit` if given, else `bwrap` in one of the
/// directories of `search_path` (the value of `$PATH`).
pub fn find_bwrap(
    explicit: Option<&Path>,
    search_path: Option<&OsStr>,
) -> Result<PathBuf, RunError> {
    if let Some(p) = explicit {
        return if p.is_file() {
            Ok(p.to_path_buf())
        } else {
            Err(RunError::BwrapMissing(p.display().to_string()))
        };
    }
    search_path
        .into_iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join("bwrap"))
        .find(|p| p.is_file())
        .ok_or_else(|| RunError::BwrapMissing("bwrap on $PATH".into()))
}

/// Runs `bwrap ARGS -- true`: proves the sandbox can be built before the
/// real command starts, so a setup failure is reported as such and never
/// confused with the command's own exit status.
///
/// A failure because a mount vanished while bwrap copied the host's mounts
/// ([`mount_vanished`]: another process unmounted a private mount and
/// removed its directory meanwhile, as parallel runs and tests do) is tried
/// again, up to [`PREFLIGHT_TRIES`] times in all; any other failure is
/// returned at once.
pub(super) fn preflight(bwrap: &Path, args: &[OsString], policy: &Policy) -> Result<(), RunError> {
    let mut tries = 1;
    loop {
        match preflight_once(bwrap, args, policy) {
            Err(RunError::Setup(msg)) if tries < PREFLIGHT_TRIES && mount_vanished(&msg) => {
                log::debug!("bwrap setup raced with an unmount, trying again: {msg}");
                std::thread::sleep(std::time::Duration::from_millis(20 * tries));
                tries += 1;
            }
            other => return other,
        }
    }
}

/// How many times [`preflight`] builds the sandbox before a vanished mount
/// is reported.
const PREFLIGHT_TRIES: u64 = 5;

/// Whether bwrap's setup error `msg` says a mount it had copied from the
/// host was gone when it applied the sandbox's flags to it: the race is
/// with another process's unmount, and building again sees the mounts as
/// they are now.
fn mount_vanished(msg: &str) -> bool {
    // ENOENT: the mount's directory was removed; EINVAL: the path is no
    // longer a mount's root (the mount went, its directory stayed).
    msg.contains("Unable to apply mount flags")
        && (msg.contains("No such file or directory") || msg.contains("Invalid argument"))
}

fn preflight_once(bwrap: &Path, args: &[OsString], policy: &Policy) -> Result<(), RunError> {
    let mut cmd = Command::new(bwrap);
    cmd.args(args)
        .arg("--")
        .arg("true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    apply_env(&mut cmd, policy, false);
    let out = cmd
        .output()
        .map_err(|e| RunError::Setup(format!("cannot start {}: {e}", bwrap.display())))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    Err(RunError::Setup(if stderr.is_empty() {
        format!("{} exited with {}", bwrap.display(), out.status)
    } else {
        stderr
    }))
}

/// The sandbox's environment on `cmd`: the secret variables removed,
/// `OPFS_SANDBOX` set, and `OPFS_MCP_SOCKET` set when the narrow socket is
/// bound (`narrow`), else removed.
pub(super) fn apply_env(cmd: &mut Command, policy: &Policy, narrow: bool) {
    for k in &policy.secret_env {
        cmd.env_remove(k);
    }
    cmd.env("OPFS_SANDBOX", policy.mode.as_str());
    if narrow {
        cmd.env("OPFS_MCP_SOCKET", NARROW_SOCKET);
    } else {
        cmd.env_remove("OPFS_MCP_SOCKET");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_a_mount_that_vanished_during_setup_is_tried_again() {
        assert!(mount_vanished(
            "bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags: \
             remount \"/newroot/home/u/.local/share/opfs/x-stage\": No such file or directory"
        ));
        assert!(!mount_vanished(
            "bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags: \
             remount \"/newroot/x\": Permission denied"
        ));
        assert!(!mount_vanished(
            "bwrap: Can't find source path /nope: No such file or directory"
        ));
        assert!(!mount_vanished(
            "bwrap: setting up uid map: Permission denied"
        ));
    }

    fn policy(mode: Mode) -> Policy {
        Policy {
            mode,
            net: false,
            writable: vec![PathBuf::from("/var")],
            hide: vec![],
            secret_env: vec![],
        }
    }

    fn layout() -> Layout {
        Layout {
            aliases: Vec::new(),
            narrow: None,
            worktrees: Vec::new(),
            shared_worktrees: None,
            git: Vec::new(),
            project: PathBuf::from("/srv/app"),
            source: PathBuf::from("/state/run/1"),
            cwd: PathBuf::from("/srv/app/src"),
        }
    }

    fn text(a: &[OsString]) -> String {
        a.iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn workspace_write_binds_the_mountpoint_over_the_project_last() {
        let a = text(&bwrap_args(&policy(Mode::WorkspaceWrite), &layout()).unwrap());
        assert!(a.contains("--cap-drop ALL"));
        assert!(a.contains("--unshare-net"));
        assert!(a.contains("--unshare-pid"));
        assert!(a.contains("--ro-bind / / --dev /dev --proc /proc --tmpfs /tmp"));
        let w = a.find("--bind /var /var").unwrap();
        let p = a.find("--bind /state/run/1 /srv/app").unwrap();
        assert!(w < p);
        assert!(a.ends_with("--chdir /srv/app/src"));
    }

    #[test]
    fn read_only_binds_the_project_read_only_and_nothing_writable() {
        let a = text(&bwrap_args(&policy(Mode::ReadOnly), &layout()).unwrap());
        assert!(a.contains("--ro-bind /state/run/1 /srv/app"));
        assert!(!a.contains("--bind /var"));
    }

    #[test]
    fn git_binds_come_after_the_project_and_only_when_writable() {
        let mut l = layout();
        l.git = vec![
            crate::sandbox::git::GitBind {
                source: PathBuf::from("/state/run/1/.git"),
                dest: PathBuf::from("/srv/app/.git"),
                writable: true,
            },
            crate::sandbox::git::GitBind {
                source: PathBuf::from("/state/run/1/.git/config"),
                dest: PathBuf::from("/srv/app/.git/config"),
                writable: false,
            },
        ];
        let a = text(&bwrap_args(&policy(Mode::WorkspaceWrite), &l).unwrap());
        let p = a.find("--bind /state/run/1 /srv/app").unwrap();
        let d = a.find("--bind /state/run/1/.git /srv/app/.git").unwrap();
        let c = a
            .find("--ro-bind /state/run/1/.git/config /srv/app/.git/config")
            .unwrap();
        assert!(p < d && d < c, "{a}");
        let r = text(&bwrap_args(&policy(Mode::ReadOnly), &l).unwrap());
        assert!(!r.contains(".git"), "{r}");
    }

    #[test]
    fn net_keeps_the_host_network() {
        let mut p = policy(Mode::WorkspaceWrite);
        p.net = true;
        assert!(!text(&bwrap_args(&p, &layout()).unwrap()).contains("--unshare-net"));
    }

    #[test]
    fn unrestricted_changes_only_the_project_path_and_its_aliases() {
        let mut l = layout();
        l.aliases = vec![PathBuf::from("/mnt/app")];
        let mut p = policy(Mode::Unrestricted);
        p.hide = vec![PathBuf::from("/etc")];
        let a = text(&bwrap_args(&p, &l).unwrap());
        assert_eq!(
            a,
            "--die-with-parent --dev-bind / / --bind /state/run/1 /srv/app \
             --bind /state/run/1 /mnt/app --chdir /srv/app/src"
        );
    }

    #[test]
    fn an_alias_gets_the_projects_bind_and_hidden_paths() {
        // A hidden path must exist (and lie outside /tmp) to be hidden:
        // /usr stands for the project, /usr/share for a hidden folder in it.
        let mut l = layout();
        l.project = PathBuf::from("/usr");
        l.cwd = PathBuf::from("/usr");
        l.aliases = vec![PathBuf::from("/mnt/app")];
        let mut p = policy(Mode::WorkspaceWrite);
        p.hide = vec![PathBuf::from("/usr/share")];
        let a = text(&bwrap_args(&p, &l).unwrap());
        let project = a.find("--bind /state/run/1 /usr ").unwrap();
        let alias = a.find("--bind /state/run/1 /mnt/app").unwrap();
        let hidden = a
            .find("--tmpfs /mnt/app/share --remount-ro /mnt/app/share")
            .unwrap();
        assert!(project < alias && alias < hidden, "{a}");
        assert!(
            a.contains("--tmpfs /usr/share --remount-ro /usr/share"),
            "{a}"
        );
    }

    #[test]
    fn danger_full_access_has_no_bwrap_arguments() {
        assert!(bwrap_args(&policy(Mode::DangerFullAccess), &layout()).is_err());
    }

    #[test]
    fn hidden_directories_get_a_read_only_tmpfs_and_files_dev_null() {
        let mut p = policy(Mode::WorkspaceWrite);
        p.hide = vec![
            PathBuf::from("/etc"),
            PathBuf::from("/etc/hostname"),
            PathBuf::from("/nonexistent/opfs-test"),
        ];
        let a = text(&bwrap_args(&p, &layout()).unwrap());
        assert!(a.contains("--tmpfs /etc --remount-ro /etc"));
        assert!(a.contains("--ro-bind /dev/null /etc/hostname"));
        assert!(!a.contains("nonexistent"));
    }

    #[test]
    fn cwd_in_the_mountpoint_maps_to_the_project() {
        let p = Path::new("/nonexistent-p");
        let m = Path::new("/nonexistent-m");
        assert_eq!(map_cwd(&m.join("a/b"), p, m), p.join("a/b"));
        assert_eq!(map_cwd(&p.join("c"), p, m), p.join("c"));
        assert_eq!(map_cwd(Path::new("/elsewhere-x"), p, m), p);
    }
}
