//! opfs-fs: a passthrough FUSE filesystem over a directory fd that calls a
//! [`MutationHook`] before every mutation. It knows nothing about turns,
//! SQLite or blobs.
#![deny(missing_docs)]

mod hook;

pub use hook::{Errno, Mutation, MutationHook, NoHook};

// The public surface the core relies on (implemented in the modules below):
//
// pub struct Options { threads, attr_ttl, entry_ttl, allow_other, fsname }
// pub fn mount(backing: &Path, mountpoint: &Path, hook: Arc<dyn MutationHook>, opts: &Options)
//     -> io::Result<Mount>
// impl Mount { fn controller(&self) -> Controller; fn run(self) -> io::Result<()>; }
// impl Controller (Clone + Send + Sync) {
//     fn quiesce(&self) -> QuiesceGuard;            // blocks new mutations, waits for in-flight ones
//     fn invalidate(&self, paths: &[Vec<u8>]);      // drop kernel caches for these paths (call without the guard)
//     fn unmount(&self) -> io::Result<()>;
// }
