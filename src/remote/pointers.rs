//! The bytes behind the pointer files of the turns a push sends, uploaded
//! to the bucket before the refs go out, so a remote never holds a
//! pointer whose upload failed; within each turn's budget
//! (`[push] bucket_turn_budget`): the objects over it are withheld,
//! recorded and reported, not sent.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;
use std::process::Stdio;

use crate::history::{self, Opened};
use crate::store::StateDir;
use crate::worktree::{self, branch::TurnEnds};

use super::bucket::{Bucket, BucketConfig, PutError, Upload};
use super::state::Withheld;
use super::{parse_pointer, GitEnv, PushError, Target};

/// Reads of a version (put together from ranges over a file the agent
/// may be writing) before it counts as gone ([`Put::version`]).
const VERSION_TRIES: usize = 3;

/// How long a write captured by the daemon may wait in its capture log
/// before its record is in the index: its longest group-commit wait
/// (1 s, while captures keep coming), with a margin.
const CAPTURE_WAIT: std::time::Duration = std::time::Duration::from_millis(1500);

/// `path`'s records from turn `from` on and the saved ranges of each
/// (none for a record that is not ranged), as the index holds them now:
/// what a write through the mount changes.
fn records_and_ranges(
    src: &history::Sources<'_>,
    path: &[u8],
    from: u64,
) -> Result<impl PartialEq, crate::store::IndexError> {
    let recs = src.index.records_of_path(path, from)?;
    let mut pieces = Vec::new();
    for (t, _) in &recs {
        pieces.push(src.index.ranges_of(*t, path)?);
    }
    Ok((recs, pieces))
}

/// Git's largest pointer file: content above this is never a pointer.
const POINTER_MAX: u64 = 200;

/// Where the bytes of a pointer file found in a commit are read.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Origin {
    /// A commit of the project's history: the file as it was at the start
    /// of project turn `start` (the end of the commit's turn).
    Project { start: u64 },
    /// A commit of worktree `name`'s branch: the file in the worktree's
    /// view at the end of its own turn `turn`.
    Worktree { name: String, turn: u64 },
}

