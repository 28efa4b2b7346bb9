//! Reading a checkpoint remote elsewhere: the projects it holds, the turns
//! of one, and a pushed turn materialised into a directory. Fetches go
//! into a local bare copy of the remote under the opfs home
//! (`remotes/<key of the URL>.git`), never into a project; only what is
//! asked for is fetched (the `project` descriptions to list, one
//! project's namespace to show or materialise it).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags, ResolveFlags};
use serde::Serialize;

use crate::state::lock::{FileLock, RemovableLock};
use crate::store::layout::{remote_cache_dir, remote_cache_lock};

use super::bucket::GetError;
use super::{git, GitEnv, NAMESPACE_ROOT};

/// Given to every fetch: git indexes a blob of 16 MiB or more as it
/// arrives, not whole in memory (its default threshold is 512 MiB), so a
/// remote holding a huge blob does not make a fetch hold it.
const BIG_FILE_THRESHOLD: &str = "core.bigFileThreshold=16m";

/// Why a remote could not be read or a turn materialised.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The remote could not be reached or read.
    #[error(
        "cannot read {remote}: {cause}; check the URL, the network and your git credentials (a credential helper or SSH agent)"
    )]
    Unreachable {
        /// The remote.
        remote: String,
        /// git's message.
        cause: String,
    },
    /// No project of that name was pushed there.
    #[error("{remote} holds no project {project}; `opfs remote list {}` lists those it holds (MACHINE/KEY)", crate::paths::shell_quote(remote))]
    NoSuchProject {
        /// The remote.
        remote: String,
        /// The project as given.
        project: String,
    },
    /// The project holds no such turn.
    #[error("{project} on {remote} holds no turn {turn}; `opfs remote list {} {project}` lists its turns", crate::paths::shell_quote(remote))]
    NoSuchTurn {
        /// The remote.
        remote: String,
        /// The project.
        project: String,
        /// The turn as given.
        turn: String,
    },
    /// The target directory exists and is not empty.
    #[error("{dir} is not empty: give a new or empty directory to write the turn into")]
    NotEmpty {
        /// The directory.
        dir: PathBuf,
    },
    /// The target directory is a symbolic link to nothing.
    #[error("{dir} is a symbolic link to {}, which does not exist: give a new or empty directory to write the turn into, or make {} an empty directory first", target.display(), target.display())]
    DanglingLink {
        /// The directory as given.
        dir: PathBuf,
        /// Where the link points.
        target: PathBuf,
    },
    /// The target exists and is not a directory.
    #[error(
        "{dir} exists and is not a directory: give a new or empty directory to write the turn into"
    )]
    NotADirectory {
        /// The path as given.
        dir: PathBuf,
    },
    /// The remote's URL cannot be used (`super::url_problem`).
    #[error("{0}")]
    BadUrl(String),
    /// A pushed tree holds a name that cannot be written safely.
    #[error("{path:?} in the pushed tree is not a name opfs writes (a `.`, `..`, `.git` or empty component, or a name that is also a directory of another entry); nothing was written")]
    BadName {
        /// The path as the tree has it.
        path: String,
    },
    /// A tree entry's name, or a symbolic link's target, is longer than
    /// the file system takes.
    #[error("{path:?} in turn {turn} of {project} cannot be written: {why}; nothing was written")]
    TooLong {
        /// The entry as the tree has it.
        path: String,
        /// The project.
        project: String,
        /// The turn as given.
        turn: String,
        /// Which length, and the limit.
        why: String,
    },
    /// The bucket could not be read.
    #[error("{source}")]
    Bucket {
        /// The bucket's error.
        #[source]
        source: Box<super::bucket::BucketError>,
    },
    /// The file system of the local copy of the remote is full.
    #[error(
        "cannot fetch {remote} into its local copy {}: no space left on the device ({cause}); free space on that file system, or remove the local copies of remotes in {} (caches: the next command fetches again), or set OPFS_HOME to a larger file system; nothing of this fetch was kept",
        dir.display(),
        dir.parent().unwrap_or(dir).display()
    )]
    NoSpace {
        /// The remote.
        remote: String,
        /// The local copy.
        dir: PathBuf,
        /// git's message, or the system's.
        cause: String,
    },
    /// `git` is not on `PATH`.
    #[error("cannot read {remote}: the git program is not on PATH; install git")]
    GitNotFound {
        /// The remote.
        remote: String,
    },
    /// A local git step failed.
    #[error("{what} in {git_dir} failed: {cause}")]
    Git {
        /// The step.
        what: String,
        /// The local copy of the remote.
        git_dir: PathBuf,
        /// git's message.
        cause: String,
    },
    /// A file could not be written or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// A project a remote holds.
#[derive(Debug, Clone, Serialize)]
pub struct RemoteProject {
    /// `MACHINE/KEY`, as `opfs remote` commands name it.
    pub name: String,
    /// The machine it was pushed from.
    pub machine: String,
    /// The project key (16 hex digits).
    pub key: String,
    /// The project's path on that machine (from `<ns>/project`), if known.
    pub path: Option<String>,
    /// Turns pushed (their numbers, ascending).
    pub turns: Vec<u64>,
    /// Worktree branches pushed.
    pub worktrees: Vec<String>,
}

/// A pushed turn.
#[derive(Debug, Clone, Serialize)]
pub struct RemoteTurn {
    /// Its number.
    pub turn: u64,
    /// Its commit id.
    pub commit: String,
    /// When it ended, seconds since the Unix epoch.
    pub time: i64,
    /// The commit's subject (`Turn N: label`).
    pub subject: String,
}

/// What [`checkout`] wrote.
#[derive(Debug, Clone, Serialize)]
pub struct CheckoutReport {
    /// The commit materialised.
    pub commit: String,
    /// Regular files written.
    pub files: u64,
    /// Symlinks written.
    pub symlinks: u64,
    /// Bytes of the files written.
    pub bytes: u64,
    /// Pointer files whose bytes were read from the bucket.
    pub resolved: u64,
    /// Files written as their pointer (8 MiB or more: their bytes were not
    /// available), project-relative.
    pub pointers: Vec<String>,
    /// The bucket read, if any (`s3://BUCKET[/PREFIX]`).
    pub bucket: Option<String>,
    /// Of [`CheckoutReport::pointers`], those whose object the bucket does
    /// not hold: the path and the object's key.
    pub missing_objects: Vec<MissingObject>,
    /// Of [`CheckoutReport::pointers`], those whose object in the bucket
    /// is not their bytes (another size or BLAKE3): the path, the key and
    /// why.
    pub bad_objects: Vec<BadObject>,
    /// Tree entries not written: a gitlink (mode 160000, a submodule's
    /// commit) or an entry of a mode git does not know (140000 and the
    /// like, which git lists as 160000). A push by opfs holds none.
    pub skipped: Vec<SkippedEntry>,
}

/// A tree entry [`checkout`] did not write.
#[derive(Debug, Clone, Serialize)]
pub struct SkippedEntry {
    /// The entry, project-relative.
    pub path: String,
    /// Its mode as git lists it (`160000`).
    pub mode: String,
}

