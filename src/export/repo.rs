//! Opening the export repository: refusing a place inside the project,
//! creating the bare repository atomically, and the `opfs-project` marker
//! that ties it to one project.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::{ExportError, GitContext, IoContext};
use crate::store::StateDir;

/// The marker file naming the project a repository belongs to.
const PROJECT_MARKER: &str = "opfs-project";

/// Opens (creating if needed) the bare repository at `git_dir`, marks it as
/// belonging to `state`'s project, and refuses one made for another
/// project.
///
/// Errors: [`ExportError::InsideProject`] when `git_dir` is inside the
/// project or its mount; [`ExportError::Foreign`] when the marker names
/// another project; [`ExportError::Io`] / [`ExportError::Git`] when the
/// repository or the marker cannot be created or read.
pub(super) fn open(state: &StateDir, git_dir: &Path) -> Result<gix::Repository, ExportError> {
    prepare(state, git_dir)?;
    open_gix(git_dir)
}

/// The checks and the creation of [`open`] without opening the repository
/// with gix: refuses a place inside the project, creates the repository if
/// missing, writes or checks the `opfs-project` marker. Errors as
/// [`open`].
pub(super) fn prepare(state: &StateDir, git_dir: &Path) -> Result<(), ExportError> {
    let project = &state.project;
    refuse_inside_project(state, git_dir)?;
    if !git_dir.join("HEAD").exists() {
        init_atomically(git_dir)?;
    }
    let marker = git_dir.join(PROJECT_MARKER);
    let mine = project.as_os_str().as_bytes();
    let found = match std::fs::read(&marker) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => match write_marker(git_dir, &marker, mine)
        {
            Ok(()) => return Ok(()),
            // Another exporter (the daemon's, an `opfs export`) wrote it
            // first: check what it wrote.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                std::fs::read(&marker).at(&marker)?
            }
            Err(e) => return Err(e).at(&marker),
        },
        r => r.at(&marker)?,
    };
    if found != mine {
        return Err(ExportError::Foreign {
            git_dir: git_dir.to_path_buf(),
            other: String::from_utf8_lossy(&found).into_owned(),
            project: project.to_path_buf(),
        });
    }
    Ok(())
}

/// Writes the marker whole or not at all: into a temporary file of
/// `git_dir`, then linked to `marker` only if no marker exists (a reader
/// never sees it empty or half-written; of two racing exporters one
/// wins, the other gets `AlreadyExists`).
fn write_marker(git_dir: &Path, marker: &Path, project: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut tmp = tempfile::NamedTempFile::new_in(git_dir)?;
    tmp.write_all(project)?;
    tmp.persist_noclobber(marker).map_err(|e| e.error)?;
    Ok(())
}

/// Opens the repository at `git_dir` with gix, isolated from the user's
/// and the system's git configuration.
pub(super) fn open_gix(git_dir: &Path) -> Result<gix::Repository, ExportError> {
    gix::open_opts(git_dir, gix::open::Options::isolated()).git(git_dir, "opening the repository")
}

/// A repository handle kept open between exports by a long-lived exporter
/// (the daemon's background export thread; `docs/design.md` "The export
/// keeps its repository open"). Opening the repository with gix reads its
/// configuration and, at the first object looked up, the list and indexes
/// of its packs: most of what the export of one small turn cost.
///
/// A handle is reused only while [`Stamp`] says that nothing replaced the
/// repository, changed its packs or packed its refs since it was opened:
/// a handle that had loaded the index of a pack since deleted (by `git
/// gc`, which `opfs gc` and the export's own packing run) would take the
/// objects of that pack for present and not write them again.
pub(super) struct Kept {
    git_dir: std::path::PathBuf,
    repo: gix::Repository,
    stamp: Stamp,
}

/// The identity and modification time of the repository's pack directory
/// and of its `packed-refs` (all zero when missing), read before a handle
/// opens the repository. Any pack written or deleted, any `git pack-refs`,
/// and a repository removed and made again change it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    files: [(u64, u64, i64, u32); 2],
    /// When it was read, in seconds since the epoch.
    taken_s: i64,
}

