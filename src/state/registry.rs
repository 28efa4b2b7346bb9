//! The mount registry: which mountpoint serves which project, so `-C` can
//! name either, and a state dir can say where it is mounted.
//!
//! `mounts/<key of the mountpoint>` (see [`crate::state::mount_entry`])
//! holds the project's path; the state dir's `mountpoint` file
//! ([`StateDir::mount_record`]) holds the mountpoint's.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::state::{mount_entry, StateDir};

/// Registers `mountpoint` as serving `state`'s project.
///
/// Errors: the registry entry or the mount record cannot be written.
pub fn register_mount(home: &Path, state: &StateDir, mountpoint: &Path) -> io::Result<()> {
    let entry = mount_entry(home, mountpoint);
    if let Some(parent) = entry.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&entry, state.project.as_os_str().as_bytes())?;
    std::fs::write(state.mount_record(), mountpoint.as_os_str().as_bytes())
}

/// Removes the registration made by [`register_mount`], and the control
/// socket. Missing files are fine.
pub fn unregister_mount(home: &Path, state: &StateDir, mountpoint: &Path) {
    let _ = std::fs::remove_file(mount_entry(home, mountpoint));
    let _ = std::fs::remove_file(state.mount_record());
    let _ = std::fs::remove_file(state.socket_path());
}

/// The mountpoint recorded for `state`, if any (it may be stale when the
/// daemon was killed: check it with
/// [`crate::state::mountinfo::is_mount_point`]).
pub fn recorded_mountpoint(state: &StateDir) -> Option<PathBuf> {
    std::fs::read(state.mount_record())
        .ok()
        .map(|b| PathBuf::from(OsStr::from_bytes(&b)))
}