/// A pointer file whose object in the bucket is not the bytes it names.
#[derive(Debug, Clone, Serialize)]
pub struct BadObject {
    /// The file, project-relative.
    pub path: String,
    /// The object's key in the bucket.
    pub key: String,
    /// What was wrong.
    pub cause: String,
}

/// A pointer file whose object the bucket does not hold.
#[derive(Debug, Clone, Serialize)]
pub struct MissingObject {
    /// The file, project-relative.
    pub path: String,
    /// The object's key in the bucket (`<prefix>/blake3/<2 hex>/<hash>`).
    pub key: String,
}

/// The local copy of `url` (created empty the first time), and its lock,
/// held until the caller is done with the copy: two commands on one
/// remote (two `opfs remote list` on a fresh home) never create it or
/// fetch into it at once (git's own locks would fail one of them).
///
/// The third value is true when this call created the copy: a command
/// whose fetch then fails removes it ([`failed`]), so a mistyped URL
/// leaves nothing behind.
fn cache(
    home: &Path,
    url: &str,
    git: &GitEnv,
) -> Result<(PathBuf, RemovableLock, bool), RemoteError> {
    if let Some(problem) = super::url_problem(url) {
        return Err(RemoteError::BadUrl(problem));
    }
    // The URL as git will fetch from it: an `insteadOf` rule of the
    // user's configuration may turn it into a `<transport>::` form
    // (`pushInsteadOf` rules do not apply to a fetch).
    if let Some(problem) = git::Rewrites::read(git, None).problem(url, false) {
        return Err(RemoteError::BadUrl(problem));
    }
    let dir = remote_cache_dir(home, url);
    let lock_path = remote_cache_lock(home, url);
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        let (url, dir) = (url.to_string(), dir.clone());
        move |source: io::Error| {
            no_space(
                url,
                dir,
                source.to_string(),
                RemoteError::Io { path, source },
            )
        }
    };
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent).map_err(io_err(parent))?;
    }
    let lock = FileLock::exclusive_removable(&lock_path).map_err(io_err(&lock_path))?;
    let created = !dir.join("HEAD").exists();
    if !created {
        leftovers(&dir);
    }
    if created {
        let r = std::fs::create_dir_all(&dir)
            .map_err(io_err(&dir))
            .and_then(|()| {
                let mut cmd = git.command(None);
                cmd.args(["init", "-q", "--bare"]).arg(&dir);
                run(cmd, git, &dir, url, "creating the local copy")
            });
        if let Err(e) = r {
            failed(&dir, true, lock);
            return Err(e);
        }
    }
    Ok((dir, lock, created))
}

/// `other`, or [`RemoteError::NoSpace`] when `cause` says the file
/// system is full.
fn no_space(url: String, dir: PathBuf, cause: String, other: RemoteError) -> RemoteError {
    if is_no_space(&cause) {
        RemoteError::NoSpace {
            remote: url,
            dir,
            cause,
        }
    } else {
        other
    }
}

/// True when a message (git's, or the system's) says the disk is full.
fn is_no_space(message: &str) -> bool {
    message.contains("No space left on device") || message.contains("Disk quota exceeded")
}

/// After a failed command on the local copy `dir` (its `lock` held): the
/// copy and its lock file removed when the command created it (a
/// mistyped URL leaves nothing), else what a failed fetch leaves in it
/// (`objects/pack/tmp_pack_*`, `tmp_idx_*`, `tmp_rev_*`: no other fetch
/// can be running, the lock is held).
fn failed(dir: &Path, created: bool, lock: RemovableLock) {
    if created {
        let _ = std::fs::remove_dir_all(dir);
        // A command waiting on the lock takes a new one and creates the
        // copy again (`FileLock::exclusive_removable`).
        let _ = lock.remove();
        return;
    }
    leftovers(dir);
}

/// Removes the temporary packs a failed or killed fetch left in the
/// local copy `dir` (its lock held: no fetch is running).
fn leftovers(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir.join("objects/pack")) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if ["tmp_pack_", "tmp_idx_", "tmp_rev_"]
            .iter()
            .any(|p| name.starts_with(p))
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

fn run(
    cmd: std::process::Command,
    git: &GitEnv,
    git_dir: &Path,
    url: &str,
    what: &str,
) -> Result<Vec<u8>, RemoteError> {
    let out = git::output(cmd, git).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => RemoteError::GitNotFound {
            remote: url.to_string(),
        },
        _ => RemoteError::Io {
            path: git_dir.to_path_buf(),
            source: e,
        },
    })?;
    if !out.status.success() {
        let cause = git::stderr_line(&out);
        return Err(no_space(
            url.to_string(),
            git_dir.to_path_buf(),
            cause.clone(),
            RemoteError::Git {
                what: what.to_string(),
                git_dir: git_dir.to_path_buf(),
                cause,
            },
        ));
    }
    Ok(out.stdout)
}

/// Runs a step that talks to the remote: a failure is
/// [`RemoteError::Unreachable`].
fn run_remote(
    cmd: std::process::Command,
    git: &GitEnv,
    git_dir: &Path,
    url: &str,
) -> Result<Vec<u8>, RemoteError> {
    run(cmd, git, git_dir, url, "").map_err(|e| match e {
        RemoteError::Git { cause, .. } => RemoteError::Unreachable {
            remote: url.to_string(),
            cause,
        },
        e => e,
    })
}

/// Every project `url` holds (one per machine and project key), with its
/// turns and worktree branches; sorted by name. Fetches only the
/// `project` descriptions.
///
/// Errors: the remote cannot be read ([`RemoteError::Unreachable`]), the
/// local copy cannot be written.
pub fn list(home: &Path, url: &str, git: &GitEnv) -> Result<Vec<RemoteProject>, RemoteError> {
    let (dir, lock, created) = cache(home, url, git)?;
    let r = list_in(&dir, url, git);
    if r.is_err() {
        failed(&dir, created, lock);
    }
    r
}

