//! Worktrees (design §7): copy-on-write views of the project as it was
//! when some turn began, to try an idea in and merge back as one turn.
//!
//! A worktree named `NAME` of a project lives in the project's state dir:
//!
//! ```text
//! <project state dir>/worktrees/NAME/
//!   worktree.json   what it is (Meta): name, base turn, mountpoint
//!   upper/          the upper layer: every change made in the worktree
//!   work/           scratch for atomic copy-up (same filesystem as upper/)
//!   tree/           the default mountpoint
//!   drift           paths the lower layer served although they changed
//!                   behind the project's mount after the base (base::Base)
//!   export-repos    export repositories besides the default that hold its
//!                   branch (`opfs export --git-dir`), for discard
//! ```
//!
//! The lower layer is [`base::Base`]: the project at the base turn's start,
//! read from the project and its records, nothing copied. The upper layer
//! is a plain directory (whiteouts are empty files named `.wh.NAME`, an
//! opaque directory holds `.wh..wh..opq`: `opfs_fs::overlay::rules`), so the
//! worktree's own history is an ordinary journal over `upper/`, with its own
//! state dir (`StateDir::for_project(home, upper)`): turns and rewinds of a
//! worktree are the project commands pointed at the worktree's mountpoint;
//! its log, diff and show map that history through the base so they show
//! the worktree's view ([`history`]), and [`branch`] exports it as the
//! worktree's branch of the project's export.

pub mod base;
pub mod branch;
pub mod changes;
pub mod history;
pub mod life;
pub mod merge;
pub mod patch;
#[cfg(test)]
mod tests;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::store::StateDir;

/// What a worktree is, as stored in its `worktree.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// Its name (see [`check_name`]).
    pub name: String,
    /// The project turn whose start is its lower layer.
    pub base_turn: u64,
    /// When that turn began (or, for a base made from a project with no
    /// open turn, when the worktree was made), ns since the Unix epoch.
    pub base_ns: i64,
    /// When the worktree was made, ns since the Unix epoch.
    pub created_ns: i64,
    /// Where it is mounted (or will be, by `worktree mount`).
    pub mountpoint: PathBuf,
    /// Who made it: the user (the CLI) or the agent (the MCP tools). The
    /// agent's tools merge and discard only the agent's (`docs/mcp.md`).
    /// Absent in a `worktree.json` written before the field existed: the
    /// user's.
    #[serde(default)]
    pub created_by: Creator,
}

/// Who made a worktree ([`Meta::created_by`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Creator {
    /// The user, through the CLI (`opfs worktree create`); also any
    /// worktree whose metadata predates the field.
    #[default]
    User,
    /// The agent, through the MCP tools (`opfs mcp`, inside `opfs run`'s
    /// sandbox or outside).
    Agent,
}

impl Creator {
    /// `"user"` or `"agent"`, as stored and listed.
    pub fn as_str(self) -> &'static str {
        match self {
            Creator::User => "user",
            Creator::Agent => "agent",
        }
    }
}

