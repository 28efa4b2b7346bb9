//! Every file name in a state dir (design §3, `docs/format.md`): the one
//! place that knows where a project's index, capture log, blobs, socket,
//! daemon log, lock and mount record live.
//!
//! ```text
//! <opfs home>/projects/<key>/   one project's state dir (StateDir)
//!   project        the canonical project path (marks the dir as in use)
//!   index.db       the SQLite index (+ -wal, -shm)
//!   capture.log    records not yet in the index (store::log)
//!   blobs/         content-addressed blobs (store::blob), blobs/tmp/
//!   kept/          removed files' inodes awaiting their hash (store::kept)
//!   control.sock   the daemon's socket
//!   daemon.log     the daemon's log
//!   lock           held by the daemon or a direct CLI operation
//!   pins.lock      held while gc reads its pins and drops turns
//!   mountpoint     the current mountpoint, while mounted
//!   record-exclude the `[record] exclude` list of the last mount
//!   git-changes    changes to what git runs or trusts, per turn (capture::git_note)
//!   mount-sync     present while the last mount was made with --sync
//!   export.git     the shadow git repository (export)
//!   worktrees/     one folder per worktree (worktree)
//! ```
//!
//! `<key>` is [`key_of`] the canonical project path.
//!
//! **Scopes (planned, not built).** A worktree will be a second *scope* of
//! the same project: its own index and capture log (its own history) over
//! the project's one content-addressed `blobs/`, so a blob is stored once
//! whichever scope recorded it. The names are already split that way: the
//! per-scope files are built by [`StateDir::scoped`], the shared ones by
//! [`StateDir::shared`]. Adding a scope is then one method,
//! `StateDir::worktree(name)`, returning a `StateDir` whose scope folder
//! is `worktrees/<name>/` under the project's dir (with `project()` the
//! project scope, today's whole `StateDir`); gc then pins each worktree's
//! base turn (`crate::gc`).

use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::paths::Exclude;

/// The name of the index file in a scope.
pub const INDEX: &str = "index.db";
/// The name of the capture log in a scope.
pub const CAPTURE_LOG: &str = "capture.log";
/// The name of the blob directory (shared by the scopes of a project).
pub const BLOBS: &str = "blobs";
/// The file naming the project a state dir belongs to.
const PROJECT_MARKER: &str = "project";
/// The name of the daemon's log (rotated copies add `.1`, `.2`, ...).
pub const DAEMON_LOG: &str = "daemon.log";
/// The name of the export repository (shared by the scopes of a project).
pub const EXPORT_DIR: &str = "export.git";
/// The name of the folder of the project's worktrees.
pub const WORKTREES_DIR: &str = "worktrees";
/// The state of the pushes to checkpoint remotes (`crate::remote`).
const PUSH_STATE: &str = "push.json";
/// The lock that serializes the pushes of a project.
const PUSH_LOCK: &str = "push.lock";
/// The folder under the opfs home of the local copies of fetched
/// checkpoint remotes (`crate::remote`), one bare repository per remote.
const REMOTES_DIR: &str = "remotes";
/// The marker present while the project's last mount was made with
/// `--sync`.
const SYNC_MARKER: &str = "mount-sync";

/// The key of a canonical path: 16 hex digits of its BLAKE3.
pub fn key_of(canonical: &Path) -> String {
    blake3::hash(canonical.as_os_str().as_bytes()).to_hex()[..16].to_string()
}

/// The local copy (a bare repository) of the checkpoint remote `url`,
/// which `opfs remote list|checkout` fetch into: under `home`, keyed by
/// the URL.
pub fn remote_cache_dir(home: &Path, url: &str) -> PathBuf {
    home.join(REMOTES_DIR).join(format!(
        "{}.git",
        &blake3::hash(url.as_bytes()).to_hex()[..16]
    ))
}