/// [`list`] with the local copy `dir`.
fn list_in(dir: &Path, url: &str, git: &GitEnv) -> Result<Vec<RemoteProject>, RemoteError> {
    let dir = dir.to_path_buf();
    let mut cmd = git.command(Some(&dir));
    cmd.args(["ls-remote", url, &format!("{NAMESPACE_ROOT}*")]);
    let refs = run_remote(cmd, git, &dir, url)?;
    let mut projects: BTreeMap<String, RemoteProject> = BTreeMap::new();
    for line in String::from_utf8_lossy(&refs).lines() {
        let Some((_, r)) = line.split_once('\t') else {
            continue;
        };
        let Some(rest) = r.strip_prefix(NAMESPACE_ROOT) else {
            continue;
        };
        let mut parts = rest.splitn(3, '/');
        let (Some(machine), Some(key), Some(tail)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let name = format!("{machine}/{key}");
        let p = projects
            .entry(name.clone())
            .or_insert_with(|| RemoteProject {
                name,
                machine: machine.to_string(),
                key: key.to_string(),
                path: None,
                turns: Vec::new(),
                worktrees: Vec::new(),
            });
        // Only the canonical spelling of a number (`7`, not `007`): each
        // turn is listed once.
        if let Some(n) = tail
            .strip_prefix("turns/")
            .and_then(|n| n.parse::<u64>().ok().filter(|v| v.to_string() == n))
        {
            p.turns.push(n);
        } else if let Some(w) = tail.strip_prefix("worktrees/") {
            p.worktrees.push(w.to_string());
        }
    }
    if projects.is_empty() {
        return Ok(Vec::new());
    }
    let mut cmd = git.command(Some(&dir));
    cmd.args(["-c", BIG_FILE_THRESHOLD])
        .args(["fetch", "-q", "--no-tags", url])
        .arg(format!(
            "+{NAMESPACE_ROOT}*/project:{NAMESPACE_ROOT}*/project"
        ));
    run_remote(cmd, git, &dir, url)?;
    // Every description in one git run (one per project took minutes for
    // thousands of projects).
    let names: Vec<String> = projects.keys().cloned().collect();
    let messages = commit_messages(
        &dir,
        git,
        url,
        names
            .iter()
            .map(|n| format!("{NAMESPACE_ROOT}{n}/project^{{commit}}")),
    )?;
    for (name, msg) in names.iter().zip(messages) {
        let Some(p) = projects.get_mut(name) else {
            continue;
        };
        p.turns.sort_unstable();
        p.path = msg.and_then(|(msg, _)| {
            String::from_utf8_lossy(&msg)
                .lines()
                .find_map(|l| l.strip_prefix("opfs-project: "))
                // Written by whoever pushed: no control character (a
                // terminal escape) reaches the output.
                .map(printable_text)
        });
    }
    Ok(projects.into_values().collect())
}

/// The most of each commit object [`commit_messages`] reads: a project's
/// description (`opfs-project: PATH`, its path twice, each at most 4 KiB)
/// and a turn's subject fit with room to spare; the rest of a bigger
/// object (a remote can hold any message) is skipped as it comes, never
/// kept.
const MESSAGE_PREFIX: u64 = 16 * 1024;

/// The most characters of a turn's subject [`turns`] gives; a longer one
/// ends with `…`.
pub const SUBJECT_MAX: usize = 200;

/// The start of a commit's message and whether the commit went on past
/// what was read ([`commit_messages`]).
type MessageStart = (Vec<u8>, bool);

/// The start of the message of each commit (or tag) `revs` names (in
/// order) in `git_dir`, read in one `git cat-file --batch`: what of it
/// lies in the object's first [`MESSAGE_PREFIX`] bytes, and whether the
/// object went on past them; `None` for a name that names no commit.
/// Each object is read by its size, so no byte of a message (a NUL, a
/// line that looks like a header) can be taken for the next one.
fn commit_messages(
    git_dir: &Path,
    git: &GitEnv,
    url: &str,
    revs: impl Iterator<Item = String>,
) -> Result<Vec<Option<MessageStart>>, RemoteError> {
    let revs: Vec<String> = revs.collect();
    let n = revs.len();
    let io_err = |source| RemoteError::Io {
        path: git_dir.to_path_buf(),
        source,
    };
    let mut reader = BlobReader::start(git_dir, git, revs).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => RemoteError::GitNotFound {
            remote: url.to_string(),
        },
        _ => io_err(e),
    })?;
    let mut messages = Vec::with_capacity(n);
    for _ in 0..n {
        let mut header = Vec::new();
        // `<id> commit <size>`, or `<name> missing` (or `ambiguous`): the
        // names are ours, so the line is short.
        (&mut reader.out)
            .take(4096)
            .read_until(b'\n', &mut header)
            .map_err(io_err)?;
        if header.last() != Some(&b'\n') {
            break;
        }
        let header = String::from_utf8_lossy(&header);
        let mut f = header.trim_end().split(' ');
        let (Some(_), Some(kind), Some(size)) = (f.next(), f.next(), f.next()) else {
            messages.push(None);
            continue;
        };
        let Ok(size) = size.parse::<u64>() else {
            break;
        };
        let mut object = Vec::new();
        (&mut reader.out)
            .take(size.min(MESSAGE_PREFIX))
            .read_to_end(&mut object)
            .map_err(io_err)?;
        let kept = object.len() as u64;
        reader
            .copy_body(size - kept.min(size), &mut io::sink())
            .map_err(io_err)?;
        let cut = kept < size;
        messages.push(matches!(kind, "commit" | "tag").then(|| {
            let body = object
                .windows(2)
                .position(|w| w == b"\n\n")
                .map_or_else(Vec::new, |i| object[i + 2..].to_vec());
            (body, cut)
        }));
    }
    messages.resize(n, None);
    Ok(messages)
}

/// `text` with every control character (a terminal escape written by
/// whoever pushed) replaced by U+FFFD.
fn printable_text(text: &str) -> String {
    text.chars()
        .map(|c| {
            if crate::paths::is_unprintable(c) {
                '\u{fffd}'
            } else {
                c
            }
        })
        .collect()
}

/// A turn's subject from the start of its message ([`commit_messages`]):
/// its first line, at most [`SUBJECT_MAX`] characters (a longer one, or
/// one cut at the end of what was read, ends with `…`), printable.
fn subject_of(message: &[u8], cut: bool) -> String {
    let line = message.split(|b| *b == b'\n').next().unwrap_or_default();
    let whole = line.len() < message.len() || !cut;
    let line = String::from_utf8_lossy(line);
    let mut subject: String = line.chars().take(SUBJECT_MAX).collect();
    if !whole || subject.len() < line.len() {
        subject.push('…');
    }
    printable_text(&subject)
}

/// Fetches `project`'s namespace (`MACHINE/KEY`) of `url` into the local
/// copy; the copy's directory, the namespace and the copy's lock (held
/// while the caller reads it).
fn fetch_project(
    home: &Path,
    url: &str,
    project: &str,
    git: &GitEnv,
) -> Result<(PathBuf, String, RemovableLock), RemoteError> {
    let valid = project.split('/').count() == 2
        && project
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '/');
    if !valid {
        return Err(RemoteError::NoSuchProject {
            remote: url.to_string(),
            project: project.to_string(),
        });
    }
    let (dir, lock, created) = cache(home, url, git)?;
    let ns = format!("{NAMESPACE_ROOT}{project}");
    match fetch_namespace(&dir, url, project, &ns, git) {
        Ok(()) => Ok((dir, ns, lock)),
        Err(e) => {
            failed(&dir, created, lock);
            Err(e)
        }
    }
}

