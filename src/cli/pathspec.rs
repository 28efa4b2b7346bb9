//! Paths as typed on the command line, relative to where the user stands,
//! as with git: inside the project or its mountpoint, `log PATH` and
//! `diff N PATH` take PATH relative to the current directory (or `-C`),
//! and so does `show N:./PATH` (`N:PATH` without `./` or `../` is from
//! the project root, as git's `REV:PATH` is).

use std::os::unix::ffi::OsStrExt;

use opfs::history;
use opfs::state::{self, registry};
use opfs::store::StateDir;

use crate::cli::error::CommandError;
use crate::cli::Ctx;

/// Where `-C` (or the current directory) lies below the project root, as
/// project-relative bytes (empty at the root or outside the project and
/// its mountpoint).
pub fn cwd_prefix(ctx: &Ctx, st: &StateDir) -> Vec<u8> {
    let here = state::absolute(&ctx.dir());
    let roots = registry::recorded_mountpoint(st)
        .into_iter()
        .chain(std::iter::once(st.project.clone()));
    for root in roots {
        if let Ok(rest) = here.strip_prefix(state::absolute(&root)) {
            return rest.as_os_str().as_bytes().to_vec();
        }
    }
    Vec::new()
}

/// `text` taken relative to `prefix` (a directory below the root), with
/// `.` and `..` resolved; then checked as [`history::parse_path`] checks a
/// path.
///
/// Errors (usage): the path leaves the project, or is not a valid path.
pub fn relative_to(prefix: &[u8], text: &str) -> Result<Vec<u8>, CommandError> {
    let raw = opfs::paths::parse_display(text);
    if raw.starts_with(b"/") {
        return Err(CommandError::usage(format!(
            "{text:?} is not a path inside the project: give it relative to the project or \
             the current directory"
        )));
    }
    let mut parts: Vec<&[u8]> = prefix
        .split(|b| *b == b'/')
        .filter(|c| !c.is_empty())
        .collect();
    for c in raw.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                if parts.pop().is_none() {
                    return Err(CommandError::usage(format!(
                        "{text:?} is not a path inside the project: it leads above the \
                         project root"
                    )));
                }
            }
            c => parts.push(c),
        }
    }
    let joined = parts.join(&b'/');
    let shown = opfs::paths::display(&joined);
    Ok(history::parse_path(if joined.is_empty() {
        "."
    } else {
        &shown
    })?)
}

/// A path from the command line, relative to where the user stands
/// ([`cwd_prefix`]).
///
/// Errors: as [`relative_to`].
pub fn pathspec(ctx: &Ctx, st: &StateDir, text: &str) -> Result<Vec<u8>, CommandError> {
    relative_to(&cwd_prefix(ctx, st), text)
}

/// Whether `path` is `within` or beneath it (the root, empty, holds all).
pub fn is_within(path: &[u8], within: &[u8]) -> bool {
    within.is_empty()
        || path == within
        || (path.starts_with(within) && path.get(within.len()) == Some(&b'/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_relative_to_the_prefix() {
        assert_eq!(relative_to(b"src", "main.rs").expect("ok"), b"src/main.rs");
        assert_eq!(relative_to(b"src/a", "../b").expect("ok"), b"src/b");
        assert_eq!(relative_to(b"", "./x/").expect("ok"), b"x");
        assert_eq!(relative_to(b"src", "..").expect("ok"), b"");
        assert!(relative_to(b"src", "../..").is_err());
        assert!(relative_to(b"", "/etc").is_err());
        assert!(is_within(b"src/a", b"src"));
        assert!(!is_within(b"srcx", b"src"));
        assert!(is_within(b"x", b""));
    }
}