/// Errors about worktrees as things (names, their folders).
#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    /// The name cannot name a worktree.
    #[error("{name:?} is not a valid worktree name: {why} (use letters, digits, '-', '_' and '.', at most 64, not starting with '.' or '-')")]
    BadName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A worktree of that name exists.
    #[error("a worktree named {0:?} already exists (pick another name, or `opfs worktree discard {0}` first)")]
    Exists(String),
    /// No worktree of that name exists.
    #[error("no worktree named {0:?} (see `opfs worktree list`)")]
    Missing(String),
    /// Reading or writing its folder failed.
    #[error("worktree {name:?}: cannot {what} {}: {source}", .path.display())]
    Io {
        /// The worktree.
        name: String,
        /// What was being done.
        what: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

/// Checks that `name` can name a worktree: 1 to 64 bytes of ASCII
/// letters, digits, `-`, `_` and `.`, not starting with `.` or `-` (so never
/// `.`, `..`, a path, or an option).
///
/// Errors: [`WorktreeError::BadName`] saying what is wrong.
pub fn check_name(name: &str) -> Result<(), WorktreeError> {
    let bad = |why| {
        Err(WorktreeError::BadName {
            name: name.to_string(),
            why,
        })
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.len() > 64 {
        return bad("it is longer than 64 bytes");
    }
    if name.contains('/') {
        return bad("it contains '/'");
    }
    if name.starts_with('.') || name.starts_with('-') {
        return bad("it starts with '.' or '-'");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return bad("it contains a character other than letters, digits, '-', '_' and '.'");
    }
    Ok(())
}

/// [`check_name`] for a worktree about to be made: also a valid git ref
/// name (its branch is `refs/opfs/worktrees/NAME` in the export and on a
/// checkpoint remote), so no `..`, and no name ending in `.` or `.lock`.
/// Worktrees made before this rule keep working under their names.
///
/// Errors: [`WorktreeError::BadName`], saying why.
pub fn check_new_name(name: &str) -> Result<(), WorktreeError> {
    check_name(name)?;
    let bad = |why| {
        Err(WorktreeError::BadName {
            name: name.to_string(),
            why,
        })
    };
    if name.contains("..") {
        return bad("it contains '..', which a git ref name cannot");
    }
    if name.ends_with('.') || name.ends_with(".lock") {
        return bad("it ends with '.' or '.lock', which a git ref name cannot");
    }
    Ok(())
}

/// One worktree's folder in its project's state dir.
#[derive(Debug, Clone)]
pub struct Worktree {
    /// Its name.
    pub name: String,
    /// `<project state dir>/worktrees/<name>`.
    pub dir: PathBuf,
    /// The default mountpoint ([`Worktree::default_mountpoint`]).
    short: PathBuf,
}

impl Worktree {
    /// The worktree `name` of the project whose state dir is `project`
    /// (whether or not it exists).
    pub fn of(project: &StateDir, name: &str) -> Worktree {
        Worktree {
            name: name.to_string(),
            dir: worktrees_dir(project).join(name),
            short: short_dir(project).join(name),
        }
    }

    /// The upper layer.
    pub fn upper(&self) -> PathBuf {
        self.dir.join("upper")
    }

    /// The copy-up scratch folder.
    pub fn work(&self) -> PathBuf {
        self.dir.join("work")
    }

    /// The default mountpoint: `<home>/wt/<project>-<key>/<name>`, where
    /// `<project>` is the project folder's name (letters, digits, `.`,
    /// `-`, `_` kept, others `_`, at most 24 bytes) and `<key>` the first
    /// 6 hex digits of the project's state dir key, so two projects of the
    /// same name do not meet. Short enough to type: `~/.local/share/opfs/
    /// wt/app-23ec0a/fix-a` against the state dir's 80-odd characters.
    pub fn default_mountpoint(&self) -> PathBuf {
        self.short.clone()
    }

    /// The drift list (see [`base::Base`]).
    pub fn drift_path(&self) -> PathBuf {
        self.dir.join("drift")
    }

    fn meta_path(&self) -> PathBuf {
        self.dir.join("worktree.json")
    }

    /// The export repositories other than the project's default one that
    /// hold the worktree's branch (`opfs export --git-dir DIR`), so
    /// `worktree discard` deletes it there too: absolute paths, each ended
    /// by a NUL byte.
    pub fn export_repos_path(&self) -> PathBuf {
        self.dir.join("export-repos")
    }

    /// The repositories [`Worktree::export_repos_path`] lists (none when
    /// the file is missing or unreadable).
    pub fn export_repos(&self) -> Vec<PathBuf> {
        use std::os::unix::ffi::OsStrExt;
        fs::read(self.export_repos_path())
            .unwrap_or_default()
            .split(|&b| b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| PathBuf::from(std::ffi::OsStr::from_bytes(p)))
            .collect()
    }

    /// Adds `git_dir` (absolute) to [`Worktree::export_repos_path`] unless
    /// it is listed (atomically: a temp file renamed over the list).
    ///
    /// Errors: [`WorktreeError::Io`] when the list cannot be written.
    pub fn add_export_repo(&self, git_dir: &Path) -> Result<(), WorktreeError> {
        use std::os::unix::ffi::OsStrExt;
        let mut repos = self.export_repos();
        if repos.iter().any(|r| r == git_dir) {
            return Ok(());
        }
        repos.push(git_dir.to_path_buf());
        let mut bytes = Vec::new();
        for r in &repos {
            bytes.extend_from_slice(r.as_os_str().as_bytes());
            bytes.push(0);
        }
        let tmp = self.dir.join("export-repos.tmp");
        fs::write(&tmp, bytes).map_err(self.io_err("write", tmp.clone()))?;
        fs::rename(&tmp, self.export_repos_path())
            .map_err(self.io_err("write", self.export_repos_path()))
    }

    /// The worktree's own state dir (its history): a project state dir
    /// whose project is the upper layer.
    pub fn state(&self, home: &Path) -> StateDir {
        StateDir::for_project(home, &self.upper())
    }

    /// True when the worktree exists (its `worktree.json` does).
    pub fn exists(&self) -> bool {
        self.meta_path().exists()
    }

    fn io_err(&self, what: &'static str, path: PathBuf) -> impl FnOnce(io::Error) -> WorktreeError {
        let name = self.name.clone();
        move |source| WorktreeError::Io {
            name,
            what,
            path,
            source,
        }
    }

    /// Reads `worktree.json`.
    ///
    /// Errors: [`WorktreeError::Missing`] when there is none;
    /// [`WorktreeError::Io`] when it cannot be read or parsed.
    pub fn meta(&self) -> Result<Meta, WorktreeError> {
        let path = self.meta_path();
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(WorktreeError::Missing(self.name.clone()))
            }
            Err(e) => return Err(self.io_err("read", path)(e)),
        };
        serde_json::from_slice(&bytes)
            .map_err(|e| self.io_err("parse", path)(io::Error::new(io::ErrorKind::InvalidData, e)))
    }

    /// Makes the worktree's folders and writes `meta` (atomically: a
    /// worktree either exists with its metadata or not at all).
    ///
    /// Errors: [`WorktreeError::Exists`] when it exists;
    /// [`WorktreeError::Io`] when a folder or file cannot be made (what
    /// was made is removed again).
    pub fn create(&self, meta: &Meta) -> Result<(), WorktreeError> {
        if self.exists() {
            return Err(WorktreeError::Exists(self.name.clone()));
        }
        let made = (|| {
            // The mountpoint is made by the mount (`--at` or the default).
            for d in [self.upper(), self.work()] {
                fs::create_dir_all(&d).map_err(self.io_err("create", d.clone()))?;
            }
            let tmp = self.dir.join("worktree.json.tmp");
            let bytes = serde_json::to_vec_pretty(meta)
                .map_err(|e| self.io_err("write", tmp.clone())(io::Error::other(e)))?;
            fs::write(&tmp, bytes).map_err(self.io_err("write", tmp.clone()))?;
            fs::rename(&tmp, self.meta_path()).map_err(self.io_err("write", self.meta_path()))
        })();
        if made.is_err() {
            let _ = fs::remove_dir_all(&self.dir);
        }
        made
    }

    /// Deletes the worktree's folder and its own state dir. The caller has
    /// unmounted it.
    ///
    /// Errors: [`WorktreeError::Io`] when something cannot be removed
    /// (what is left is named).
    pub fn remove(&self, home: &Path) -> Result<(), WorktreeError> {
        let state = self.state(home);
        // The default mountpoint (outside the worktree's folder): removed
        // when empty (it is, once unmounted), with its project folder
        // when that is empty too. Never a mountpoint given with `--at`.
        for d in [
            self.short.as_path(),
            self.short.parent().unwrap_or(&self.short),
        ] {
            match fs::remove_dir(d) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) => break,
                Err(e) => return Err(self.io_err("remove", d.to_path_buf())(e)),
            }
        }
        // The metadata first: a half-removed worktree is gone, not damaged.
        match fs::remove_file(self.meta_path()) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(self.io_err("remove", self.meta_path())(e)),
        }
        for d in [state.dir.clone(), self.dir.clone()] {
            match fs::remove_dir_all(&d) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(self.io_err("remove", d)(e)),
            }
        }
        Ok(())
    }
}

