//! The daemon's control socket.
//!
//! One daemon serves one project at one mountpoint. It holds an exclusive
//! `flock` on the state dir's `lock` file for its whole life (so a second
//! mount of the same project, or a direct CLI operation on the state dir,
//! is refused while it runs), and answers requests on `control.sock`: one
//! JSON object per line in each direction ([`protocol`]). [`server`] is the
//! daemon's side; [`client::Project`] is everyone else's, and the one place
//! that chooses between the daemon and the state dir.

pub mod client;
pub mod protocol;
pub mod server;

pub use client::{ClientError, Project};
pub use protocol::{FailureKind, Request, Response, Status};
