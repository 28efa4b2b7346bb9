//! The overlay's state, what it asks of the kernel at init
//! ([`crate::front::Caps`]), name resolution (upper over lower, through
//! whiteouts and opaque directories) and attributes.
//!
//! **Paths.** Renames copy their source up completely (see `rename.rs`), so
//! an entry's merged path is also its upper path and, when a lower entry
//! shows through, its lower path. The hook is told upper-relative paths,
//! which are therefore the node paths.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fuser::{Errno, FileAttr, INodeNo, InitFlags};

use super::handle::{DirItem, OHandle};
use super::lower::{Attr, Kind, Lower};
use super::node::{Found, NodeInfo, Nodes, Upper};
use super::rules;
use super::whiteout::{self, whiteout_name};
use crate::errno::errno;
use crate::front::{Caps, Granted};
use crate::handle::Handles;
use crate::hook::{Mutation, MutationHook};
use crate::inode::{child, InodeKey};
use crate::passthrough::attr::{attr, encode_dev};
use crate::quiesce::Gate;
use crate::reply::{Entry, Res};
use crate::report::Report;
use crate::sys;

/// State shared by the overlay's callbacks and the [`crate::Controller`].
pub(crate) struct State {
    pub(super) nodes: Nodes,
    pub(super) handles: Handles<OHandle>,
    pub(crate) gate: Arc<Gate>,
    pub(super) hook: Arc<dyn MutationHook>,
    pub(super) lower: Arc<dyn Lower>,
    /// The scratch directory for atomic copy-up (real fd, not `O_PATH`).
    pub(super) work: OwnedFd,
    /// Serialises changes of the upper namespace (copy-up, create, remove,
    /// rename), so two requests never copy the same entry up at once.
    pub(super) ns: Mutex<()>,
    /// Names of temporary copy-up files.
    pub(super) tmp_seq: AtomicU64,
    pub(super) attr_ttl: Duration,
    pub(super) entry_ttl: Duration,
    /// How long the kernel may cache a miss (zero: `ENOENT`, uncached).
    pub(super) negative_ttl: Duration,
    /// Asked for at init where the settings allow:
    /// `FUSE_NO_OPENDIR_SUPPORT`, `FUSE_NO_OPEN_SUPPORT` (`io.rs`, "No
    /// OPEN").
    pub(super) wanted: InitFlags,
    /// Which of `wanted` the kernel took. `FUSE_NO_OPEN_SUPPORT`: OPEN,
    /// FLUSH and CREATE answer `ENOSYS`, file requests come with handle 0.
    /// `FUSE_NO_OPENDIR_SUPPORT`: OPENDIR answers `ENOSYS`, READDIR comes
    /// with handle 0 and reads `listings`.
    pub(super) granted: Granted,
    /// Without directory handles: the merged listing of each directory
    /// being read, taken at offset 0 and kept until the read reaches its
    /// end or the directory is forgotten (see `dir.rs`, `dir_entries`).
    pub(super) listings: Mutex<HashMap<u64, Arc<Vec<DirItem>>>>,
}

/// The settings `mount_overlay` hands to [`State::new`].
pub(crate) struct Settings {
    /// Most upper fds the nodes keep open (see `node.rs`).
    pub(crate) inode_fds: usize,
    pub(crate) attr_ttl: Duration,
    pub(crate) entry_ttl: Duration,
    pub(crate) negative_ttl: Duration,
    pub(crate) no_opendir: bool,
    /// Ask for `FUSE_NO_OPEN_SUPPORT` (see [`State::no_open`]).
    pub(crate) no_open: bool,
}

/// The attributes of a lower entry that was not copied up.
pub(super) fn lower_attr(ino: u64, a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: a.mtime,
        mtime: a.mtime,
        ctime: a.ctime,
        crtime: std::time::UNIX_EPOCH,
        kind: whiteout::file_type(a.kind),
        perm: (a.perm & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: encode_dev(a.rdev),
        blksize: 4096,
        flags: 0,
    }
}

