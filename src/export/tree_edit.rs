//! Incremental tree updates: what a path's state becomes in a git tree,
//! which paths git cannot hold, and the export of each closed turn as an
//! edit of the previous commit's tree limited to the paths the turn
//! recorded (gix's tree editor loads and rewrites only the trees on those
//! paths).

use std::collections::HashMap;

use gix::bstr::{BStr, ByteSlice};
use gix::objs::tree::EntryKind;
use gix::ObjectId;

use super::commit::{turn_message, Tip};
use super::{
    BlobContext, ExportError, Exporter, GitContext, Progress, ProjectContext, BRANCH,
    TURN_REF_PREFIX,
};
use crate::history;
use crate::paths;
use crate::record::PreImage;
use crate::record::Turn;
use crate::store::BlobError;
use crate::view::{Timeline, Version};

/// Files of at least this many bytes are exported as a pointer file
/// ([`pointer`]) instead of their bytes (`docs/export.md` "Large files"):
/// 8 MiB, above nearly every source file, lockfiles included.
pub const POINTER_MIN: u64 = 8 << 20;

/// The pointer file standing for a large file's bytes: three lines naming
/// the format, the content's BLAKE3 (the hash opfs's blob store and index
/// use) and its length in bytes. Deterministic: a version exports to the
/// same pointer every time.
pub fn pointer(blob: &crate::record::Hash, size: u64) -> Vec<u8> {
    format!(
        "opfs-pointer v1\nblake3 {}\nsize {size}\n",
        blake3::Hash::from_bytes(*blob).to_hex()
    )
    .into_bytes()
}

/// What every pointer file begins with. A file whose own bytes begin
/// with it is exported as a pointer too (to its own bytes, whatever its
/// size), so that in an export every file that reads as a pointer is
/// one: a checkout resolves it to exactly the bytes it stood for, and a
/// small file cannot pass for a big one (`docs/export.md`, "Large files").
pub const POINTER_MAGIC: &[u8] = b"opfs-pointer";

/// The blob standing for a file's bytes in the export: the bytes
/// themselves, or its pointer when they begin with [`POINTER_MAGIC`].
fn exported_bytes<'a>(
    blob: &crate::record::Hash,
    size: u64,
    data: &'a [u8],
) -> std::borrow::Cow<'a, [u8]> {
    if data.starts_with(POINTER_MAGIC) {
        std::borrow::Cow::Owned(pointer(blob, size))
    } else {
        std::borrow::Cow::Borrowed(data)
    }
}

/// What one path becomes in a git tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GitState {
    /// Nothing (absent, or a special file git cannot hold).
    Absent,
    /// A directory: its entries are paths of their own.
    Dir,
    /// A blob or symlink entry.
    Leaf(EntryKind, ObjectId),
}

/// True when a tree entry named `name` would make `git fsck --strict`
/// complain or could be mistaken for a repository by git (`.git` and its
/// NTFS/HFS aliases; a symlink named `.gitmodules`).
fn rejected_name(name: &[u8], symlink: bool) -> bool {
    let opts = gix::validate::path::component::Options {
        protect_windows: false,
        protect_hfs: true,
        protect_ntfs: true,
    };
    let mode = symlink.then_some(gix::validate::path::component::Mode::Symlink);
    gix::validate::path::component(name.as_bstr(), mode, opts).is_err()
}

/// True when `path` cannot go into the export: `.git` at the root (never
/// recorded), or a component git rejects.
pub(super) fn excluded(path: &[u8], symlink: bool) -> bool {
    if paths::is_excluded(path) {
        return true;
    }
    let mut parts = path.split(|&b| b == b'/').peekable();
    while let Some(c) = parts.next() {
        let last = parts.peek().is_none();
        if rejected_name(c, symlink && last) {
            return true;
        }
    }
    false
}

/// True when a tree entry named `name` is `.gitmodules` or one of its
/// NTFS/HFS aliases, as `git fsck` sees it (gix refuses such a name for a
/// symlink only).
fn is_dot_gitmodules(name: &[u8]) -> bool {
    use gix::validate::path::component::{Mode, Options};
    let opts = Options {
        protect_windows: false,
        protect_hfs: true,
        protect_ntfs: true,
    };
    gix::validate::path::component(name.as_bstr(), None, opts).is_ok()
        && gix::validate::path::component(name.as_bstr(), Some(Mode::Symlink), opts).is_err()
}

/// The longest line of a `.gitattributes` that `git fsck` accepts
/// (`gitattributesLineLength`).
const GITATTRIBUTES_MAX_LINE: usize = 2048;