/// Uploads the bytes of every pointer file that the commits of `refs`
/// (`(remote ref, commit)`: `.../turns/N` and `.../baseline`, and
/// `.../worktrees/NAME`) added or changed; returns the objects written and
/// their bytes (objects already in the bucket are not counted, nor
/// written). For a worktree branch, `since` names the commit the remote
/// held (its commits are left out); each of the branch's own commits
/// counts, read from the worktree's own history, else the project's.
///
/// A version whose bytes are gone for good (in no blob store, nor in the
/// project or worktree view) is not an error: it is skipped and returned
/// in [`Uploaded::missing`], so one lost object does not hold back every
/// later push; its pointer file then stays unresolved on the remote.
///
/// Errors: [`PushError::Bucket`] (transient: the push is retried),
/// [`PushError::Busy`] (a version being written through the mount while
/// it was read: transient too),
/// [`PushError::Unavailable`] (the history cannot be opened at all),
/// [`PushError::Git`].
pub(super) fn upload(
    state: &StateDir,
    git_dir: &Path,
    target: &Target,
    git: &GitEnv,
    cfg: &BucketConfig,
    refs: &[(String, String)],
    since: &BTreeMap<String, String>,
) -> Result<Uploaded, PushError> {
    // commit -> where its pointers' bytes are read
    let mut commits: Vec<(String, Origin)> = Vec::new();
    for (r, commit) in refs {
        if let Some(name) = r.rsplit_once("/worktrees/").map(|(_, n)| n) {
            commits.extend(
                branch_commits(git_dir, target, git, commit, since.get(r))?
                    .into_iter()
                    .filter(|(_, wt, _)| wt == name)
                    .map(|(c, _, turn)| {
                        (
                            c,
                            Origin::Worktree {
                                name: name.to_string(),
                                turn,
                            },
                        )
                    }),
            );
            continue;
        }
        let start = if let Some(n) = r
            .rsplit_once("/turns/")
            .and_then(|(_, n)| n.parse::<u64>().ok())
        {
            n + 1
        } else if r.ends_with("/baseline") {
            let mut cmd = git.command(Some(git_dir));
            cmd.args([
                "log",
                "-1",
                "--format=%(trailers:key=opfs-baseline,valueonly)",
                commit,
            ]);
            let out = super::run_local(cmd, git, git_dir, target, "reading the baseline")?;
            match String::from_utf8_lossy(&out).trim().parse() {
                Ok(n) => n,
                Err(_) => continue,
            }
        } else {
            continue;
        };
        commits.push((commit.clone(), Origin::Project { start }));
    }
    // hash -> (size, path, where)
    let mut wanted: BTreeMap<String, (u64, Vec<u8>, Origin)> = BTreeMap::new();
    // hash -> why not sent: over its turn's budget
    let mut withheld: BTreeMap<String, Withheld> = BTreeMap::new();
    for (commit, origin) in commits {
        let changed = pointers_changed(git_dir, target, git, &commit)?;
        for (hash, size, path, fits) in within_budget(changed, target.turn_budget) {
            if fits {
                withheld.remove(&hash);
                wanted.entry(hash).or_insert((size, path, origin.clone()));
            } else if !wanted.contains_key(&hash) {
                let (turn, path) = match &origin {
                    Origin::Project { start } => {
                        (start.saturating_sub(1), crate::paths::display(&path))
                    }
                    Origin::Worktree { name, turn } => (
                        *turn,
                        format!("{} (worktree {name})", crate::paths::display(&path)),
                    ),
                };
                withheld.entry(hash.clone()).or_insert(Withheld {
                    path,
                    turn,
                    hash,
                    size,
                    budget: target.turn_budget.unwrap_or(u64::MAX),
                });
            }
        }
    }
    if wanted.is_empty() && withheld.is_empty() {
        return Ok(Uploaded::default());
    }
    let bucket = Bucket::open(cfg)
        .map_err(|source| PushError::Bucket {
            remote: target.url.clone(),
            source: Box::new(source),
        })?
        .with_cancel(git.cancel.clone());
    // Withheld means "not in the bucket": one the bucket already holds
    // (sent under a larger budget, or by another machine) is not.
    let mut held = Vec::new();
    let mut not_sent = Vec::new();
    for w in withheld.into_values() {
        if git.cancel.is_cancelled() {
            return Err(PushError::Interrupted {
                remote: target.url.clone(),
            });
        }
        let holds = bucket
            .holds(&w.hash, w.size)
            .map_err(|source| PushError::Bucket {
                remote: target.url.clone(),
                source: Box::new(source),
            })?;
        if holds {
            held.push(w.hash);
        } else {
            not_sent.push(w);
        }
    }
    let withheld = not_sent;
    if wanted.is_empty() {
        return Ok(Uploaded {
            withheld,
            sent: held,
            ..Default::default()
        });
    }
    let opened = Opened::open(state, Box::new(|| {})).map_err(|e| PushError::Unavailable {
        remote: target.url.clone(),
        path: String::new(),
        turn: 0,
        hash: String::new(),
        cause: e.to_string(),
    })?;
    let src = opened.sources();
    let mut put = Put {
        bucket: &bucket,
        target,
        cancel: &git.cancel,
        done: Uploaded {
            withheld,
            sent: held,
            ..Default::default()
        },
    };
    // By worktree, in the order of its turns (what [`TurnEnds`] reads best).
    // (turn, path, hash, size)
    type Item = (u64, Vec<u8>, String, u64);
    let mut by_worktree: BTreeMap<String, Vec<Item>> = BTreeMap::new();
    for (hash, (size, path, origin)) in wanted {
        match origin {
            Origin::Project { start } => {
                let unavailable = |cause: String| PushError::Unavailable {
                    remote: target.url.clone(),
                    path: crate::paths::display(&path),
                    turn: start - 1,
                    hash: hash.clone(),
                    cause,
                };
                let r = (|| {
                    let raw =
                        blake3::Hash::from_hex(&hash).map_err(|e| unavailable(e.to_string()))?;
                    // Streamed from the blob store, else from the project's
                    // file when it still holds these bytes (the newest
                    // version), else read as the history has it (put
                    // together from its saved ranges as it is read); what
                    // is no file then is said by `opfs show`.
                    if put.file(&hash, size, File::open(src.blobs.path_of(raw.as_bytes())))?
                        || put.file(&hash, size, project_file(&src, &path, size))?
                        || put.version(&src, &path, start, &hash, size, unavailable)?
                    {
                        return Ok(());
                    }
                    let content = history::show(&src, start, &path)
                        .map_err(|e| unavailable(e.to_string()))?;
                    put.put(&hash, content, unavailable)
                })();
                put.skip_unavailable(r, size)?;
            }
            Origin::Worktree { name, turn } => {
                by_worktree
                    .entry(name)
                    .or_default()
                    .push((turn, path, hash, size));
            }
        }
    }
    let home = state
        .dir
        .parent()
        .and_then(Path::parent)
        .unwrap_or(&state.dir)
        .to_path_buf();
    for (name, mut items) in by_worktree {
        items.sort();
        let mut each = |ends: &TurnEnds<'_>, own: &crate::history::Sources<'_>| {
            for (turn, path, hash, size) in &items {
                let unavailable = |cause: String| PushError::Unavailable {
                    remote: target.url.clone(),
                    path: format!("{} (worktree {name})", crate::paths::display(path)),
                    turn: *turn,
                    hash: hash.clone(),
                    cause,
                };
                let r = (|| {
                    let raw =
                        blake3::Hash::from_hex(hash).map_err(|e| unavailable(e.to_string()))?;
                    // Kept whole by the worktree's history or the project's
                    // (streamed from the store); else the worktree's view
                    // at the end of the turn.
                    if put.file(hash, *size, File::open(own.blobs.path_of(raw.as_bytes())))?
                        || put.file(hash, *size, File::open(src.blobs.path_of(raw.as_bytes())))?
                    {
                        return Ok(());
                    }
                    let content = match own
                        .blob(raw.as_bytes())
                        .or_else(|_| src.blob(raw.as_bytes()))
                    {
                        Ok(b) => b,
                        Err(_) => ends
                            .file(*turn, path)
                            .map_err(|e| unavailable(e.to_string()))?
                            .ok_or_else(|| {
                                unavailable("the worktree's view holds no file there".into())
                            })?,
                    };
                    put.put(hash, content, unavailable)
                })();
                put.skip_unavailable(r, *size)?;
            }
            Ok::<(), PushError>(())
        };
        worktree::life::with_turn_ends(&home, state, &name, &mut each).map_err(|e| {
            PushError::Unavailable {
                remote: target.url.clone(),
                path: format!("worktree {name}"),
                turn: items.first().map_or(0, |i| i.0),
                hash: items.first().map(|i| i.2.clone()).unwrap_or_default(),
                cause: e.to_string(),
            }
        })??;
    }
    Ok(put.done)
}

