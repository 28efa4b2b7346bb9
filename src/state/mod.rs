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
    let start = absolute(path);
    let mut cur: Option<&Path> = Some(&start);
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