/// Why a remote that checks what it receives (`receive.fsckObjects`, as
/// GitHub, GitLab and Gitea do) would refuse the file at `path` holding
/// `data`, or None. `git fsck` reads every blob named `.gitmodules` (or an
/// alias) as git configuration and refuses a submodule name with a `..`
/// component, a `url` or `path` that reads as a command-line option (or a
/// `url` with a newline), and an `update = !command`; it refuses a
/// `.gitattributes` line over 2,048 bytes. A `.gitmodules` git cannot
/// parse is only noted by fsck, so it is kept. Such a file in one turn
/// would make every later push of the history refused, so the export
/// leaves it out (listed in `skipped`).
pub(super) fn fsck_refuses(path: &[u8], data: &[u8]) -> Option<&'static str> {
    let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    if name.eq_ignore_ascii_case(b".gitattributes") {
        return data
            .split(|&b| b == b'\n')
            .any(|l| l.len() > GITATTRIBUTES_MAX_LINE)
            .then_some("a .gitattributes line over 2,048 bytes");
    }
    if !is_dot_gitmodules(name) {
        return None;
    }
    let Ok(file) = gix::config::File::from_bytes_no_includes(
        data,
        gix::config::file::Metadata::api(),
        Default::default(),
    ) else {
        return None;
    };
    let option = |v: &[u8]| v.first() == Some(&b'-');
    for section in file.sections() {
        if !section.header().name().eq_ignore_ascii_case(b"submodule") {
            continue;
        }
        let Some(sub) = section.header().subsection_name() else {
            continue;
        };
        if gix::validate::submodule::name(sub).is_err() {
            return Some("a submodule name git refuses (a `..` component)");
        }
        let body = section.body();
        for url in body.values("url") {
            if option(&url)
                || url.contains(&b'\n')
                || url.find(b"%0a").is_some()
                || url.find(b"%0A").is_some()
            {
                return Some("a submodule url git refuses (an option or a newline)");
            }
        }
        for p in body.values("path") {
            if option(&p) {
                return Some("a submodule path git refuses (an option)");
            }
        }
        for u in body.values("update") {
            if u.first() == Some(&b'!') {
                return Some("a submodule update command");
            }
        }
    }
    None
}

fn components(path: &[u8]) -> impl Iterator<Item = &BStr> {
    path.split(|&b| b == b'/').map(|c| c.as_bstr())
}

