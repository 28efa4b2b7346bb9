//! opfs: reversible workspaces for AI coding agents.
//!
//! The FUSE layer (`opfs-fs`) calls the [`capture::Journal`] before every
//! mutation; the journal records pre-images in the [`store`]; [`rewind`]
//! restores the project to the start of any turn; [`control`] runs the
//! daemon and its socket; the `opfs` binary is a thin CLI over them.
#![deny(missing_docs)]

pub mod capture;
pub mod control;
pub mod daemon;
pub mod diff;
pub mod export;
pub mod failpoint;
pub mod gc;
pub mod history;
pub mod paths;
pub mod record;
pub mod restore;
pub mod rewind;
pub mod sandbox;
pub mod state;
pub mod store;
pub mod tree;
pub mod verify;
pub mod view;
