//! Test helpers shared by the integration tests of both packages
//! (`tests/` of `opfs`, `fs/tests/` of `opfs-fs`). A dev-dependency only:
//! nothing here is part of either library.
//!
//! What lives here is what both test suites need. Helpers that drive the
//! `opfs` binary (the `Fixture`, the tree manifest) need
//! `CARGO_BIN_EXE_opfs` and stay in `tests/common/mod.rs`.

pub mod dirlower;
pub mod mountinfo;

pub use dirlower::DirLower;
pub use mountinfo::{is_mounted, mount_points, wait_mount_state};
