//! Hard links: a file with several names is recorded once per turn by
//! content ([`Linked`]), and a name the mount meets late inherits the
//! history its inode has under other names.

use std::collections::HashMap;

use super::{CaptureError, Inner, Journal};
use crate::paths::PathContext;
use crate::tree::Tree;

/// Files with several hard links whose content was recorded in the open
/// turn, by `(dev, ino)`: another name of the same inode recorded later in
/// the turn (after a write or chmod through the first name) gets this
/// turn-start state (blob, size, permission bits, owner and attributes),
/// not what the turn made of the inode since.
pub(super) type Linked =
    HashMap<(u64, u64), (crate::record::Hash, u64, u32, Option<crate::record::Meta>)>;

impl<T: Tree> Journal<T> {
    /// A file with several hard links may have changed in earlier turns
    /// through another name while this name was unknown to the mount (a link
    /// made before it). Wherever the same inode was recorded under another
    /// name that still names it, this name had the same content then: record
    /// that for this name too, in that turn. Only for a name the mount never
    /// recorded before this turn (one it recorded has a history of its own,
    /// which already says what it was). Each copied record notes `nlink`
    /// (the link count now) as its link count. Cost: two queries, and only
    /// for multiply-linked files (the caller checks the link count).
    pub(super) fn backfill_other_names(
        &self,
        inner: &mut Inner,
        path: &[u8],
        ino: u64,
        nlink: u64,
    ) -> Result<(), CaptureError> {
        inner.apply_pending().at(path)?;
        let turn = inner.turn.number;
        if inner.index.recorded_before(path, turn).at(path)? {
            return Ok(());
        }
        let earlier = inner.index.records_of_inode(ino, turn, path).at(path)?;
        let mut same_inode: HashMap<Vec<u8>, bool> = HashMap::new();
        for (turn, other, pre) in earlier {
            let still = *same_inode.entry(other.clone()).or_insert_with(
                || matches!(self.tree.lstat(&other), Ok(Some(st)) if st.ino == ino),
            );
            if still {
                let meta = inner.index.meta_of(turn, &other).at(path)?;
                inner
                    .index
                    .add_record(turn, path, &pre, meta.as_ref())
                    .at(path)?;
                inner.index.note_links(turn, path, nlink).at(path)?;
            }
        }
        Ok(())
    }
}