/// The worktree whose own history `state` is, and its project's state dir:
/// `state`'s project is `<project state dir>/worktrees/NAME/upper` of a
/// worktree that exists. `None` for any other state dir (a project's).
pub fn of_state(state: &StateDir) -> Option<(StateDir, Worktree)> {
    let upper = &state.project;
    if upper.file_name()? != "upper" {
        return None;
    }
    let dir = upper.parent()?;
    let name = dir.file_name()?.to_str()?;
    let wts = dir.parent()?;
    if wts.file_name()? != crate::store::layout::WORKTREES_DIR {
        return None;
    }
    let project = StateDir::open_existing(wts.parent()?).ok()?;
    let wt = Worktree::of(&project, name);
    (check_name(name).is_ok() && wt.exists() && wt.upper() == *upper).then_some((project, wt))
}

/// `<project state dir>/worktrees`.
pub fn worktrees_dir(project: &StateDir) -> PathBuf {
    project.worktrees_dir()
}

/// `<home>/wt/<project>-<key>`: the folder of the project's default
/// worktree mountpoints (see [`Worktree::default_mountpoint`]).
fn short_dir(project: &StateDir) -> PathBuf {
    let home = project
        .dir
        .parent()
        .and_then(Path::parent)
        .unwrap_or(&project.dir);
    let key = project
        .dir
        .file_name()
        .map(|k| k.to_string_lossy().chars().take(6).collect::<String>())
        .unwrap_or_default();
    let mut name: String = project
        .project
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .take(24)
        .collect();
    if name.is_empty() || name.starts_with('.') {
        name.insert(0, 'p');
    }
    home.join("wt").join(format!("{name}-{key}"))
}

