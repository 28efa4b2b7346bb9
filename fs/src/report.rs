//! Telling the hook about a node's mutations: what the passthrough and
//! the overlay share.
//!
//! Each filesystem knows its hook and the paths of its nodes (its own
//! node table); [`Report`] builds the rest on those two once: asking the
//! hook before a mutation of every known path of a node, before a byte
//! range of it, telling it what a mutation left, whether a file is
//! written as ranges (`MutationHook::range_min`), and the check before a
//! handle's write (the range, or `Content` once per hook epoch).

use std::os::fd::BorrowedFd;

use fuser::Errno;
use log::trace;

use crate::errno::errno;
use crate::front::Caps;
use crate::handle::Handle;
use crate::hook::{Mutation, MutationHook};
use crate::reply::Res;
use crate::sys;

/// The hook as a filesystem reports to it, node by node.
pub(crate) trait Report: Caps {
    /// The hook.
    fn hook(&self) -> &dyn MutationHook;

    /// Every known path of `ino`. A node with no known name was unlinked
    /// through the mount: its mutation changes no path, so there is
    /// nothing to report.
    fn paths(&self, ino: u64) -> Vec<Vec<u8>>;

    /// Without handles (`FUSE_NO_OPEN_SUPPORT`): the hook epoch in which
    /// the content of `ino` was last reported, and whether as ranges.
    fn reported(&self, ino: u64) -> Option<(u64, bool)>;

    /// Records that the content of `ino` was reported in `epoch`.
    fn set_reported(&self, ino: u64, epoch: u64, ranged: bool);

    /// True when the file `ino` (open as `fd`) is not as the layer last
    /// left it: something changed it behind the mount since.
    fn changed_behind(&self, ino: u64, fd: BorrowedFd<'_>) -> bool;

    /// Asks the hook before `mutation`; its errno refuses the mutation.
    fn before(&self, mutation: Mutation<'_>) -> Res<()> {
        trace!("{}hook {mutation:?}", Self::TRACE);
        self.hook().before(&mutation).map_err(Errno::from_i32)
    }

    /// Tells the hook `mutation` reached the directory served, which now
    /// holds `now` at the path (if known).
    fn after(&self, mutation: Mutation<'_>, now: Option<&libc::stat>) {
        self.hook().after(&mutation, now);
    }

    /// Asks the hook before `make(path)` for every known path of `ino`.
    fn before_inode(&self, ino: u64, make: fn(&[u8]) -> Mutation<'_>) -> Res<()> {
        for path in self.paths(ino) {
            self.before(make(&path))?;
        }
        Ok(())
    }

    /// Asks the hook before [`Mutation::Range`] of `[offset, offset +
    /// len)` for every known path of `ino`.
    fn before_range(&self, ino: u64, offset: u64, len: u64) -> Res<()> {
        for path in self.paths(ino) {
            self.before(Mutation::Range {
                path: &path,
                offset,
                len,
            })?;
        }
        Ok(())
    }

    /// True when the file behind `fd` is written as ranges (see
    /// `MutationHook::range_min`). Costs an `fstat` only when range capture
    /// is on.
    fn ranged(&self, fd: BorrowedFd<'_>) -> bool {
        let min = self.hook().range_min();
        min != u64::MAX
            && sys::fstat(fd).is_ok_and(|st| {
                st.st_mode & libc::S_IFMT == libc::S_IFREG
                    && st.st_nlink == 1
                    && st.st_size as u64 >= min
            })
    }

    /// Called before `[offset, offset + len)` of file `ino` changes through
    /// a request without a handle, under the gate. The first such request
    /// of an epoch decides, as an open for writing would, whether the file
    /// is written as ranges (`fd` is an fd of it) and reports `Content` or
    /// the range; later ones in the epoch report only their ranges (ranged)
    /// or nothing. Reported whole in this epoch: again only when the file
    /// was changed behind the mount since the layer last left it, so the
    /// hook can keep that change before this one overwrites it. Reading the
    /// epoch under the gate means no turn boundary can fall between the
    /// check and the change.
    fn content_before(&self, ino: u64, fd: BorrowedFd<'_>, offset: u64, len: u64) -> Res<()> {
        let epoch = self.hook().epoch();
        match self.reported(ino) {
            Some((e, true)) if e == epoch => self.before_range(ino, offset, len),
            Some((e, false)) if e == epoch => {
                if self.changed_behind(ino, fd) {
                    self.before_inode(ino, |path| Mutation::Content { path })?;
                }
                Ok(())
            }
            _ => {
                let ranged = self.ranged(fd);
                if ranged {
                    self.before_range(ino, offset, len)?;
                } else {
                    self.before_inode(ino, |path| Mutation::Content { path })?;
                }
                self.set_reported(ino, epoch, ranged);
                Ok(())
            }
        }
    }

    /// A handle of `ino` for writing, `fd` reopened with `flags`, in hook
    /// epoch `epoch`: ranged when the file is written as ranges and the
    /// open does not truncate it (nothing changes at the open itself; each
    /// write reports its range), else after asking the hook before
    /// `Content` of every known path. Under the quiesce gate.
    fn open_writer(&self, fd: BorrowedFd<'_>, ino: u64, flags: i32, epoch: u64) -> Res<Handle> {
        if flags & libc::O_TRUNC == 0 && self.ranged(fd) {
            let fd = sys::reopen(fd, flags).map_err(errno)?;
            return Ok(Handle::new_ranged(fd, ino, epoch));
        }
        self.before_inode(ino, |path| Mutation::Content { path })?;
        let fd = sys::reopen(fd, flags).map_err(errno)?;
        Ok(Handle::new(fd, ino, epoch))
    }

    /// Called before `[offset, offset + len)` of `h`'s file changes: the
    /// range for a ranged handle, else `Content` at the handle's first
    /// change of each hook epoch.
    fn write_check(&self, h: &Handle, offset: u64, len: u64) -> Res<()> {
        h.mark_dirty();
        if h.ranged {
            return self.before_range(h.ino, offset, len);
        }
        let epoch = self.hook().epoch();
        if h.epoch() != epoch {
            self.before_inode(h.ino, |path| Mutation::Content { path })?;
            h.set_epoch(epoch);
        }
        Ok(())
    }
}