/// Fetches the namespace `ns` of `url` into the local copy `dir`;
/// [`RemoteError::NoSuchProject`] when it holds no ref.
fn fetch_namespace(
    dir: &Path,
    url: &str,
    project: &str,
    ns: &str,
    git: &GitEnv,
) -> Result<(), RemoteError> {
    let dir = dir.to_path_buf();
    let mut cmd = git.command(Some(&dir));
    cmd.args(["-c", BIG_FILE_THRESHOLD])
        .args(["fetch", "-q", "--prune", "--no-tags", url])
        .arg(format!("+{ns}/*:{ns}/*"));
    run_remote(cmd, git, &dir, url)?;
    let mut cmd = git.command(Some(&dir));
    cmd.args(["for-each-ref", "--count=1", "--format=%(refname)"])
        .arg(format!("{ns}/"));
    if run(cmd, git, &dir, url, "listing the project's refs")?.is_empty() {
        return Err(RemoteError::NoSuchProject {
            remote: url.to_string(),
            project: project.to_string(),
        });
    }
    Ok(())
}

/// The turns of `project` (`MACHINE/KEY`) on `url`, oldest first.
///
/// Errors: the remote cannot be read, holds no such project.
pub fn turns(
    home: &Path,
    url: &str,
    project: &str,
    git: &GitEnv,
) -> Result<Vec<RemoteTurn>, RemoteError> {
    let (dir, ns, _lock) = fetch_project(home, url, project, git)?;
    let mut cmd = git.command(Some(&dir));
    cmd.args([
        "for-each-ref",
        "--format=%(refname)%00%(objectname)%00%(committerdate:unix)",
    ])
    .arg(format!("{ns}/turns/"));
    let out = run(cmd, git, &dir, url, "listing the turns")?;
    let mut list: Vec<RemoteTurn> = String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|l| {
            let mut f = l.split('\0');
            let turn = turn_of(&ns, f.next()?)?;
            Some(RemoteTurn {
                turn,
                commit: f.next()?.to_string(),
                time: f.next()?.parse().unwrap_or(0),
                subject: String::new(),
            })
        })
        .collect();
    // The subjects from the start of each message only: a remote can hold
    // a message of any size (`%(subject)` read each whole).
    let messages = commit_messages(&dir, git, url, list.iter().map(|t| t.commit.clone()))?;
    for (t, msg) in list.iter_mut().zip(messages) {
        if let Some((msg, cut)) = msg {
            t.subject = subject_of(&msg, cut);
        }
    }
    list.sort_by_key(|t| t.turn);
    Ok(list)
}

/// The turn `refname` holds in namespace `ns`: `<ns>/turns/<N>` exactly,
/// N in its canonical spelling (`7`, not `007`, as [`list`] takes it).
/// Any other ref (`<ns>/turns/zzz/5`, written by whoever pushed) is none.
fn turn_of(ns: &str, refname: &str) -> Option<u64> {
    let n = refname.strip_prefix(ns)?.strip_prefix("/turns/")?;
    n.parse::<u64>().ok().filter(|t| t.to_string() == n)
}

