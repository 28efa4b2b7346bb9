//! The store: the blob directory and the SQLite index of one project.

pub mod blob;
pub mod index;

pub use blob::{BlobError, BlobStore};
pub use index::{Index, IndexError, Turn, TurnKind};
