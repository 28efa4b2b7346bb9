//! The seam for the copy-on-write overlay that will serve worktrees. Only
//! the lower layer's interface, [`Lower`], exists yet; nothing here is
//! mounted.
//!
//! A worktree (`docs/design.md`, "Worktrees") is a mount whose **lower**
//! layer is the project as it was at the start of some turn, read-only and
//! provided by the core through [`Lower`] (current files plus recorded
//! pre-images, nothing copied), and whose **upper** layer is a directory in
//! the state dir that takes every change. The overlay will sit beside
//! `passthrough/` and reuse the same pieces: the [`crate::MutationHook`]
//! (so a worktree has turns and rewinds of its own), the quiesce gate and
//! the [`crate::Controller`] (through the crate's internal `Invalidate`
//! trait, so `mount_overlay` hands out the same quiesce, invalidate and
//! unmount), and the reply helper.
//!
//! What the overlay adds to the passthrough, each in its own file:
//!
//! - **Copy-up** (`copy_up.rs`): before the first write or metadata change
//!   of a lower entry, its bytes (with a reflink when the filesystem
//!   offers one), mode, owner and times are copied into the upper
//!   directory, parents first. From then on the upper copy is the entry.
//! - **Whiteouts** (`whiteout.rs`): removing or renaming away a name that
//!   exists in the lower layer records that the name is gone, so it does
//!   not reappear, also after a remount. Where that record lives (a table
//!   in the worktree's index rather than `.wh.` files or 0/0 character
//!   devices, which need `CAP_MKNOD`) is to be fixed in `docs/format.md`.
//! - **Opaque directories** (`opaque.rs`): a directory removed and made
//!   again (`rm -r d; mkdir d`) hides every lower child of `d`.
//! - **Renames** (`rename.rs`) of lower files and directories work, with no
//!   `EXDEV`: a renamed lower directory is copied up (or marked as moved)
//!   and its old name whited out.
//! - **Stable inode numbers** (`node.rs`): the overlay keeps the FUSE
//!   number it handed out at an entry's first lookup and records the
//!   entry's origin ([`Attr::origin`], and its upper inode once copied up),
//!   an origin map in the manner of agentfs. It must not key nodes on the
//!   backing `(dev, ino)` as the passthrough's inode table does: copy-up
//!   gives a file a new backing inode, and its number through the mount
//!   must not change. Each node knows its layer (lower, upper) and, for a
//!   directory, whether it is merged or opaque.

mod lower;

pub use lower::{Attr, DirEntry, Kind, Lower};