/// Writes the project `project` (`MACHINE/KEY`) of `url` as it was at the
/// end of `turn` (a number, `head` or `baseline`) into `dir` (created; an
/// existing one must be empty): files with their 0644/0755 mode,
/// symlinks. With `bucket`, a pointer file's bytes are streamed from it
/// (stopped as soon as more than the pointer's size arrive, hashed as they
/// come, put in place only when size and BLAKE3 match); a pointer file
/// whose object is missing or is not its bytes is written as the pointer
/// and listed in the report ([`CheckoutReport::missing_objects`],
/// [`CheckoutReport::bad_objects`]), and the rest of the tree is written.
/// Memory stays bounded whatever a blob's or an object's size: both are
/// streamed to their file.
///
/// The tree is written into a directory of its own ([`Stage`]) put in
/// place at the end: after `Err`, `dir` is as it was (absent, or empty),
/// so the same command can be run again; the remote and every project
/// are untouched. A checkout killed midway leaves that directory,
/// `.NAME.opfs-checkout-PID` beside `dir` (or `.opfs-checkout-PID` inside
/// an existing empty `dir`); the next checkout into the same parent (or
/// that `dir`) removes it ([`sweep_stale`]).
///
/// Errors: the remote cannot be read, holds no such project or turn, `dir`
/// is not empty, not a directory, a symbolic link to nothing
/// ([`RemoteError::DanglingLink`]) or cannot be written, a name in the
/// tree is unsafe, a name or a symbolic link's target is longer than the
/// file system takes ([`RemoteError::TooLong`], naming the entry and the
/// turn).
pub fn checkout(
    home: &Path,
    url: &str,
    project: &str,
    turn: &str,
    dir: &Path,
    git: &GitEnv,
    bucket: Option<&super::bucket::BucketConfig>,
) -> Result<CheckoutReport, RemoteError> {
    let io_at = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RemoteError::Io { path, source }
    };
    if let Ok(m) = std::fs::symlink_metadata(dir) {
        match std::fs::metadata(dir) {
            Err(e) if m.file_type().is_symlink() && e.kind() == io::ErrorKind::NotFound => {
                return Err(RemoteError::DanglingLink {
                    dir: dir.to_path_buf(),
                    target: std::fs::read_link(dir).unwrap_or_default(),
                });
            }
            Ok(m) if !m.is_dir() => {
                return Err(RemoteError::NotADirectory {
                    dir: dir.to_path_buf(),
                });
            }
            _ => {}
        }
    }
    // What killed checkouts left: inside DIR (which would not be empty
    // for it), and beside it.
    if std::fs::metadata(dir).is_ok_and(|m| m.is_dir()) {
        sweep_stale(dir);
    }
    sweep_stale(&dir_parent(dir));
    match std::fs::read_dir(dir) {
        Ok(mut d) => {
            if d.next().is_some() {
                return Err(RemoteError::NotEmpty {
                    dir: dir.to_path_buf(),
                });
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_at(dir)(e)),
    }
    let (cache_dir, ns, _lock) = fetch_project(home, url, project, git)?;
    let rev = match turn {
        "head" => format!("{ns}/head"),
        "baseline" => format!("{ns}/baseline"),
        n if n.parse::<u64>().is_ok() => format!("{ns}/turns/{n}"),
        w if w
            .strip_prefix("worktrees/")
            .is_some_and(|n| crate::worktree::check_name(n).is_ok()) =>
        {
            format!("{ns}/{w}")
        }
        id if is_commit_id(id) && contains(&cache_dir, git, &ns, id) => id.to_string(),
        _ => String::new(),
    };
    let mut cmd = git.command(Some(&cache_dir));
    cmd.args(["rev-parse", "--verify", "-q"])
        .arg(format!("{rev}^{{commit}}"));
    let commit = match run(cmd, git, &cache_dir, url, "finding the turn") {
        Ok(id) if !rev.is_empty() => String::from_utf8_lossy(&id).trim().to_string(),
        _ => {
            return Err(RemoteError::NoSuchTurn {
                remote: url.to_string(),
                project: project.to_string(),
                turn: turn.to_string(),
            })
        }
    };
    let mut cmd = git.command(Some(&cache_dir));
    cmd.args(["ls-tree", "-r", "-z", "--full-tree", &commit]);
    let listing = run(cmd, git, &cache_dir, url, "listing the turn's tree")?;
    // mode, object id, path
    let mut entries: Vec<(String, String, Vec<u8>)> = Vec::new();
    let mut skipped = Vec::new();
    for rec in listing.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        let Some(tab) = rec.iter().position(|b| *b == b'\t') else {
            continue;
        };
        let head = String::from_utf8_lossy(&rec[..tab]).to_string();
        let mut f = head.split(' ');
        let (Some(mode), Some(_kind), Some(id)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let path = rec[tab + 1..].to_vec();
        // Never `.`, `..`, empty, or `.git` in any case (a `.git` written
        // into DIR would be a repository whose config runs commands when
        // git is used there; the project's own `.git` is never pushed).
        if path
            .split(|b| *b == b'/')
            .any(|c| c.is_empty() || c == b"." || c == b".." || c.eq_ignore_ascii_case(b".git"))
        {
            return Err(RemoteError::BadName {
                path: String::from_utf8_lossy(&path).into_owned(),
            });
        }
        // A gitlink (a submodule's commit), or an entry of a mode git does
        // not know (140000 and the like, which git reads as 160000): no
        // bytes to write. Reported, never silently dropped.
        if !matches!(mode, "100644" | "100755" | "120000") {
            skipped.push(SkippedEntry {
                path: crate::paths::display(&path),
                mode: mode.to_string(),
            });
            continue;
        }
        entries.push((mode.to_string(), id.to_string(), path));
    }
    // Each entry is a file or a symlink: none may be written twice or be
    // a directory of another (a symlink `d` and a file `d/x` would write x
    // wherever `d` points). Checked for the whole tree before anything is
    // written.
    let mut names = std::collections::HashSet::new();
    let twice = entries.iter().find(|e| !names.insert(e.2.as_slice()));
    let below = || {
        entries.iter().find(|e| {
            e.2.iter()
                .enumerate()
                .any(|(i, b)| *b == b'/' && names.contains(&e.2[..i]))
        })
    };
    if let Some(e) = twice.or_else(below) {
        return Err(RemoteError::BadName {
            path: String::from_utf8_lossy(&e.2).into_owned(),
        });
    }
    let stage = Stage::new(dir).map_err(|(path, source)| RemoteError::Io { path, source })?;
    let root = stage.dir.clone();
    let mut report = CheckoutReport {
        commit,
        files: 0,
        symlinks: 0,
        bytes: 0,
        resolved: 0,
        pointers: Vec::new(),
        bucket: bucket.map(|b| b.url.clone()),
        missing_objects: Vec::new(),
        bad_objects: Vec::new(),
        skipped,
    };
    let bucket = bucket
        .map(super::bucket::Bucket::open)
        .transpose()
        .map_err(|source| RemoteError::Bucket {
            source: Box::new(source),
        })?;
    let mut blobs = BlobReader::start(
        &cache_dir,
        git,
        entries.iter().map(|e| e.1.clone()).collect(),
    )
    .map_err(io_at(&cache_dir))?;
    let tree = Beneath::open(&root).map_err(io_at(&root))?;
    for (mode, _, rel) in &entries {
        let size = blobs.next_header().map_err(io_at(&cache_dir))?;
        let path = root.join(OsStr::from_bytes(rel));
        // Named by the entry and the turn, not by the staging directory.
        let too_long = |why: String| RemoteError::TooLong {
            path: crate::paths::display(rel),
            project: project.to_string(),
            turn: turn.to_string(),
            why,
        };
        let written = |e: io::Error| {
            if e.raw_os_error() == Some(libc::ENAMETOOLONG) {
                let n = rel.split(|b| *b == b'/').map(<[u8]>::len).max();
                too_long(format!(
                    "its path has a name of {} bytes, more than this file system takes (255 bytes on most)",
                    n.unwrap_or_default()
                ))
            } else {
                written_error(rel, &path, e)
            }
        };
        let (parent, name) = tree.parent_of(rel).map_err(written)?;
        if mode == "120000" {
            if size > SYMLINK_MAX {
                return Err(too_long(format!(
                    "it is a symbolic link whose target is {size} bytes long, more than the {SYMLINK_MAX} bytes a symbolic link may hold"
                )));
            }
            let target = blobs.body(size).map_err(io_at(&cache_dir))?;
            rustix::fs::symlinkat(OsStr::from_bytes(&target), &parent, name)
                .map_err(|e| written(e.into()))?;
            report.symlinks += 1;
            continue;
        }
        let perm = if mode == "100755" { 0o755 } else { 0o644 };
        if size > POINTER_MAX {
            // Streamed from git to the file: memory stays bounded.
            let mut file = create_new(&parent, name, perm).map_err(written)?;
            blobs
                .copy_body(size, &mut file)
                .map_err(|e| RemoteError::Io {
                    path: if e.kind() == io::ErrorKind::UnexpectedEof {
                        cache_dir.clone()
                    } else {
                        path.clone()
                    },
                    source: e,
                })?;
            report.files += 1;
            report.bytes += size;
            continue;
        }
        let bytes = blobs.body(size).map_err(io_at(&cache_dir))?;
        if let Some((hash, psize)) = parse_pointer(&bytes) {
            if let Some(b) = &bucket {
                let shown = crate::paths::display(rel);
                match object_into(b, &hash, psize, &parent, name, perm) {
                    Ok(true) => {
                        report.resolved += 1;
                        report.files += 1;
                        report.bytes += psize;
                        continue;
                    }
                    Ok(false) => report.missing_objects.push(MissingObject {
                        path: shown.clone(),
                        key: b.key(&hash),
                    }),
                    Err(GetError::Bucket(super::bucket::BucketError::Corrupt { .. })) => {
                        report.bad_objects.push(BadObject {
                            path: shown.clone(),
                            key: b.key(&hash),
                            cause: format!(
                                "it holds another size or BLAKE3 than the pointer's ({psize} bytes, BLAKE3 {hash})"
                            ),
                        })
                    }
                    Err(GetError::Bucket(source)) => {
                        return Err(RemoteError::Bucket {
                            source: Box::new(source),
                        })
                    }
                    Err(GetError::Write(e)) => return Err(io_at(&path)(e)),
                }
            }
            report.pointers.push(crate::paths::display(rel));
        }
        let mut file = create_new(&parent, name, perm).map_err(written)?;
        file.write_all(&bytes).map_err(io_at(&path))?;
        report.files += 1;
        report.bytes += bytes.len() as u64;
    }
    drop(blobs);
    stage.finish().map_err(|(path, source)| {
        if matches!(source.raw_os_error(), Some(libc::ENOTEMPTY | libc::EEXIST)) {
            RemoteError::NotEmpty { dir: path }
        } else {
            RemoteError::Io { path, source }
        }
    })?;
    Ok(report)
}

/// The largest symlink target written (`PATH_MAX` less its NUL).
const SYMLINK_MAX: u64 = 4095;

