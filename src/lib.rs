//! opfs: reversible workspaces for AI coding agents.
//!
//! The FUSE layer (`opfs-fs`) calls the [`capture::Journal`] before every
//! mutation; the journal records pre-images in the [`store`]; [`rewind`]
//! restores the project to the start of any turn; [`control`] runs the
//! daemon and its socket; the `opfs` binary is a thin CLI over them.
//!
//! # No `unsafe`
//!
//! This crate (the library and the `opfs` binary) is
//! `#![forbid(unsafe_code)]`: system calls go through `rustix` or
//! [`tree::Dir`]'s methods (which use `rustix`), and `libc` is used only
//! for constants and types (errnos, open flags, mode bits, `stat`).
//! `opfs-fs` (the FUSE layer) keeps its own `unsafe`, mostly in its `sys`
//! module, for calls `rustix` does not cover; nothing here may add any.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
// The library never prints: only the CLI talks to the terminal.
#![cfg_attr(not(test), warn(clippy::print_stdout, clippy::print_stderr))]

pub mod capture;
pub mod control;
pub mod daemon;
pub mod diff;
pub mod export;
pub mod failpoint;
pub mod gc;
pub mod history;
pub mod integrate;
pub mod mcp;
pub mod paths;
pub mod record;
pub mod remote;
pub mod restore;
pub mod rewind;
pub mod sandbox;
pub mod state;
pub mod store;
pub mod tree;
pub mod verify;
pub mod view;
pub mod worktree;