impl Stamp {
    /// The stamp of `git_dir` now; `None` when it cannot be read (the
    /// handle is then never kept).
    fn of(git_dir: &Path) -> Option<Stamp> {
        let one = |path: &Path| -> Option<(u64, u64, i64, u32)> {
            match rustix::fs::statx(
                rustix::fs::CWD,
                path,
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
                rustix::fs::StatxFlags::INO | rustix::fs::StatxFlags::MTIME,
            ) {
                Ok(st) => Some((
                    rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor),
                    st.stx_ino,
                    st.stx_mtime.tv_sec,
                    st.stx_mtime.tv_nsec,
                )),
                Err(rustix::io::Errno::NOENT) => Some((0, 0, 0, 0)),
                Err(_) => None,
            }
        };
        let taken_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        Some(Stamp {
            files: [
                one(&git_dir.join("objects").join("pack"))?,
                one(&git_dir.join("packed-refs"))?,
            ],
            taken_s,
        })
    }

    /// True when every change this stamp records was at least
    /// [`SETTLE_S`] seconds old when it was read: file times advance in
    /// clock ticks, so a change made in the same tick as the last one the
    /// stamp saw would leave it as it was; a handle whose stamp is that
    /// recent is not kept.
    fn settled(&self) -> bool {
        self.files
            .iter()
            .all(|&(_, _, sec, _)| sec.saturating_add(SETTLE_S) < self.taken_s)
    }
}

/// How old (in seconds) the last change to the packs or packed refs must be
/// for a handle to be kept (see [`Stamp::settled`]).
const SETTLE_S: i64 = 2;

impl Kept {
    /// The handle for `git_dir`: `kept`'s when it is for that repository
    /// and its [`Stamp`] still holds, else a newly opened one. Returns it
    /// with the stamp to keep it under (`None`: do not keep it).
    ///
    /// Errors: [`ExportError::Git`] when the repository cannot be opened.
    pub(super) fn take(
        kept: Option<Kept>,
        git_dir: &Path,
    ) -> Result<(gix::Repository, Option<Stamp>), ExportError> {
        let now = Stamp::of(git_dir);
        if let Some(k) = kept {
            if k.git_dir == git_dir && now.is_some_and(|n| n.files == k.stamp.files) {
                return Ok((k.repo, now));
            }
        }
        let mut repo = open_gix(git_dir)?;
        // A lookup that misses (every new object, before it is written)
        // would otherwise list the pack directory again and reopen the
        // alternates, realpath included: most of a small export's work.
        // The packs change only under the export lock (the export's own
        // packing, `opfs gc`) or by hand, and the stamp sends the next run
        // to a new handle when they have.
        repo.objects.refresh_never();
        Ok((repo, now))
    }

    /// Keeps `repo` (opened under `stamp` by [`Kept::take`]) for the next
    /// export when the stamp is settled.
    pub(super) fn keep(
        git_dir: &Path,
        repo: gix::Repository,
        stamp: Option<Stamp>,
    ) -> Option<Kept> {
        let stamp = stamp.filter(Stamp::settled)?;
        Some(Kept {
            git_dir: git_dir.to_path_buf(),
            repo,
            stamp,
        })
    }
}

/// The trees the export wrote, encoded, by id, kept by a long-lived
/// exporter between runs (`docs/design.md` "The export keeps the trees it
/// wrote"): the next turn's tree edit starts from the trees along the
/// paths the last turn changed, which would otherwise be read back from
/// their loose objects and inflated again. An id names its content, so a
/// remembered tree is that tree whoever wrote the repository since
/// (`opfs export --git-dir`, gc, prune, relabel, a repository made
/// again): the edit only reads trees reachable from the branch tip, whose
/// subtrees the repository holds. Starts over above [`MAX_TREE_BYTES`].
#[derive(Default)]
pub(super) struct Trees {
    by_id: std::cell::RefCell<std::collections::HashMap<gix::ObjectId, Vec<u8>>>,
    bytes: std::cell::Cell<usize>,
}

/// Above this many bytes of encoded trees, [`Trees`] starts over.
const MAX_TREE_BYTES: usize = 16 << 20;