/// What an upload did.
#[derive(Debug, Default)]
pub(super) struct Uploaded {
    /// Objects written (those already in the bucket are not counted).
    pub n: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Versions whose bytes are gone for good, skipped.
    pub missing: Vec<super::state::Missing>,
    /// Objects over their turn's budget, not sent ([`within_budget`]).
    pub withheld: Vec<Withheld>,
    /// The BLAKE3 of every object now in the bucket (written now or found
    /// there): a record of it as withheld is obsolete.
    pub sent: Vec<String>,
}

/// The pointers one commit added or changed (`(hash, size, path)`), each
/// with whether it fits the commit's `budget` (`None`: no limit): taken
/// smallest first (then by path, so the choice depends on nothing but
/// the commit and the budget), each content once, until the next would
/// take the sum of their sizes over the budget; that one and every later
/// one do not fit. So no object larger than the budget is ever sent.
fn within_budget(
    mut changed: Vec<(String, u64, Vec<u8>)>,
    budget: Option<u64>,
) -> Vec<(String, u64, Vec<u8>, bool)> {
    changed.sort_by(|a, b| (a.1, &a.2).cmp(&(b.1, &b.2)));
    let mut seen = std::collections::BTreeSet::new();
    let mut used = 0u64;
    let mut full = false;
    let mut out = Vec::with_capacity(changed.len());
    for (hash, size, path) in changed {
        if !seen.insert(hash.clone()) {
            continue;
        }
        let fits = match budget {
            None => true,
            Some(b) => !full && used.saturating_add(size) <= b,
        };
        if fits {
            used = used.saturating_add(size);
        } else {
            full = true;
        }
        out.push((hash, size, path, fits));
    }
    out
}

/// Uploads to one bucket, counting what it wrote.
struct Put<'b> {
    bucket: &'b Bucket,
    target: &'b Target,
    /// Checked before each object (and by the bucket during one,
    /// `Bucket::with_cancel`): an unmount stops the upload there.
    cancel: &'b super::Cancel,
    done: Uploaded,
}