/// Git's largest pointer file: a blob above this is never one.
const POINTER_MAX: u64 = 200;

/// How every entry of a checkout is reached from the staging directory:
/// never through a symbolic link, never outside it, whatever the file
/// system's name folding (a case-insensitive directory could otherwise
/// take `d/x` through a symlink `D` the checkout wrote).
const BENEATH: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_SYMLINKS);

/// The staging directory of a checkout, open: every entry is created
/// relative to it, each directory component made with `mkdirat` then
/// opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, so no
/// entry is written through a symbolic link or outside it, whatever the
/// names the tree holds and however the file system compares them.
struct Beneath {
    root: OwnedFd,
}

impl Beneath {
    fn open(dir: &Path) -> io::Result<Beneath> {
        let root = rustix::fs::open(
            dir,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        )?;
        Ok(Beneath { root })
    }

    /// The directory that holds `rel` (its components created as needed,
    /// mode 0755 less the umask), open, and `rel`'s last component.
    ///
    /// Errors: `ELOOP` when a component is a symbolic link (or resolves
    /// to one), `EXDEV` when it would leave the directory, `ENOTDIR` when
    /// it is a file; those of `mkdirat`.
    fn parent_of<'r>(&self, rel: &'r [u8]) -> io::Result<(OwnedFd, &'r OsStr)> {
        let (dirs, name) = match rel.iter().rposition(|b| *b == b'/') {
            Some(i) => (&rel[..i], &rel[i + 1..]),
            None => (&b""[..], rel),
        };
        let mut fd = rustix::fs::openat2(
            &self.root,
            ".",
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
            BENEATH,
        )?;
        for comp in dirs.split(|b| *b == b'/').filter(|c| !c.is_empty()) {
            let comp = OsStr::from_bytes(comp);
            match rustix::fs::mkdirat(&fd, comp, Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
            fd = rustix::fs::openat2(
                &fd,
                comp,
                OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
                Mode::empty(),
                BENEATH,
            )?;
        }
        Ok((fd, OsStr::from_bytes(name)))
    }
}

/// The error of writing the entry `rel` (at `path`): a symbolic link, a
/// file or an escape on its way (`ELOOP`, `ENOTDIR`, `EXDEV`: only a name
/// that aliases another entry's, in a case-insensitive or otherwise
/// folding directory, gets there, as the tree was checked) is
/// [`RemoteError::BadName`].
fn written_error(rel: &[u8], path: &Path, e: io::Error) -> RemoteError {
    match e.raw_os_error() {
        Some(libc::ELOOP | libc::EXDEV | libc::ENOTDIR) => RemoteError::BadName {
            path: String::from_utf8_lossy(rel).into_owned(),
        },
        _ => RemoteError::Io {
            path: path.to_path_buf(),
            source: e,
        },
    }
}

/// Creates `name` in the directory `dir` (`O_EXCL`, never through a
/// symbolic link: [`BENEATH`]) with mode `perm` whatever the umask.
fn create_new(dir: &OwnedFd, name: &OsStr, perm: u32) -> io::Result<std::fs::File> {
    let fd = rustix::fs::openat2(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::from_raw_mode(perm),
        BENEATH,
    )?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(perm))?;
    Ok(std::fs::File::from(fd))
}

/// Writes the object of `hash` (`size` bytes) from bucket `b` to `name`
/// in the directory `dir` (`perm`): streamed into a temporary file beside
/// it, renamed to `name` (never replacing) only when its size and BLAKE3
/// match; false, nothing left, when the bucket has no such object. On an
/// error nothing is left either.
fn object_into(
    b: &super::bucket::Bucket,
    hash: &str,
    size: u64,
    dir: &OwnedFd,
    name: &OsStr,
    perm: u32,
) -> Result<bool, GetError> {
    let mut part_name = b".".to_vec();
    part_name.extend_from_slice(name.as_bytes());
    part_name.extend_from_slice(format!(".opfs-part-{}", std::process::id()).as_bytes());
    let part = OsStr::from_bytes(&part_name);
    let mut file = create_new(dir, part, perm).map_err(GetError::Write)?;
    let r = b.get_into(hash, size, &mut file).and_then(|found| {
        if found {
            file.sync_data()
                .and_then(|()| {
                    rustix::fs::renameat_with(dir, part, dir, name, RenameFlags::NOREPLACE)
                        .map_err(io::Error::from)
                })
                .map_err(GetError::Write)?;
        }
        Ok(found)
    });
    if !matches!(r, Ok(true)) {
        let _ = rustix::fs::unlinkat(dir, part, AtFlags::empty());
    }
    r
}

/// A checkout's directory while it is written: a new directory beside
/// DIR when DIR does not exist (renamed to DIR at the end), or inside an
/// existing empty DIR (its entries moved up at the end). Dropped before
/// [`Stage::finish`], it is removed with everything in it, so a failed
/// checkout leaves DIR as it was (absent, or empty).
///
/// The checkout marks the directory as its own (the extended attribute
/// [`STAGE_MARK`], set once it holds the lock: a name alone proves
/// nothing, as a tree or a user may hold a directory of that name, and no
/// checkout writes extended attributes) and holds an exclusive `flock` on
/// it while it lives (released by the kernel when the process dies,
/// however), so a staging directory left by a killed checkout is told
/// from one being written and from anything else: the next checkout into
/// the same parent (or into that DIR) removes every marked one it can
/// lock ([`sweep_stale`]). On a file system without user extended
/// attributes the directory is not marked, and one left by a killed
/// checkout stays for the user to remove.
struct Stage {
    /// Where the tree is written.
    dir: PathBuf,
    /// DIR (a symlink to a directory resolved).
    target: PathBuf,
    /// True when DIR existed (an empty directory).
    existed: bool,
    done: bool,
    /// The directory, open and locked.
    lock: OwnedFd,
}

/// The part of a staging directory's name after its DIR's name
/// (`.NAME.opfs-checkout-PID` beside DIR, `.opfs-checkout-PID` inside).
const STAGE_TAG: &str = ".opfs-checkout-";

/// The extended attribute that marks a staging directory ([`Stage`]),
/// with the value [`STAGE_MARK_VALUE`].
const STAGE_MARK: &str = "user.opfs-checkout";

/// The value of [`STAGE_MARK`].
const STAGE_MARK_VALUE: &[u8] = b"staging";

/// True when the directory open as `fd` carries the mark of a staging
/// directory ([`STAGE_MARK`]).
fn is_marked(fd: &OwnedFd) -> bool {
    let mut buf = [0u8; 16];
    rustix::fs::fgetxattr(fd, STAGE_MARK, &mut buf[..]).is_ok_and(|n| &buf[..n] == STAGE_MARK_VALUE)
}

/// True for the name of a staging directory ([`Stage`]): `.` then
/// anything, then [`STAGE_TAG`] and a pid (digits only).
fn is_stage_name(name: &[u8]) -> bool {
    let tag = STAGE_TAG.as_bytes();
    name.first() == Some(&b'.')
        && name.len() > tag.len()
        && name
            .windows(tag.len())
            .rposition(|w| w == tag)
            .is_some_and(|i| {
                let pid = &name[i + tag.len()..];
                !pid.is_empty() && pid.iter().all(u8::is_ascii_digit)
            })
}

