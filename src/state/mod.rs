//! Where opfs keeps its records: the state dir (design §3).
//!
//! `$OPFS_HOME` if set, else `$XDG_DATA_HOME/opfs`, else
//! `~/.local/share/opfs`. Inside it, `projects/<key>/` holds one project's
//! index, blobs, control socket and daemon log, where `<key>` is the first 16
//! hex digits of the BLAKE3 of the project's canonical path; `mounts/<key of
//! the mountpoint>` names the project a mountpoint serves, so `-C` can be
//! either.

use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub mod home;
pub mod lock;
pub mod mountinfo;
pub mod registry;

/// The root of all state (`$OPFS_HOME` etc.).
pub fn opfs_home() -> PathBuf {
    if let Some(h) = std::env::var_os("OPFS_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(h);
    }
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("opfs");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    PathBuf::from(home).join(".local/share/opfs")
}

/// The key of a canonical path: 16 hex digits of its BLAKE3.
pub fn key_of(canonical: &Path) -> String {
    blake3::hash(canonical.as_os_str().as_bytes()).to_hex()[..16].to_string()
}

/// One project's state folder.
#[derive(Debug, Clone)]
pub struct StateDir {
    /// The folder itself.
    pub dir: PathBuf,
    /// The canonical project path it belongs to.
    pub project: PathBuf,
}

impl StateDir {
    /// The state dir for the canonical project path `project` under `home`
    /// (not created).
    pub fn for_project(home: &Path, project: &Path) -> StateDir {
        StateDir {
            dir: home.join("projects").join(key_of(project)),
            project: project.to_path_buf(),
        }
    }

    /// Creates the folder and records which project it belongs to.
    pub fn create(&self) -> io::Result<()> {
        fs::create_dir_all(&self.dir)?;
        let marker = self.dir.join("project");
        if !marker.exists() {
            fs::write(&marker, self.project.as_os_str().as_bytes())?;
        }
        Ok(())
    }

    /// True when the folder exists.
    pub fn exists(&self) -> bool {
        self.dir.join("project").exists()
    }

    /// The SQLite index.
    pub fn index_path(&self) -> PathBuf {
        self.dir.join("index.db")
    }

    /// The capture log: pre-image records not yet in the index (see
    /// `store::log`).
    pub fn capture_log_path(&self) -> PathBuf {
        self.dir.join("capture.log")
    }

    /// The blob directory.
    pub fn blobs_dir(&self) -> PathBuf {
        self.dir.join("blobs")
    }

    /// The daemon's control socket.
    pub fn socket_path(&self) -> PathBuf {
        self.dir.join("control.sock")
    }

    /// The daemon's log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("daemon.log")
    }

    /// The lock file the daemon (or a direct CLI operation) holds.
    pub fn lock_path(&self) -> PathBuf {
        self.dir.join("lock")
    }

    /// The file naming the current mountpoint while mounted.
    pub fn mount_record(&self) -> PathBuf {
        self.dir.join("mountpoint")
    }
}

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
