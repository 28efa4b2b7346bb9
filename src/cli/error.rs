//! How a command fails, and the exit code each kind maps to
//! (`docs/errors.md`): usage 2, failure 1, conflict 3, and a broken pipe 0
//! (`opfs diff 3 | head` ends quietly).

use std::io;

use opfs::control::{ClientError, FailureKind};

/// The kinds of failure, each with its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad arguments, an unknown turn or path: exit 2.
    Usage,
    /// The operation failed: exit 1.
    Failure,
    /// A rewind left paths unrestored: exit 3.
    Conflict,
    /// Stdout was closed by the reader: exit 0, nothing more is printed.
    BrokenPipe,
}

/// A failed command. Without a message the command has already said
/// everything (a verify that found problems, a rewind with conflicts).
#[derive(Debug)]
pub struct CommandError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// What to print (`opfs: MESSAGE` on stderr, and a JSON error object
    /// with `--json`), if anything.
    pub message: Option<String>,
}

impl CommandError {
    /// Bad usage, with its message.
    pub fn usage(message: impl Into<String>) -> CommandError {
        CommandError {
            kind: ErrorKind::Usage,
            message: Some(message.into()),
        }
    }

    /// A failure, with its message.
    pub fn failure(message: impl Into<String>) -> CommandError {
        CommandError {
            kind: ErrorKind::Failure,
            message: Some(message.into()),
        }
    }

    /// A failure or conflict the command's output already reported.
    pub fn reported(kind: ErrorKind) -> CommandError {
        CommandError {
            kind,
            message: None,
        }
    }

    /// The process exit code.
    pub fn exit_code(&self) -> i32 {
        match self.kind {
            ErrorKind::Usage => 2,
            ErrorKind::Failure => 1,
            ErrorKind::Conflict => 3,
            ErrorKind::BrokenPipe => 0,
        }
    }
}

/// A failure whose message is the error's own.
pub fn failure(e: impl std::fmt::Display) -> CommandError {
    CommandError::failure(e.to_string())
}

/// Writing the output failed.
impl From<io::Error> for CommandError {
    fn from(e: io::Error) -> CommandError {
        if e.kind() == io::ErrorKind::BrokenPipe {
            CommandError::reported(ErrorKind::BrokenPipe)
        } else {
            CommandError::failure(format!("cannot write the output: {e}"))
        }
    }
}

impl From<ClientError> for CommandError {
    fn from(e: ClientError) -> CommandError {
        match e.kind() {
            FailureKind::Usage => CommandError::usage(e.to_string()),
            FailureKind::Failure => CommandError::failure(e.to_string()),
        }
    }
}

impl From<opfs::worktree::life::WorktreeCmdError> for CommandError {
    fn from(e: opfs::worktree::life::WorktreeCmdError) -> CommandError {
        if e.is_usage() {
            CommandError::usage(e.to_string())
        } else {
            CommandError::failure(e.to_string())
        }
    }
}

impl From<opfs::history::HistoryError> for CommandError {
    fn from(e: opfs::history::HistoryError) -> CommandError {
        if e.is_usage() {
            CommandError::usage(e.to_string())
        } else {
            CommandError::failure(e.to_string())
        }
    }
}