impl Exporter<'_> {
    fn write_blob(&mut self, data: &[u8]) -> Result<ObjectId, ExportError> {
        self.objects += 1;
        let id = self
            .repo
            .write_blob(data)
            .git(&self.git_dir, "writing a blob")?;
        Ok(id.detach())
    }

    /// Reads `path`'s current state in the project: a file of
    /// [`POINTER_MIN`] bytes or more is hashed as it is read, its bytes
    /// not kept (it is exported as its pointer).
    pub(super) fn read_current(&self, path: &[u8]) -> Result<Version, ExportError> {
        crate::view::current::read_version_bounded(self.src.backing, path, POINTER_MIN)
            .in_project(path)
    }

    /// The git state of a recorded state.
    pub(super) fn git_state_of(
        &mut self,
        path: &[u8],
        state: &PreImage,
    ) -> Result<GitState, ExportError> {
        self.git_state(
            path,
            &Version {
                state: state.clone(),
                bytes: None,
            },
        )
    }

    /// The git state of a version (recorded or read from the project),
    /// writing its blob unless a blob of the same BLAKE3 was written by
    /// this run.
    pub(super) fn git_state(&mut self, path: &[u8], v: &Version) -> Result<GitState, ExportError> {
        // Checked before any blob is read or written: build output can be
        // most of a project's bytes.
        if !matches!(v.state, PreImage::Absent | PreImage::Unknown)
            && self.ignored(path, v.state.is_dir())
        {
            return Ok(GitState::Absent);
        }
        Ok(match &v.state {
            // Unknown: created outside the mount during the next turn; the
            // commit before it shows the path as absent, the next one shows
            // what the mount found.
            PreImage::Absent | PreImage::Unknown | PreImage::Special { .. } => GitState::Absent,
            // Put together by `Sources::timeline` before it gets here.
            PreImage::Ranged { .. } => {
                return Err(BlobError::Missing(
                    "a file kept as ranges was not put together".into(),
                ))
                .blob_of(path)
            }
            PreImage::Dir { .. } => GitState::Dir,
            PreImage::Symlink { target } => {
                let id = self.write_blob(target)?;
                GitState::Leaf(EntryKind::Link, id)
            }
            PreImage::File {
                blob, perm, size, ..
            } => {
                let kind = if history::git_file_mode(*perm) == 0o100755 {
                    EntryKind::BlobExecutable
                } else {
                    EntryKind::Blob
                };
                if *size < POINTER_MIN && self.fsck_checked(path) {
                    let data = match (&v.bytes, self.fetch) {
                        (Some(bytes), _) => bytes.clone(),
                        (None, Some(fetch)) => fetch(path, &v.state)?,
                        (None, None) => self.src.blob(blob).blob_of(path)?,
                    };
                    if let Some(why) = fsck_refuses(path, &data) {
                        log::warn!(
                            "export: {} left out: {why}; a remote that checks what it receives would refuse every later push",
                            paths::display(path)
                        );
                        self.skipped.push(paths::display(path));
                        return Ok(GitState::Absent);
                    }
                }
                let id = match (&v.bytes, self.known.get(blob)) {
                    (_, Some(id)) => *id,
                    // A large file is a pointer (its bytes stay in opfs);
                    // so is a file that begins as a pointer does.
                    _ if *size >= POINTER_MIN => self.write_blob(&pointer(blob, *size))?,
                    (Some(bytes), _) => self.write_blob(&exported_bytes(blob, *size, bytes))?,
                    (None, None) => {
                        let data = match self.fetch {
                            Some(fetch) => fetch(path, &v.state)?,
                            None => self.src.blob(blob).blob_of(path)?,
                        };
                        self.write_blob(&exported_bytes(blob, *size, &data))?
                    }
                };
                self.known.insert(*blob, id);
                GitState::Leaf(kind, id)
            }
        })
    }

    /// True when `path`'s content is checked by [`fsck_refuses`] (a
    /// `.gitmodules` or `.gitattributes` by its name).
    fn fsck_checked(&self, path: &[u8]) -> bool {
        let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
        name.eq_ignore_ascii_case(b".gitattributes") || is_dot_gitmodules(name)
    }

    /// Sets `path` to `state` in `editor`: a leaf is upserted, an absent
    /// path removed, a directory replaces a non-directory at that name.
    /// A path git cannot hold is left out (and listed in `skipped` unless
    /// it is absent or a directory).
    pub(super) fn apply(
        &mut self,
        editor: &mut gix::objs::tree::Editor<'_>,
        path: &[u8],
        state: GitState,
    ) -> Result<(), ExportError> {
        let symlink = matches!(state, GitState::Leaf(EntryKind::Link, _));
        if excluded(path, symlink) {
            if !matches!(state, GitState::Absent | GitState::Dir) {
                self.skipped.push(paths::display(path));
            }
            return Ok(());
        }
        // An ignored path is absent from the export (removed, if an
        // earlier commit held it before the rules changed).
        let state = match state {
            GitState::Absent => GitState::Absent,
            s if self.ignored(path, s == GitState::Dir) => GitState::Absent,
            s => s,
        };
        let git_dir = &self.git_dir;
        let what = || format!("editing the tree at {}", paths::display(path));
        match state {
            GitState::Absent => {
                editor.remove(components(path)).git_with(git_dir, what)?;
            }
            GitState::Dir => {
                // A directory replaces whatever non-directory was there; its
                // entries (which have records of their own) stay.
                match editor.remove_leaf(components(path)) {
                    Ok(_) | Err(gix::objs::tree::editor::Error::CannotRemoveNonLeaf { .. }) => {}
                    Err(e) => return Err(e).git_with(git_dir, what),
                }
            }
            GitState::Leaf(kind, id) => {
                editor
                    .upsert(components(path), kind, id)
                    .git_with(git_dir, what)?;
            }
        }
        Ok(())
    }

    /// Writes the trees `editor` changed; returns the root tree.
    pub(super) fn write_tree(
        &mut self,
        editor: &mut gix::objs::tree::Editor<'_>,
    ) -> Result<ObjectId, ExportError> {
        let repo = self.repo;
        let trees = self.trees.trees;
        let mut n = 0u64;
        let id = editor
            .write(|tree| {
                n += 1;
                let id = repo.write_object(tree)?.detach();
                // Kept for the next turn's edit (`repo::Trees`).
                let mut encoded = Vec::new();
                if gix::objs::WriteTo::write_to(tree, &mut encoded).is_ok() {
                    trees.remember(id, encoded);
                }
                Ok::<_, gix::object::write::Error>(id)
            })
            .git(&self.git_dir, "writing trees")?;
        self.objects += n;
        Ok(id)
    }
}