impl Put<'_> {
    /// `r`, with a version whose bytes are gone for good
    /// ([`PushError::Unavailable`]) recorded as missing instead, unless
    /// the bucket holds its object (`size` bytes) already (sent by
    /// another machine, or from another path or turn): then it counts as
    /// sent.
    fn skip_unavailable(&mut self, r: Result<(), PushError>, size: u64) -> Result<(), PushError> {
        match r {
            Err(PushError::Unavailable {
                path,
                turn,
                hash,
                cause,
                ..
            }) => {
                let held = self
                    .bucket
                    .holds(&hash, size)
                    .map_err(|source| PushError::Bucket {
                        remote: self.target.url.clone(),
                        source: Box::new(source),
                    })?;
                if held {
                    self.done.sent.push(hash);
                    return Ok(());
                }
                self.done.missing.push(super::state::Missing {
                    path,
                    turn,
                    hash,
                    cause,
                });
                Ok(())
            }
            r => r,
        }
    }

    /// Uploads `content` as the object of `hash` once its BLAKE3 is
    /// checked (a version put together again may differ: `unavailable`).
    fn put(
        &mut self,
        hash: &str,
        content: Vec<u8>,
        unavailable: impl FnOnce(String) -> PushError,
    ) -> Result<(), PushError> {
        // In memory already: checked before anything is sent.
        if blake3::hash(&content).to_hex().as_str() != hash
            || !self.stream(hash, content.len() as u64, &mut &content[..])?
        {
            return Err(unavailable(
                "the version found has other bytes (it was changed since and its earlier bytes were not kept)".into(),
            ));
        }
        Ok(())
    }

    /// Uploads the object of `hash` (`size` bytes), the content of `path`
    /// when project turn `start` began as the history has it, streamed
    /// ([`history::Sources::version_content`]: put together from its
    /// saved ranges as it is read, or its blob, or the project's file):
    /// true when it is in the bucket now; false (nothing written) when the
    /// history holds no file there then. The project's file under saved
    /// ranges may be written through the mount while it is read: a content
    /// of other bytes put together from ranges is read again (its records
    /// then hold the ranges overwritten meanwhile), up to
    /// [`VERSION_TRIES`] times. A write through the mount is captured
    /// (its turn-start bytes saved as a range) before it runs, so a read
    /// it spoiled leaves the path's records and ranges changed, once the
    /// daemon has committed its capture log (within [`CAPTURE_WAIT`]):
    /// then the version is still there, only busy, and the push fails for
    /// now ([`PushError::Busy`], retried like a bucket failure). With
    /// the records unchanged (the file changed behind the mount), or at
    /// once for a blob, or the project's file (which the caller tried
    /// first), it is a version whose bytes are gone (`unavailable`), as is
    /// one that cannot be read.
    fn version(
        &mut self,
        src: &history::Sources<'_>,
        path: &[u8],
        start: u64,
        hash: &str,
        size: u64,
        unavailable: impl Fn(String) -> PushError,
    ) -> Result<bool, PushError> {
        let records =
            || records_and_ranges(src, path, start).map_err(|e| unavailable(e.to_string()));
        let before = records()?;
        let mut ranged = false;
        for _ in 0..VERSION_TRIES {
            let opened = src
                .version_content(path, start)
                .map_err(|e| unavailable(e.to_string()))?;
            let (mut content, from) = match opened {
                None => return Ok(false),
                // The project's file was tried already (`project_file`).
                Some((_, history::ContentFrom::Project)) => break,
                Some(c) => c,
            };
            if self.stream(hash, size, &mut content)? {
                return Ok(true);
            }
            if from != history::ContentFrom::Ranges {
                break;
            }
            ranged = true;
        }
        if ranged {
            let mut written = records()? != before;
            if !written {
                // Writes captured but not committed yet show within the
                // daemon's longest group-commit wait.
                std::thread::sleep(CAPTURE_WAIT);
                written = records()? != before;
            }
            if written {
                return Err(PushError::Busy {
                    remote: self.target.url.clone(),
                    path: crate::paths::display(path),
                    turn: start.saturating_sub(1),
                    hash: hash.to_string(),
                });
            }
        }
        Err(unavailable(
            "the version found has other bytes (it was changed since and its earlier bytes were not kept)".into(),
        ))
    }

    /// Uploads the object of `hash` (`size` bytes) streamed from `file`
    /// when it opened; false (nothing written) when it did not, or did not
    /// hold those bytes (another size or BLAKE3, or a read failed).
    fn file(&mut self, hash: &str, size: u64, file: io::Result<File>) -> Result<bool, PushError> {
        match file {
            Ok(mut f) => self.stream(hash, size, &mut f),
            Err(_) => Ok(false),
        }
    }

    /// Uploads the object of `hash` from `src`, checked as it is read
    /// (`Bucket::put_from`): true when it is in the bucket now, false when
    /// `src` held other bytes (nothing written).
    fn stream(&mut self, hash: &str, size: u64, src: &mut dyn Read) -> Result<bool, PushError> {
        if self.cancel.is_cancelled() {
            return Err(PushError::Interrupted {
                remote: self.target.url.clone(),
            });
        }
        match self.bucket.put_from(hash, size, src) {
            Ok(Upload::Created) => {
                self.done.n += 1;
                self.done.bytes += size;
                self.done.sent.push(hash.to_string());
                Ok(true)
            }
            Ok(Upload::Existed) => {
                self.done.sent.push(hash.to_string());
                Ok(true)
            }
            Err(PutError::Mismatch | PutError::Read(_)) => Ok(false),
            // Unmounted during the upload: stopped, a multipart upload
            // aborted.
            Err(PutError::Interrupted) => Err(PushError::Interrupted {
                remote: self.target.url.clone(),
            }),
            Err(PutError::Bucket(source)) => Err(PushError::Bucket {
                remote: self.target.url.clone(),
                source: Box::new(source),
            }),
        }
    }
}

