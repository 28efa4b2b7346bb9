//! The copy-on-write overlay that serves worktrees: [`crate::mount_overlay`]
//! shows an **upper** directory over a read-only **lower** layer
//! ([`Lower`], addressed by path; for a worktree, the project as it was at
//! the start of a turn, provided by the core).
//!
//! The overlay sits beside `passthrough/` and reuses its pieces: the
//! [`crate::MutationHook`] (every change of the upper directory is
//! reported with its upper-relative path, as the passthrough reports
//! changes of its backing directory, so the core journals the upper
//! directory as a plain tree and a rewind of it restores the merged view
//! exactly), the quiesce gate, the [`crate::Controller`] (through the
//! crate's `Invalidate` trait, in `cache.rs`), the handles, the reply
//! helper and the `sys` wrappers.
//!
//! **The upper layer is a plain directory tree** and the only thing that
//! changes. Its names mirror the merged view's: an entry's merged path is
//! its upper path and, where a lower entry shows through, its lower path
//! (renames copy the whole source up, so nothing is ever found by a
//! redirect).
//!
//! - `state.rs`: the state, name resolution (upper over lower, through
//!   whiteouts and opaque directories), lookup, attributes.
//! - `node.rs`: nodes and their FUSE numbers, stable across copy-up
//!   (indexed by lower origin, then by upper `(dev, ino)`).
//! - `rules.rs` (public): the visibility rules, pure (whiteouts, opaque
//!   directories, what shows through, the reserved names, merged
//!   listings); the core's worktree history and merge read the upper
//!   layer through the same module.
//! - `whiteout.rs`: making and removing whiteouts (`.wh.NAME`) and the
//!   opaque marker (`.wh..wh..opq`), merged listings.
//! - `copy_up.rs`: atomic copy-up, parents first; whole subtrees for
//!   renames.
//! - `ns.rs`: create-like operations, unlink, rmdir; `rename.rs`: renames.
//! - `io.rs`: open, create, read/write and the rest of file I/O (without
//!   OPEN, `FUSE_NO_OPEN_SUPPORT`: requests with handle 0); `dir.rs`:
//!   directory handles and merged listings; `meta.rs`: getattr, setattr,
//!   readlink, xattrs, statfs; `handle.rs`: handles.
//! - The requests are decoded and answered by the crate's one front end
//!   (`front.rs`): `state.rs` says what the overlay asks for at init, and
//!   `ns.rs`, `meta.rs`, `io.rs` and `dir.rs` implement its operation
//!   traits; `cache.rs`: invalidation and write-back for the controller.
//!
//! **Decisions** (user-visible ones also in `fs/README.md`, "Overlay"):
//!
//! - *Whiteouts are plain files* (`d/.wh.x` hides the lower `d/x`;
//!   `d/.wh..wh..opq` makes `d` opaque), the aufs / fuse-overlayfs
//!   unprivileged convention: no `mknod` of 0/0 devices, no trusted
//!   xattrs, and the core journals them like any file. (The earlier plan
//!   of a table in the worktree's index was dropped: the upper directory
//!   alone then describes the merged view, and a rewind of it is exact.)
//!   The merged view never shows upper names starting with `.wh.`;
//!   creating or renaming to one is `EINVAL`. Lower names starting with
//!   `.wh.` show but are read only (`EROFS`).
//! - *A whiteout hides only the lower entry*: an upper entry of the same
//!   name shows regardless. So every multi-step change is ordered to be
//!   crash-safe: the whiteout is made before the upper entry goes, and
//!   removed only after the entry replacing it (and, for a directory over
//!   a lower directory, its opaque marker) exists.
//! - *Copy-up* happens before the first change of a lower entry (open for
//!   writing, truncate, setattr of mode/owner/times/size, xattr set, link,
//!   rename), through a temporary file in the work directory renamed into
//!   place, so a crash never shows a half-copied file. A file's bytes are
//!   shared with `FICLONE` where the filesystem has reflinks, from a
//!   descriptor the lower layer lends (`Lower::with_file`), else copied.
//! - *Renames* of lower files and directories copy the source up (a
//!   directory with its whole subtree: the cost is the subtree's bytes; a
//!   redirect scheme is a later optimisation) and white out the old name.
//! - *Inode numbers*: a node keeps its FUSE number and `st_ino` across
//!   copy-up for the life of the mount. After a remount a copied-up file
//!   shows its upper inode number. Copying up a lower hard link links the
//!   copy at the node's other known names; a name the kernel never looked
//!   up breaks off (as overlayfs without `index`).
//! - A cached node with an upper entry holds an `O_PATH` fd on it, within
//!   the passthrough's fd budget ([`crate::Options::inode_fds`]): past it,
//!   fds of named nodes are closed and reopened by name when needed.

mod cache;
mod copy_up;
mod dir;
mod handle;
mod io;
mod lower;
mod meta;
mod node;
mod ns;
mod rename;
pub mod rules;
mod state;
mod whiteout;

pub use lower::{Attr, DirEntry, Kind, Lent, Lower, LowerFile, LowerOpen};

pub(crate) use state::{Settings, State};