/// Exports the closed turns `closed` (all after `tip.turn`, oldest first)
/// as commits on top of `tip`, moving `refs/opfs/turns/<N>` and [`BRANCH`]
/// after each. Returns the new tip and the turns exported.
///
/// For each path recorded in turn T, its end-of-T state is its next record
/// after T, or (for a path not recorded since) its current state, read
/// before the records are loaded: a path that has a newer record by then
/// is taken from that record instead (see `history`).
pub(super) fn export_turns(
    ex: &mut Exporter<'_>,
    mut tip: Tip,
    closed: &[Turn],
    progress: &mut dyn FnMut(Progress),
) -> Result<(Tip, Vec<u64>), ExportError> {
    let mut done = Vec::new();
    let Some(newest) = closed.last().map(|t| t.number) else {
        return Ok((tip, done));
    };
    let current = current_states(ex, tip.turn + 1, newest)?;
    (ex.src.commit)();
    // Versions of POINTER_MIN bytes or more are hashed as streams.
    let timeline = ex
        .src
        .reader()
        .timeline_bounded(tip.turn + 1, POINTER_MIN)?;
    super::check_kept(ex, tip.turn + 1)?;
    let by_turn = timeline.by_turn();
    let mut editor = ex.edit_tree(tip.tree)?;
    for t in closed {
        for p in by_turn.get(&t.number).map(Vec::as_slice).unwrap_or(&[]) {
            let g = match timeline.state_at(p, t.number + 1) {
                Some(pre) => ex.git_state_of(p, pre)?,
                None => match current.get(p) {
                    Some(g) => *g,
                    None => {
                        let v = ex.read_current(p)?;
                        ex.git_state(p, &v)?
                    }
                },
            };
            ex.apply(&mut editor, p, g)?;
        }
        tip = commit_turn(ex, &mut editor, tip, t)?;
        done.push(t.number);
        progress(Progress::Turn { turn: t.number });
    }
    Ok((tip, done))
}

/// The current git state of every path recorded in turns `from..=newest`
/// that no record after `newest` covers, read before the records are
/// loaded again.
fn current_states(
    ex: &mut Exporter<'_>,
    from: u64,
    newest: u64,
) -> Result<HashMap<Vec<u8>, GitState>, ExportError> {
    let before = Timeline::load(ex.src.index, from)?;
    let mut current = HashMap::new();
    for p in before.paths_in(from, newest) {
        if before.state_at(&p, newest + 1).is_none() && !excluded(&p, false) {
            // An ignored file is not read (apply() leaves it out anyway).
            if ex.ignore.is_some() {
                let is_dir = matches!(ex.src.backing.lstat(&p),
                    Ok(Some(st)) if st.mode & libc::S_IFMT == libc::S_IFDIR);
                if ex.ignored(&p, is_dir) {
                    current.insert(p, GitState::Absent);
                    continue;
                }
            }
            let v = ex.read_current(&p)?;
            let g = ex.git_state(&p, &v)?;
            current.insert(p, g);
        }
    }
    Ok(current)
}

/// Writes the trees and the commit of turn `t` on top of `parent`, and
/// moves its turn ref and [`BRANCH`] to it (one ref transaction).
fn commit_turn(
    ex: &mut Exporter<'_>,
    editor: &mut gix::objs::tree::Editor<'_>,
    parent: Tip,
    t: &Turn,
) -> Result<Tip, ExportError> {
    let tree = ex.write_tree(editor)?;
    let time = t.ended_at.unwrap_or(t.started_at);
    let commit = ex.commit(tree, Some(parent.commit), turn_message(t), time)?;
    let turn_ref = format!("{TURN_REF_PREFIX}{}", t.number);
    ex.set_refs(&[&turn_ref, BRANCH], commit, time)?;
    Ok(Tip {
        commit,
        tree,
        turn: t.number,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_git_and_aliases_are_excluded() {
        assert!(excluded(b".git", false));
        assert!(excluded(b"sub/.git/config", false));
        assert!(excluded(b"sub/.GIT", false));
        assert!(excluded(b"git~1/x", false));
        assert!(excluded(b".gitmodules", true));
        assert!(!excluded(b".gitmodules", false));
        assert!(!excluded(b".github/workflows/x", false));
        assert!(!excluded(b"caf\xe9", false));
    }
}