/// The commits of a worktree branch at `tip` that are its own (their
/// `opfs-worktree:` trailer names a worktree): not reachable from the
/// project's history (`refs/heads/opfs`) nor from `since` (what the remote
/// held; ignored when the export no longer has it). Each with the
/// worktree it names and its own turn (`opfs-turn:`).
fn branch_commits(
    git_dir: &Path,
    target: &Target,
    git: &GitEnv,
    tip: &str,
    since: Option<&String>,
) -> Result<Vec<(String, String, u64)>, PushError> {
    let mut cmd = git.command(Some(git_dir));
    cmd.args([
        "log",
        "--ignore-missing",
        "--format=%H%x00%(trailers:key=opfs-worktree,valueonly,separator=)%x00%(trailers:key=opfs-turn,valueonly,separator=)%x00",
        tip,
        "--not",
        crate::export::BRANCH,
    ]);
    if let Some(s) = since {
        cmd.arg(s);
    }
    let out = super::run_local(
        cmd,
        git,
        git_dir,
        target,
        "listing a worktree branch's commits",
    )?;
    let text = String::from_utf8_lossy(&out);
    let fields: Vec<&str> = text.split('\0').map(str::trim).collect();
    Ok(fields
        .chunks(3)
        .filter_map(|c| match c {
            [id, wt, turn] if !id.is_empty() && !wt.is_empty() => {
                Some((id.to_string(), wt.to_string(), turn.parse().ok()?))
            }
            _ => None,
        })
        .collect())
}

/// The project's file at `path` when it is a regular file of `size`
/// bytes (opened without following a symlink out of the project).
fn project_file(src: &history::Sources<'_>, path: &[u8], size: u64) -> io::Result<File> {
    let f = src
        .backing
        .open_file(path, libc::O_RDONLY | libc::O_NONBLOCK, 0)?;
    let m = f.metadata()?;
    if !m.is_file() || m.len() != size {
        return Err(io::Error::other("not that version"));
    }
    Ok(f)
}