/// Removes from `dir` every staging directory ([`is_stage_name`], marked
/// with [`STAGE_MARK`]) whose checkout is gone: those whose lock can be
/// taken (a live checkout holds its own). A directory, never followed
/// through a symlink; one without the mark is never removed, whatever
/// its name.
fn sweep_stale(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if !is_stage_name(e.file_name().as_bytes()) || !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = e.path();
        if let Ok(Some(held)) = lock_dir(&path) {
            if is_marked(&held) {
                let _ = std::fs::remove_dir_all(&path);
            }
        }
    }
}

/// Opens the directory `path` (not through a symlink) and takes its
/// exclusive `flock` without waiting; `None` when another holds it.
fn lock_dir(path: &Path) -> io::Result<Option<OwnedFd>> {
    let fd = rustix::fs::open(
        path,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )?;
    match rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Some(fd)),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The directory that holds `dir` (`.` for a bare name).
fn dir_parent(dir: &Path) -> PathBuf {
    match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Makes the directory `path`, takes its lock, then marks it
/// ([`STAGE_MARK`]; not on a file system without user extended
/// attributes): a stale one of the same pid (marked, its lock free) is
/// removed first, and one without the mark is not this checkout's to
/// remove (`EEXIST`). A sweep by another checkout never removes it
/// before it is marked, and after only when its lock is free; the
/// directory locked must still be there and be the one at `path`, else
/// it is made again.
fn make_locked(path: &Path) -> io::Result<OwnedFd> {
    let mut tries = 0;
    loop {
        tries += 1;
        match std::fs::create_dir(path) {
            Ok(()) => {}
            // A stale one left by a dead checkout of the same pid.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 50 => {
                match lock_dir(path) {
                    Ok(Some(held)) if is_marked(&held) => std::fs::remove_dir_all(path)?,
                    Ok(Some(_)) => return Err(e),
                    _ => {}
                }
                continue;
            }
            Err(e) => return Err(e),
        }
        // Not locked, gone or another: swept meanwhile.
        if let Ok(Some(fd)) = lock_dir(path) {
            let held = rustix::fs::fstat(&fd)?;
            let there = rustix::fs::lstat(path).ok();
            if held.st_nlink > 0
                && there.is_some_and(|t| t.st_dev == held.st_dev && t.st_ino == held.st_ino)
            {
                // Unmarked where user extended attributes are not
                // supported: never swept, left for the user after a kill.
                let _ = rustix::fs::fsetxattr(
                    &fd,
                    STAGE_MARK,
                    STAGE_MARK_VALUE,
                    rustix::fs::XattrFlags::CREATE,
                );
                return Ok(fd);
            }
        }
        if tries >= 50 {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

impl Stage {
    fn new(dir: &Path) -> Result<Stage, (PathBuf, io::Error)> {
        let at = |p: &Path| {
            let p = p.to_path_buf();
            move |e| (p, e)
        };
        let tag = format!("{STAGE_TAG}{}", std::process::id());
        if std::fs::metadata(dir).is_ok_and(|m| m.is_dir()) {
            let target = std::fs::canonicalize(dir).map_err(at(dir))?;
            let stage = target.join(&tag);
            let lock = make_locked(&stage).map_err(at(&stage))?;
            return Ok(Stage {
                dir: stage,
                target,
                existed: true,
                done: false,
                lock,
            });
        }
        let parent = dir_parent(dir);
        std::fs::create_dir_all(&parent).map_err(at(&parent))?;
        let name = dir.file_name().unwrap_or_default().to_string_lossy();
        let stage = parent.join(format!(".{name}{tag}"));
        let lock = make_locked(&stage).map_err(at(&stage))?;
        Ok(Stage {
            dir: stage,
            target: dir.to_path_buf(),
            existed: false,
            done: false,
            lock,
        })
    }

    /// Puts the tree in place: renames the new directory to DIR, or moves
    /// each entry of the one inside DIR up into DIR.
    fn finish(mut self) -> Result<(), (PathBuf, io::Error)> {
        if !self.existed {
            // DIR keeps no mark (a killed checkout between the two steps
            // leaves its staging directory unmarked, for the user).
            let _ = rustix::fs::fremovexattr(&self.lock, STAGE_MARK);
            std::fs::rename(&self.dir, &self.target).map_err(|e| (self.target.clone(), e))?;
            self.done = true;
            return Ok(());
        }
        let entries = std::fs::read_dir(&self.dir).map_err(|e| (self.dir.clone(), e))?;
        for e in entries {
            let e = e.map_err(|e| (self.dir.clone(), e))?;
            let to = self.target.join(e.file_name());
            // No overwrite: DIR stays as the user left it but for the
            // checkout's own names.
            if std::fs::symlink_metadata(&to).is_ok() {
                return Err((
                    self.target.clone(),
                    io::Error::from_raw_os_error(libc::ENOTEMPTY),
                ));
            }
            std::fs::rename(e.path(), &to).map_err(|e| (to.clone(), e))?;
        }
        std::fs::remove_dir(&self.dir).map_err(|e| (self.dir.clone(), e))?;
        self.done = true;
        Ok(())
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// True for a full commit id (40 or 64 hex digits).
fn is_commit_id(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// True when a ref of the namespace `ns` in `git_dir` reaches commit `id`
/// (a commit of that project: one of its turns, or of a worktree
/// branch's).
fn contains(git_dir: &Path, git: &GitEnv, ns: &str, id: &str) -> bool {
    let mut cmd = git.command(Some(git_dir));
    cmd.args([
        "for-each-ref",
        "--count=1",
        "--format=%(refname)",
        "--contains",
        id,
    ])
    .arg(format!("{ns}/"));
    git::output(cmd, git).is_ok_and(|o| o.status.success() && !o.stdout.is_empty())
}

/// The BLAKE3 (hex) and size a pointer file names
/// (`crate::export::pointer`), or `None` for any other content.
pub fn parse_pointer(bytes: &[u8]) -> Option<(String, u64)> {
    if bytes.len() > 200 {
        return None;
    }
    // Exactly what the export writes, nothing else (no `\r`, no upper
    // case hex, no trailing bytes): one content, one pointer.
    let text = std::str::from_utf8(bytes).ok()?;
    let rest = text.strip_prefix("opfs-pointer v1\nblake3 ")?;
    let (hash, rest) = rest.split_once("\nsize ")?;
    let size: u64 = rest.strip_suffix('\n')?.parse().ok()?;
    let raw = blake3::Hash::from_hex(hash).ok()?;
    (crate::export::pointer(raw.as_bytes(), size) == bytes).then(|| (hash.to_string(), size))
}

/// Blobs read in order through one `git cat-file --batch`.
struct BlobReader {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
}

impl BlobReader {
    fn start(git_dir: &Path, git: &GitEnv, ids: Vec<String>) -> io::Result<BlobReader> {
        let mut cmd = git.command(Some(git_dir));
        cmd.args(["cat-file", "--batch"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn()?;
        let mut stdin = child
            .stdin
            .take()
            .ok_or_else(|| io::Error::other("no stdin"))?;
        let out = BufReader::new(
            child
                .stdout
                .take()
                .ok_or_else(|| io::Error::other("no stdout"))?,
        );
        // A thread writes the ids so a large batch cannot deadlock on pipes.
        std::thread::spawn(move || {
            for id in ids {
                if writeln!(stdin, "{id}").is_err() {
                    break;
                }
            }
        });
        Ok(BlobReader { child, out })
    }

    /// The size of the next blob, from its header line.
    fn next_header(&mut self) -> io::Result<u64> {
        let mut header = String::new();
        self.out.read_line(&mut header)?;
        header
            .trim_end()
            .rsplit(' ')
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| io::Error::other(format!("git cat-file: {}", header.trim())))
    }

    /// The blob's `size` bytes (a small one), read whole.
    fn body(&mut self, size: u64) -> io::Result<Vec<u8>> {
        let mut buf = vec![0; size as usize + 1];
        self.out.read_exact(&mut buf)?;
        buf.pop();
        Ok(buf)
    }

    /// Copies the blob's `size` bytes to `to`, as they come.
    fn copy_body(&mut self, size: u64, to: &mut dyn Write) -> io::Result<()> {
        let n = io::copy(&mut (&mut self.out).take(size), to)?;
        if n != size {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("git cat-file ended after {n} of {size} bytes"),
            ));
        }
        let mut nl = [0u8; 1];
        self.out.read_exact(&mut nl)
    }
}

impl Drop for BlobReader {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_subject_is_the_first_line_bounded() {
        assert_eq!(subject_of(b"Turn 1: x\n\nbody", false), "Turn 1: x");
        assert_eq!(subject_of(b"Turn 1: x", false), "Turn 1: x");
        // Cut at the end of what was read: the line goes on.
        assert_eq!(subject_of(b"Turn 1: x", true), "Turn 1: x…");
        let long = "é".repeat(SUBJECT_MAX + 5);
        let s = subject_of(long.as_bytes(), false);
        assert_eq!(s.chars().count(), SUBJECT_MAX + 1);
        assert!(s.ends_with("é…"), "{s}");
        assert_eq!(subject_of(b"a\x1b[2Jb\n", false), "a\u{fffd}[2Jb");
    }

    #[test]
    fn only_the_exact_turn_layout_is_a_turn() {
        let ns = "refs/opfs/m/0123456789abcdef";
        assert_eq!(turn_of(ns, &format!("{ns}/turns/5")), Some(5));
        for spoof in [
            format!("{ns}/turns/zzz/5"),
            format!("{ns}/turns/5/6"),
            format!("{ns}/turns/05"),
            format!("{ns}/turns/"),
            format!("{ns}/turnsx/5"),
            format!("{ns}x/turns/5"),
            format!("{ns}/worktrees/turns/5"),
            "refs/opfs/other/0123456789abcdef/turns/5".to_string(),
        ] {
            assert_eq!(turn_of(ns, &spoof), None, "{spoof}");
        }
    }

    #[test]
    fn a_full_disk_is_told_from_other_failures() {
        assert!(is_no_space(
            "fatal: write error: No space left on device; fatal: index-pack failed"
        ));
        assert!(!is_no_space("fatal: unable to connect to 127.0.0.1"));
        let e = no_space(
            "git://h/r.git".into(),
            PathBuf::from("/home/u/.opfs/remotes/0011.git"),
            "fatal: write error: No space left on device".into(),
            RemoteError::BadUrl(String::new()),
        );
        let text = e.to_string();
        for part in [
            "no space left on the device",
            "/home/u/.opfs/remotes/0011.git",
            "/home/u/.opfs/remotes (caches",
            "free space",
        ] {
            assert!(text.contains(part), "{part:?} not in {text}");
        }
    }

    #[test]
    fn no_entry_is_written_through_a_symlink_the_checkout_wrote() {
        // The exact-bytes checks of `checkout` refuse a symlink `d` and an
        // entry `d/x`; a folding file system would let `D` and `d/x`
        // through them. The writer itself refuses any path through a
        // symlink: here the same name, as folding would make it.
        let tmp = tempfile::tempdir().expect("tempdir");
        let outside = tmp.path().join("outside");
        let stage = tmp.path().join("stage");
        std::fs::create_dir(&outside).expect("outside");
        std::fs::create_dir(&stage).expect("stage");
        let tree = Beneath::open(&stage).expect("open");
        let (dir, name) = tree.parent_of(b"D").expect("parent");
        rustix::fs::symlinkat(outside.as_os_str(), &dir, name).expect("symlink");
        for rel in [&b"D/x"[..], b"D/sub/x"] {
            let path = stage.join(OsStr::from_bytes(rel));
            let r = tree
                .parent_of(rel)
                .and_then(|(dir, name)| create_new(&dir, name, 0o644).map(drop));
            let e = r.map_err(|e| written_error(rel, &path, e));
            assert!(
                matches!(&e, Err(RemoteError::BadName { path }) if path.as_bytes() == rel),
                "{e:?}"
            );
        }
        // Nor the link itself as a file, nor anything outside.
        let (dir, name) = tree.parent_of(b"D").expect("parent");
        assert!(create_new(&dir, name, 0o644).is_err());
        assert!(std::fs::read_dir(&outside)
            .expect("outside")
            .next()
            .is_none());
        // An ordinary nested entry is written with its mode.
        let (dir, name) = tree.parent_of(b"a/b/c.sh").expect("parent");
        create_new(&dir, name, 0o755)
            .expect("create")
            .write_all(b"x")
            .expect("write");
        let m = std::fs::metadata(stage.join("a/b/c.sh")).expect("meta");
        assert_eq!(m.permissions().mode() & 0o777, 0o755);
    }

    #[test]
    fn a_failed_fetch_leaves_no_temporary_pack_and_no_copy_it_created() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let copy = tmp.path().join("c.git");
        let pack = copy.join("objects/pack");
        std::fs::create_dir_all(&pack).expect("mkdir");
        for name in ["tmp_pack_a1", "tmp_idx_b2", "pack-1.pack", "pack-1.idx"] {
            std::fs::write(pack.join(name), b"x").expect("write");
        }
        let lock_path = tmp.path().join("c.lock");
        let lock = || FileLock::exclusive_removable(&lock_path).expect("lock");
        failed(&copy, false, lock());
        let mut left: Vec<String> = std::fs::read_dir(&pack)
            .expect("read")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["pack-1.idx", "pack-1.pack"]);
        assert!(lock_path.exists());
        failed(&copy, true, lock());
        assert!(!copy.exists());
        assert!(!lock_path.exists(), "the lock file of a copy it created");
    }
}