impl State {
    /// The overlay over `lower` with the upper root `upper` (an `O_PATH`
    /// directory fd) and the scratch directory `work`.
    pub(crate) fn new(
        upper: OwnedFd,
        work: OwnedFd,
        lower: Arc<dyn Lower>,
        hook: Arc<dyn MutationHook>,
        settings: &Settings,
    ) -> std::io::Result<State> {
        let st = sys::fstat(upper.as_fd())?;
        let root_lower = lower.getattr(b"")?.filter(|a| a.kind == Kind::Dir);
        let root = Upper {
            fd: Arc::new(upper),
            key: InodeKey::of(&st),
        };
        Ok(State {
            nodes: Nodes::new(root, root_lower, settings.inode_fds),
            handles: Handles::default(),
            gate: Arc::default(),
            hook,
            lower,
            work,
            ns: Mutex::new(()),
            tmp_seq: AtomicU64::new(0),
            attr_ttl: settings.attr_ttl,
            entry_ttl: settings.entry_ttl,
            negative_ttl: settings.negative_ttl,
            wanted: [
                (settings.no_opendir, InitFlags::FUSE_NO_OPENDIR_SUPPORT),
                (settings.no_open, InitFlags::FUSE_NO_OPEN_SUPPORT),
            ]
            .into_iter()
            .filter(|(on, _)| *on)
            .fold(InitFlags::empty(), |all, (_, flag)| all | flag),
            granted: Granted::default(),
            listings: Mutex::default(),
        })
    }

    /// The node `ino`; `ESTALE` if the table no longer has it.
    pub(super) fn info(&self, ino: u64) -> Res<NodeInfo> {
        self.nodes.info(ino).ok_or(Errno::ESTALE)
    }

    /// The path of `ino`; `ENOENT` for a node without a name (a mutation
    /// there could not be recorded).
    pub(super) fn path(&self, ino: u64) -> Res<Vec<u8>> {
        self.nodes.path(ino).ok_or(Errno::ENOENT)
    }

    /// Reports `make(path)` after the fact for every known path of `ino`,
    /// with its upper attributes as they are now.
    pub(super) fn after_inode(&self, ino: u64, make: fn(&[u8]) -> Mutation<'_>) {
        let paths = self.nodes.paths(ino);
        if paths.is_empty() {
            return;
        }
        let now = self
            .nodes
            .info(ino)
            .and_then(|n| n.upper)
            .and_then(|u| sys::fstat(u.fd.as_fd()).ok());
        for path in paths {
            self.after(make(&path), now.as_ref());
        }
    }

    /// True when the lower children of the directory node `n` show: it has
    /// a lower directory and its upper one (if any) is not opaque.
    pub(super) fn lower_visible(&self, n: &NodeInfo) -> Res<bool> {
        let lower_dir = n.lower.as_ref().is_some_and(|l| l.kind == Kind::Dir);
        rules::children_show(lower_dir, n.upper.as_ref().map(|_| true), || {
            n.upper
                .as_ref()
                .map_or(Ok(false), |up| whiteout::opaque(up.fd.as_fd()))
        })
    }

    /// What `parent/name` is in the merged view: the upper entry (not a
    /// reserved name) and the lower entry that shows through. Reserved
    /// names never resolve to an upper entry; a lower one shows.
    pub(super) fn resolve(&self, parent: u64, name: &[u8]) -> Res<Found> {
        self.resolve_hinted(parent, name, None)
    }

    /// [`State::resolve`], with the lower layer's answer for `name` when
    /// the caller already has it (`hint`: what [`Lower::lookup_all`] said
    /// for it; the lower layer never changes, so it is still true).
    pub(super) fn resolve_hinted(
        &self,
        parent: u64,
        name: &[u8],
        hint: Option<&Option<Attr>>,
    ) -> Res<Found> {
        let dir = self.info(parent)?;
        if dir.kind != libc::S_IFDIR {
            return Err(Errno::ENOTDIR);
        }
        let cname = sys::cname(name).map_err(errno)?;
        let up = dir.upper.as_ref();
        let found = rules::resolve(
            name,
            || match up {
                Some(up) => match sys::open_path(up.fd.as_fd(), &cname) {
                    Ok(fd) => {
                        let st = sys::fstat(fd.as_fd()).map_err(errno)?;
                        Ok(Some((fd, st)))
                    }
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
                    Err(e) => Err(errno(e)),
                },
                None => Ok(None),
            },
            || match up {
                Some(up) => whiteout::has(up.fd.as_fd(), &whiteout_name(name)),
                None => Ok(false),
            },
            || self.lower_visible(&dir),
            || match hint {
                Some(known) => Ok(known.clone()),
                None => {
                    let path = self.path(parent)?;
                    self.lower.lookup(&path, name).map_err(errno)
                }
            },
        )?;
        let (upper, lower) = (found.upper, found.lower);
        Ok(Found { upper, lower })
    }