/// Every worktree of the project, sorted by name. Folders without a
/// readable `worktree.json` are skipped.
pub fn list(project: &StateDir) -> Vec<(Worktree, Meta)> {
    let Ok(entries) = fs::read_dir(worktrees_dir(project)) else {
        return Vec::new();
    };
    let mut out: Vec<(Worktree, Meta)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| check_name(n).is_ok())
        .filter_map(|n| {
            let wt = Worktree::of(project, &n);
            let meta = wt.meta().ok()?;
            Some((wt, meta))
        })
        .collect();
    out.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    out
}

/// The oldest base turn of the project's worktrees, if it has any: what
/// retention must keep (`crate::gc`).
pub fn oldest_base(project: &StateDir) -> Option<u64> {
    list(project).iter().map(|(_, m)| m.base_turn).min()
}

#[cfg(test)]
mod name_tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["fix-a", "try_2", "a.b", "X"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            ".hidden",
            "-x",
            "sp ace",
            "é",
            &"x".repeat(65),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        let e = check_name("a/b").expect_err("bad").to_string();
        assert!(e.contains("contains '/'"), "{e}");
        // A new one is a git ref name too.
        for bad in ["a.", "a..b", "x.lock"] {
            assert!(check_name(bad).is_ok(), "{bad:?}");
            assert!(check_new_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_new_name("a.b").is_ok());
    }

    #[test]
    fn create_read_list_remove() {
        let home = tempfile::tempdir().expect("ok");
        let project = StateDir::for_project(home.path(), Path::new("/p"));
        project.create().expect("ok");
        let wt = Worktree::of(&project, "fix-a");
        let meta = Meta {
            name: "fix-a".into(),
            base_turn: 3,
            base_ns: 1,
            created_ns: 2,
            mountpoint: wt.default_mountpoint(),
            created_by: Creator::Agent,
        };
        wt.create(&meta).expect("ok");
        assert!(matches!(wt.create(&meta), Err(WorktreeError::Exists(_))));
        assert_eq!(wt.meta().expect("ok"), meta);
        assert!(wt.upper().is_dir() && wt.work().is_dir());
        assert_eq!(list(&project).len(), 1);
        assert_eq!(oldest_base(&project), Some(3));
        wt.remove(home.path()).expect("ok");
        assert!(!wt.dir.exists());
        assert!(matches!(wt.meta(), Err(WorktreeError::Missing(_))));
        assert!(list(&project).is_empty());
    }

    #[test]
    fn metadata_without_a_creator_is_the_users() {
        let old = r#"{"name":"a","base_turn":1,"base_ns":0,"created_ns":0,"mountpoint":"/m"}"#;
        let meta: Meta = serde_json::from_str(old).expect("parse");
        assert_eq!(meta.created_by, Creator::User);
        let agent: Meta = serde_json::from_str(
            r#"{"name":"a","base_turn":1,"base_ns":0,"created_ns":0,"mountpoint":"/m","created_by":"agent"}"#,
        )
        .expect("parse");
        assert_eq!(agent.created_by, Creator::Agent);
    }
}