/// The lock of [`remote_cache_dir`]: held by each `opfs remote` command
/// while it creates, fetches into and reads the local copy, so two
/// commands never create or update it at once.
pub fn remote_cache_lock(home: &Path, url: &str) -> PathBuf {
    remote_cache_dir(home, url).with_extension("lock")
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

    /// The existing state dir `dir`, its project read from its marker file.
    ///
    /// Errors: the marker cannot be read (`dir` is not a state dir).
    pub fn open_existing(dir: &Path) -> io::Result<StateDir> {
        let project = fs::read(dir.join(PROJECT_MARKER))?;
        Ok(StateDir {
            dir: dir.to_path_buf(),
            project: PathBuf::from(std::ffi::OsStr::from_bytes(&project)),
        })
    }

    /// Creates the folder and records which project it belongs to.
    ///
    /// Errors: the folder or its marker file cannot be created.
    pub fn create(&self) -> io::Result<()> {
        fs::create_dir_all(&self.dir)?;
        let marker = self.dir.join(PROJECT_MARKER);
        if !marker.exists() {
            fs::write(&marker, self.project.as_os_str().as_bytes())?;
        }
        Ok(())
    }

    /// True when the folder exists.
    pub fn exists(&self) -> bool {
        self.dir.join(PROJECT_MARKER).exists()
    }

    /// A file of this scope's own (its history): today the project's dir.
    fn scoped(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// A file every scope of the project shares.
    fn shared(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The SQLite index.
    pub fn index_path(&self) -> PathBuf {
        self.scoped(INDEX)
    }

    /// The capture log: pre-image records not yet in the index (see
    /// `store::log`).
    pub fn capture_log_path(&self) -> PathBuf {
        self.scoped(CAPTURE_LOG)
    }

    /// The folder of removed files' inodes whose hash is pending
    /// (`store::kept`, mode 0700). Per scope: a replay empties it.
    pub fn kept_dir(&self) -> PathBuf {
        self.scoped("kept")
    }

    /// The blob directory.
    pub fn blobs_dir(&self) -> PathBuf {
        self.shared(BLOBS)
    }

    /// The daemon's control socket.
    pub fn socket_path(&self) -> PathBuf {
        self.scoped("control.sock")
    }

    /// The daemon's log file.
    pub fn log_path(&self) -> PathBuf {
        self.scoped(DAEMON_LOG)
    }

    /// The lock file the daemon (or a direct CLI operation) holds.
    pub fn lock_path(&self) -> PathBuf {
        self.scoped("lock")
    }

    /// The lock that keeps gc's pins still (`crate::state::lock::PinsLock`): held by
    /// gc from reading the pins until its deletions commit, and by
    /// `worktree create` from checking its base turn until its metadata is
    /// written.
    pub fn pins_lock_path(&self) -> PathBuf {
        self.scoped("pins.lock")
    }

    /// The file naming the current mountpoint while mounted.
    pub fn mount_record(&self) -> PathBuf {
        self.scoped("mountpoint")
    }

    /// The notes of changes to what git runs or trusts in `.git`, one
    /// `TURN<TAB>PATH` line each (`crate::capture::git_note`).
    pub fn git_changes_path(&self) -> PathBuf {
        self.scoped("git-changes")
    }

    /// The default export repository (`crate::export::default_git_dir`).
    pub fn export_dir(&self) -> PathBuf {
        self.shared(EXPORT_DIR)
    }

    /// What the pushes to each checkpoint remote did last
    /// (`crate::remote`): the refs pushed, the last failure.
    pub fn push_state_path(&self) -> PathBuf {
        self.shared(PUSH_STATE)
    }

    /// The lock held by a push of this project (`crate::remote::push`).
    pub fn push_lock_path(&self) -> PathBuf {
        self.shared(PUSH_LOCK)
    }

    /// The folder holding one folder per worktree of the project.
    pub fn worktrees_dir(&self) -> PathBuf {
        self.shared(WORKTREES_DIR)
    }

    /// The marker that is present while the project's last mount was made
    /// with `--sync` (`crate::daemon::remember_sync`).
    pub fn sync_marker_path(&self) -> PathBuf {
        self.scoped(SYNC_MARKER)
    }

    /// The `[record] exclude` list in effect: the one the last mount was
    /// given (one pattern per line), which every later operation on the
    /// state dir (a rewind while unmounted too) applies until the next
    /// mount writes it again.
    pub fn record_exclude_path(&self) -> PathBuf {
        self.scoped("record-exclude")
    }

    /// The `[record] exclude` list in effect ([`Self::record_exclude_path`]);
    /// none when the file is missing (no mount has set one).
    ///
    /// Errors: the file cannot be read, or a pattern in it no longer
    /// parses (the file was changed by hand); both name the file.
    pub fn record_exclude(&self) -> io::Result<Exclude> {
        let path = self.record_exclude_path();
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Exclude::none()),
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("cannot read {}: {e}", path.display()),
                ))
            }
        };
        let lines: Vec<&str> = text.lines().collect();
        Exclude::new(&lines).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: {e} (delete the file, then mount again)",
                    path.display()
                ),
            )
        })
    }

    /// Makes `exclude` the list in effect (written atomically: temp file,
    /// then rename). After `Ok` it is durable against a process crash;
    /// after `Err` the previous list (or none) is still in effect.
    ///
    /// Errors: the file cannot be written.
    pub fn set_record_exclude(&self, exclude: &Exclude) -> io::Result<()> {
        let path = self.record_exclude_path();
        let tmp = self
            .dir
            .join(format!("record-exclude.tmp-{}", std::process::id()));
        let mut text = exclude.patterns().join("\n");
        if !text.is_empty() {
            text.push('\n');
        }
        fs::write(&tmp, text)?;
        fs::rename(&tmp, &path)
    }
}