/// The pointer files `commit` added or changed against its first parent
/// (all of its tree for a root commit): each one's BLAKE3, size and path.
fn pointers_changed(
    git_dir: &Path,
    target: &Target,
    git: &GitEnv,
    commit: &str,
) -> Result<Vec<(String, u64, Vec<u8>)>, PushError> {
    let mut cmd = git.command(Some(git_dir));
    cmd.args([
        "diff-tree",
        "-r",
        "-z",
        "--root",
        "--no-commit-id",
        "--no-renames",
        commit,
    ]);
    let out = super::run_local(cmd, git, git_dir, target, "listing a turn's changes")?;
    let mut fields = out.split(|b| *b == 0);
    let mut changed: Vec<(String, Vec<u8>)> = Vec::new();
    while let (Some(meta), Some(path)) = (fields.next(), fields.next()) {
        let meta = String::from_utf8_lossy(meta);
        let f: Vec<&str> = meta.trim_start_matches(':').split(' ').collect();
        if f.len() < 5 || !(f[1] == "100644" || f[1] == "100755") || f[4] == "D" {
            continue;
        }
        changed.push((f[3].to_string(), path.to_vec()));
    }
    let ids: Vec<&str> = changed.iter().map(|(id, _)| id.as_str()).collect();
    let sizes =
        batch(git_dir, git, "--batch-check", &ids).map_err(|e| io_git(e, git_dir, target))?;
    let small: Vec<(String, Vec<u8>)> = changed
        .into_iter()
        .zip(
            String::from_utf8_lossy(&sizes)
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>(),
        )
        .filter(|(_, line)| {
            line.rsplit(' ')
                .next()
                .and_then(|s| s.parse::<u64>().ok())
                .is_some_and(|n| n <= POINTER_MAX)
        })
        .map(|(c, _)| c)
        .collect();
    let ids: Vec<&str> = small.iter().map(|(id, _)| id.as_str()).collect();
    let contents = batch(git_dir, git, "--batch", &ids).map_err(|e| io_git(e, git_dir, target))?;
    let mut rest = &contents[..];
    let mut found = Vec::new();
    for (_, path) in small {
        let Some(nl) = rest.iter().position(|b| *b == b'\n') else {
            break;
        };
        let header = String::from_utf8_lossy(&rest[..nl]).to_string();
        let size: usize = header
            .rsplit(' ')
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let body = &rest[nl + 1..(nl + 1 + size).min(rest.len())];
        if let Some((hash, size)) = parse_pointer(body) {
            found.push((hash, size, path));
        }
        rest = &rest[(nl + 2 + size).min(rest.len())..];
    }
    Ok(found)
}

fn io_git(e: std::io::Error, git_dir: &Path, target: &Target) -> PushError {
    PushError::Git {
        remote: target.url.clone(),
        what: "reading objects".into(),
        git_dir: git_dir.to_path_buf(),
        cause: e.to_string(),
    }
}

/// `git cat-file MODE` (`--batch-check` or `--batch`) of `ids`: its whole
/// output. The ids are written by a thread of their own, so a large batch
/// cannot deadlock on the pipes.
fn batch(git_dir: &Path, git: &GitEnv, mode: &str, ids: &[&str]) -> std::io::Result<Vec<u8>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut cmd = git.command(Some(git_dir));
    cmd.args(["cat-file", mode])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = cmd.spawn()?;
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("no stdin"))?;
    let input: String = ids.iter().map(|id| format!("{id}\n")).collect();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let mut out = Vec::new();
    child
        .stdout
        .take()
        .ok_or_else(|| std::io::Error::other("no stdout"))?
        .read_to_end(&mut out)?;
    let _ = writer.join();
    child.wait()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(hash: &str, size: u64, path: &str) -> (String, u64, Vec<u8>) {
        (hash.into(), size, path.as_bytes().to_vec())
    }

    #[test]
    fn a_turns_objects_fit_its_budget_smallest_first_and_none_is_larger() {
        let changed = vec![
            p("c", 13, "b.bin"),
            p("a", 12, "z.bin"),
            p("a", 12, "y.bin"),
            p("d", 5, "a.bin"),
            p("e", 30, "huge.bin"),
        ];
        let fit: Vec<(String, bool)> = within_budget(changed.clone(), Some(20))
            .into_iter()
            .map(|(h, _, _, f)| (h, f))
            .collect();
        // 5 + 12 fit; 13 would make 30; the same content twice counts once.
        assert_eq!(
            fit,
            [("d", true), ("a", true), ("c", false), ("e", false)].map(|(h, f)| (h.to_string(), f))
        );
        assert!(within_budget(changed, None).iter().all(|x| x.3));
        assert!(!within_budget(vec![p("e", 30, "x")], Some(29))[0].3);
        assert!(within_budget(vec![p("e", 30, "x")], Some(30))[0].3);
    }
}
