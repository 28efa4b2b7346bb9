//! Renames: a directory's move changes every path under both names, so
//! the capture before it and the fingerprints after it walk the subtree.

use std::os::fd::BorrowedFd;

use opfs_fs::Parents;

use super::{CaptureError, Journal};
use crate::paths::{self, PathContext};
use crate::record::{Fingerprint, Stat};
use crate::tree::Tree;

impl<T: Tree> Journal<T> {
    /// Records what a rename changes: `from` and `to` themselves and, for a
    /// directory, every path under both names (the subtree's paths under
    /// `from` disappear, the same relative paths under `to` appear). With
    /// `exchange` the same holds the other way round.
    pub fn capture_rename(
        &self,
        from: &[u8],
        to: &[u8],
        exchange: bool,
    ) -> Result<(), CaptureError> {
        self.capture_rename_in(from, to, exchange, None)
    }

    /// [`Journal::capture_rename`], reading `from` and `to` through the
    /// directories holding them when the FUSE layer handed them over
    /// (`MutationHook::before_in`; [`Tree::lstat_open_born_in`]). The
    /// subtree of a moved directory is still read by path.
    pub(super) fn capture_rename_in(
        &self,
        from: &[u8],
        to: &[u8],
        exchange: bool,
        parents: Option<Parents<'_>>,
    ) -> Result<(), CaptureError> {
        let from_dir = parents.map(|p| p.from);
        let to_dir = parents.and_then(|p| p.to);
        let mut inner = self.lock();
        self.note_repo_move(&mut inner, from, to)?;
        if exchange {
            self.note_repo_move(&mut inner, to, from)?;
        }
        self.capture_in(&mut inner, from, from_dir)?;
        if exchange {
            self.capture_in(&mut inner, to, to_dir)?;
        } else {
            // Whatever `to` holds loses its name: a large file may be kept.
            self.capture_leaving(&mut inner, to, to_dir, "replace")?;
        }
        self.capture_subtree_move(&mut inner, from, to, from_dir)?;
        if exchange {
            self.capture_subtree_move(&mut inner, to, from, to_dir)?;
        }
        Ok(())
    }

    /// Notes (in the index, before the rename runs) a move of the
    /// project's repository from `src` to `dst`: `src` is the root `.git`
    /// or a path the repository was moved to before. A rewind never removes
    /// a repository so moved (`restore::repo`). Cost: one indexed lookup per
    /// rename.
    fn note_repo_move(
        &self,
        inner: &mut super::Inner,
        src: &[u8],
        dst: &[u8],
    ) -> Result<(), CaptureError> {
        if self.excludes(dst) {
            return Ok(());
        }
        if src == b".git" || inner.index.repo_moved_to(src).at(src)? {
            inner.index.note_repo_move(inner.turn.number, dst).at(dst)?;
        }
        Ok(())
    }

    /// For every path under directory `src`, records it and its counterpart
    /// under `dst`. Cost: one stat (and for files one read) per entry.
    /// `src_dir`: the directory holding `src`, when the layer gave it.
    fn capture_subtree_move(
        &self,
        inner: &mut super::Inner,
        src: &[u8],
        dst: &[u8],
        src_dir: Option<BorrowedFd<'_>>,
    ) -> Result<(), CaptureError> {
        // Every path under an excluded directory is excluded: a move
        // between two excluded names records nothing.
        if self.excludes(src) && self.excludes(dst) {
            return Ok(());
        }
        match self.tree.lstat_in(src, src_dir).at(src)? {
            Some(st) if st.file_type() == libc::S_IFDIR => {}
            _ => return Ok(()),
        }
        let mut stack = vec![Vec::new()];
        while let Some(rel) = stack.pop() {
            let dir = paths::join(src, &rel);
            let names = self.tree.list_dir(&dir).at(&dir)?;
            for name in names {
                let sub = paths::join(&rel, &name);
                let from_path = paths::join(src, &sub);
                self.capture_by(inner, &from_path, "rename")?;
                self.capture_by(inner, &paths::join(dst, &sub), "replace")?;
                if let Some(st) = self.tree.lstat(&from_path).at(&from_path)? {
                    if st.file_type() == libc::S_IFDIR {
                        stack.push(sub);
                    }
                }
            }
        }
        Ok(())
    }

    /// Remembers the paths a finished rename left, under both names and, for
    /// directories, at every depth.
    /// `now`: the layer's stat of the entry at `to` (a plain rename only;
    /// `from` is then absent).
    pub(super) fn remember_rename(
        &self,
        from: &[u8],
        to: &[u8],
        exchange: bool,
        now: Option<&libc::stat>,
    ) {
        let (from_is_dir, to_is_dir) = match now {
            Some(st) if !exchange => {
                let st = Stat::from_raw(st);
                let mut inner = self.lock();
                if !self.excludes(from) {
                    inner.fingerprints.left(from, Fingerprint::of(None));
                }
                if !self.excludes(to) {
                    inner.fingerprints.left(to, Fingerprint::of(Some(&st)));
                }
                (
                    false,
                    st.file_type() == libc::S_IFDIR && !(self.excludes(to) && self.excludes(from)),
                )
            }
            _ => (self.remember_is_dir(from), self.remember_is_dir(to)),
        };
        let mut roots = Vec::new();
        if to_is_dir {
            roots.push((to, from));
        }
        if exchange && from_is_dir {
            roots.push((from, to));
        }
        for (now, other) in roots {
            let mut stack = vec![Vec::new()];
            while let Some(rel) = stack.pop() {
                let Ok(names) = self.tree.list_dir(&paths::join(now, &rel)) else {
                    continue;
                };
                for name in names {
                    let sub = paths::join(&rel, &name);
                    let here = paths::join(now, &sub);
                    self.remember(&here);
                    self.remember(&paths::join(other, &sub));
                    if matches!(self.tree.lstat(&here), Ok(Some(st)) if st.file_type() == libc::S_IFDIR)
                    {
                        stack.push(sub);
                    }
                }
            }
        }
    }
}
