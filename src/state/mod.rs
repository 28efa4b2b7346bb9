//! Where opfs keeps its records: the state dir (design §3). The files
//! inside one project's state dir are `store::layout`'s.
//!
//! `$OPFS_HOME` if set, else `$XDG_DATA_HOME/opfs`, else
//! `~/.local/share/opfs`. Inside it, `projects/<key>/` holds one project's
//! index, blobs, control socket and daemon log, where `<key>` is the first 16
//! hex digits of the BLAKE3 of the project's canonical path; `mounts/<key of
//! the mountpoint>` names the project a mountpoint serves, so `-C` can be
//! either.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::store::layout::key_of;
use crate::store::StateDir;

pub mod holder;
pub mod home;
pub mod lock;
pub mod mountinfo;
pub mod registry;
pub mod usage;

/// The registry entry for a mountpoint.
pub fn mount_entry(home: &Path, mountpoint: &Path) -> PathBuf {
    home.join("mounts").join(key_of(mountpoint))
}

/// Finds the project that `path` (a project, a mountpoint, or anything
/// inside one) belongs to: walks up from `path` and returns the first
/// ancestor that is a known project or a registered mountpoint.
pub fn resolve(home: &Path, path: &Path) -> Option<StateDir> {
    // Lexically first: a path inside a registered mountpoint is found
    // without a `stat` of the mount, which would wait for a stopped
    // daemon.
    resolve_from(home, &lexically_absolute(path)).or_else(|| resolve_from(home, &absolute(path)))
}

/// [`resolve`] for a path at or inside a mountpoint registered under
/// `home`, found lexically: without any file system access to the path
/// itself, so a stopped daemon's mount is never touched. `None` for
/// anything else (ask [`resolve`]).
pub fn resolve_registered(home: &Path, path: &Path) -> Option<StateDir> {
    let start = lexically_absolute(path);
    start.ancestors().find_map(|p| {
        let project = fs::read(mount_entry(home, p)).ok()?;
        let sd = StateDir::for_project(home, Path::new(std::ffi::OsStr::from_bytes(&project)));
        sd.exists().then_some(sd)
    })
}

/// `stat` of `path`, or `None` when it takes longer than `limit` (a path
/// in the mount of a stopped daemon: the `stat` is left behind on a
/// thread of its own, which ends with the process). Also `None` when that
/// thread cannot be started.
pub fn metadata_within(
    path: &Path,
    limit: std::time::Duration,
) -> Option<std::io::Result<fs::Metadata>> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let p = path.to_path_buf();
    std::thread::Builder::new()
        .spawn(move || {
            let _ = tx.send(fs::metadata(&p));
        })
        .ok()?;
    rx.recv_timeout(limit).ok()
}

fn resolve_from(home: &Path, start: &Path) -> Option<StateDir> {
    let mut cur: Option<&Path> = Some(start);
    while let Some(p) = cur {
        let sd = StateDir::for_project(home, p);
        if sd.exists() {
            return Some(sd);
        }
        if let Ok(project) = fs::read(mount_entry(home, p)) {
            let project = PathBuf::from(std::ffi::OsStr::from_bytes(&project));
            let sd = StateDir::for_project(home, &project);
            if sd.exists() {
                return Some(sd);
            }
        }
        cur = p.parent();
    }
    None
}

/// `path` made absolute and canonical where possible. A path inside a dead
/// FUSE mount cannot be canonicalized (`ENOTCONN`); then the lexically
/// absolute path is used.
pub fn absolute(path: &Path) -> PathBuf {
    if let Ok(c) = fs::canonicalize(path) {
        return c;
    }
    lexically_absolute(path)
}

/// `path` made absolute against the current directory, with `.` and `..`
/// resolved lexically: no file system access (symlinks stay as they are).
pub fn lexically_absolute(path: &Path) -> PathBuf {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .unwrap_or_else(|_| PathBuf::from("/"))
            .join(path)
    };
    let mut out = PathBuf::new();
    for c in abs.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}