impl Trees {
    /// Remembers the tree `encoded` (its canonical encoding) under `id`.
    pub(super) fn remember(&self, id: gix::ObjectId, encoded: Vec<u8>) {
        let mut by_id = self.by_id.borrow_mut();
        if self.bytes.get() + encoded.len() > MAX_TREE_BYTES {
            by_id.clear();
            self.bytes.set(0);
        }
        self.bytes.set(self.bytes.get() + encoded.len());
        if let Some(old) = by_id.insert(id, encoded) {
            self.bytes.set(self.bytes.get() - old.len());
        }
    }
}

/// What a tree edit reads trees through: the remembered [`Trees`] first,
/// else the repository's object database.
pub(super) struct TreeSource<'a> {
    pub(super) trees: &'a Trees,
    pub(super) objects: &'a gix::OdbHandle,
}

impl gix::objs::Find for TreeSource<'_> {
    fn try_find<'b>(
        &self,
        id: &gix::oid,
        buffer: &'b mut Vec<u8>,
    ) -> Result<Option<gix::objs::Data<'b>>, gix::objs::find::Error> {
        let hit = match self.trees.by_id.borrow().get(id) {
            Some(encoded) => {
                buffer.clear();
                buffer.extend_from_slice(encoded);
                true
            }
            None => false,
        };
        if hit {
            return Ok(Some(gix::objs::Data::new(
                buffer,
                gix::objs::Kind::Tree,
                id.kind(),
            )));
        }
        self.objects.try_find(id, buffer)
    }
}

/// Zero intrusion: the repository must be neither inside the project nor
/// inside its mount (which writes to the project).
fn refuse_inside_project(state: &StateDir, git_dir: &Path) -> Result<(), ExportError> {
    let project = &state.project;
    // Resolve through the parent, which exists more often than the repo.
    let abs = match (git_dir.parent(), git_dir.file_name()) {
        (Some(p), Some(name)) if !p.as_os_str().is_empty() => crate::state::absolute(p).join(name),
        _ => crate::state::absolute(git_dir),
    };
    let mountpoint = crate::state::registry::recorded_mountpoint(state);
    if abs.starts_with(project) || mountpoint.is_some_and(|m| abs.starts_with(m)) {
        return Err(ExportError::InsideProject {
            git_dir: abs,
            project: project.to_path_buf(),
        });
    }
    Ok(())
}

/// Creates the bare repository at `git_dir` in a temporary sibling and
/// renames it into place, so two exports starting at once (the daemon's and
/// a manual one) cannot both initialize it: the loser finds it made.
fn init_atomically(git_dir: &Path) -> Result<(), ExportError> {
    let parent = git_dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).at(parent)?;
    let name = git_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| crate::store::layout::EXPORT_DIR.into());
    let tmp = parent.join(format!(".{name}.opfs-init-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    gix::init_bare(&tmp).git(git_dir, "creating the repository")?;
    // rename(2) replaces an empty directory (one the user made for
    // --git-dir) and fails on a non-empty one (another export won).
    if let Err(e) = std::fs::rename(&tmp, git_dir) {
        let _ = std::fs::remove_dir_all(&tmp);
        if !git_dir.join("HEAD").exists() {
            return Err(e).at(git_dir);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exporters racing on a fresh repository (the daemon's first export
    /// and an `opfs export`) each find the marker whole: none takes the
    /// repository for another project's.
    #[test]
    fn racing_exporters_never_see_a_partial_marker() {
        for round in 0..100 {
            let tmp = tempfile::tempdir().expect("tempdir");
            let project = tmp.path().join("project");
            std::fs::create_dir(&project).expect("project");
            let state = StateDir::for_project(&tmp.path().join("home"), &project);
            let git_dir = tmp.path().join("export.git");
            // The repository made (its creation is atomic between
            // processes, named by the pid); the marker not yet written.
            init_atomically(&git_dir).expect("init");
            std::thread::scope(|s| {
                let racers: Vec<_> = (0..4)
                    .map(|_| s.spawn(|| prepare(&state, &git_dir)))
                    .collect();
                for r in racers {
                    if let Err(e) = r.join().expect("racer") {
                        panic!("round {round}: {e}");
                    }
                }
            });
            assert_eq!(
                std::fs::read(git_dir.join(PROJECT_MARKER)).expect("marker"),
                project.as_os_str().as_bytes()
            );
        }
    }
}