    /// True when `parent/name` exists in the merged view.
    pub(super) fn exists(&self, parent: u64, name: &[u8]) -> Res<bool> {
        let f = self.resolve(parent, name)?;
        Ok(f.upper.is_some() || f.lower.is_some())
    }

    /// Looks `parent/name` up and counts one lookup of its node.
    pub(super) fn lookup_entry(&self, parent: u64, name: &[u8]) -> Res<FileAttr> {
        self.lookup_entry_hinted(parent, name, None)
    }

    /// [`State::lookup_entry`] with a lower answer already known (see
    /// [`State::resolve_hinted`]).
    pub(super) fn lookup_entry_hinted(
        &self,
        parent: u64,
        name: &[u8],
        hint: Option<&Option<Attr>>,
    ) -> Res<FileAttr> {
        let found = self.resolve_hinted(parent, name, hint)?;
        let ino = self
            .nodes
            .lookup(parent, name, found)
            .ok_or(Errno::ENOENT)?;
        match self.stat(ino) {
            Ok(a) => Ok(a),
            Err(e) => {
                self.nodes.forget(ino, 1);
                Err(e)
            }
        }
    }

    /// The entry reply for `attr`, with the mount's TTLs.
    pub(super) fn entry(&self, attr: FileAttr) -> Entry {
        Entry {
            attr,
            attr_ttl: self.attr_ttl,
            entry_ttl: self.entry_ttl,
        }
    }

    /// The attributes of `ino`: its upper entry's, else its lower entry's.
    pub(super) fn stat(&self, ino: u64) -> Res<FileAttr> {
        let n = self.info(ino)?;
        match (&n.upper, &n.lower) {
            (Some(up), _) => Ok(attr(ino, &sys::fstat(up.fd.as_fd()).map_err(errno)?)),
            (None, Some(l)) => Ok(lower_attr(ino, l)),
            (None, None) => Err(Errno::ESTALE),
        }
    }

    /// The upper directory of `ino` and its path, copying it up first if it
    /// is only in the lower layer.
    pub(super) fn upper_dir(&self, ino: u64) -> Res<(Arc<OwnedFd>, Vec<u8>)> {
        let n = self.info(ino)?;
        if n.kind != libc::S_IFDIR {
            return Err(Errno::ENOTDIR);
        }
        let fd = self.copy_up(ino, None)?;
        Ok((fd, self.path(ino)?))
    }

    /// The path of `parent/name`.
    pub(super) fn child_path(&self, parent: u64, name: &[u8]) -> Res<Vec<u8>> {
        Ok(child(&self.path(parent)?, name))
    }
}

impl Caps for State {
    const TRACE: &'static str = "overlay ";
    /// READDIRPLUS only at the start of a listing or after a lookup in
    /// it; parallel lookups and readdirs in one directory.
    const ALWAYS: InitFlags = InitFlags::FUSE_READDIRPLUS_AUTO
        .union(InitFlags::FUSE_DO_READDIRPLUS)
        .union(InitFlags::FUSE_PARALLEL_DIROPS);

    /// No OPEN (`io.rs`, "No OPEN") and no OPENDIR, every listing cached
    /// until invalidated (only this mount and a rewind of the worktree
    /// change a merged listing), as the settings say.
    fn wanted(&self) -> InitFlags {
        self.wanted
    }

    fn granted(&self) -> &Granted {
        &self.granted
    }
}

impl Report for State {
    fn hook(&self) -> &dyn MutationHook {
        self.hook.as_ref()
    }

    fn paths(&self, ino: u64) -> Vec<Vec<u8>> {
        self.nodes.paths(ino)
    }

    fn reported(&self, ino: u64) -> Option<(u64, bool)> {
        self.nodes.reported(ino)
    }

    fn set_reported(&self, ino: u64, epoch: u64, ranged: bool) {
        self.nodes.set_reported(ino, epoch, ranged);
    }

    /// Never: the upper layer changes through this mount alone.
    fn changed_behind(&self, _ino: u64, _fd: BorrowedFd<'_>) -> bool {
        false
    }
}
