//! Restore: write target states back into the project, recorded as a turn.
//!
//! Rewind uses it to go back to the start of a turn; a worktree merge will
//! use it to bring a worktree's states into the project. The pieces:
//!
//! - [`plan`]: from `(path, target)` pairs and what the project holds now,
//!   a [`PathPlan`] per path that needs steps;
//! - [`preflight`]: the checks that move a path from the plan to the
//!   conflicts before anything is written;
//! - [`space`]: the room check (state dir and project) before anything
//!   is written;
//! - `links`: names that were hard links of one inode when the turn began
//!   become one inode's names again ([`Step::Link`]);
//! - `repo`: the project's repository, moved from `.git` through the
//!   mount, is never removed;
//! - [`apply`]: the executor;
//! - [`conflict`]: [`Conflict`] and its typed [`ConflictReason`];
//! - [`markers`]: git-style conflict markers for text files (`--markers`).

pub mod apply;
pub mod conflict;
mod links;
pub mod markers;
pub mod plan;
pub mod preflight;
mod repo;
pub mod space;

pub(crate) use apply::apply;
pub use conflict::{Conflict, ConflictReason, FailedStep};
pub use plan::{describe, PathPlan, StateKind, Step};
