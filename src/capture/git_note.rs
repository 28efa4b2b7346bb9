//! What the mount does with the files git runs or trusts (`docs/sandbox.md`
//! "What git runs stays read-only"): `.git` is not recorded, so no rewind
//! restores a change to `.git/config` or a hook. Every mutation of one of
//! them through the mount is noted instead, once per turn and path, in
//! `<state dir>/git-changes` (one line `TURN<TAB>PATH`, appended before
//! the mutation, not synced), which `opfs
//! status` and `opfs log` show as a warning. Creating `commondir` in the
//! project's git dir (or a submodule's), which git itself never does and
//! which would redirect the repository to a configuration of the creator's
//! choosing, is refused (`EPERM`).
//!
//! A `.git` made in a subfolder (a nested repository) is noted the same
//! way: git run there runs its configuration.
//!
//! Cost: one prefix comparison (`.git`) per mutation path, and for a
//! creation or a rename one suffix comparison (`/.git`); only paths under
//! `.git` are classified further.

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::Mutex;

use opfs_fs::{Errno, Mutation};

use super::Journal;
use crate::store::StateDir;

/// The (turn, path) pairs already noted by this daemon.
#[derive(Debug, Default)]
pub(super) struct GitNotes {
    seen: Mutex<BTreeSet<(u64, Vec<u8>)>>,
}

impl<T: crate::tree::Tree> Journal<T> {
    /// Notes a mutation of a path git runs or trusts; refuses the creation
    /// of a forbidden `commondir` (`EPERM`). Called first in `before`.
    pub(super) fn git_guard(&self, m: &Mutation<'_>) -> Result<(), Errno> {
        let (a, b, creates): (&[u8], Option<&[u8]>, Option<&[u8]>) = match *m {
            Mutation::Content { path }
            | Mutation::Range { path, .. }
            | Mutation::Metadata { path }
            | Mutation::Remove { path } => (path, None, None),
            Mutation::Create { path } => (path, None, Some(path)),
            Mutation::Rename { from, to, exchange } => (
                from,
                Some(to),
                Some(if exchange && is_forbidden_commondir(from) {
                    from
                } else {
                    to
                }),
            ),
        };
        if !a.starts_with(b".git") && !b.is_some_and(|b| b.starts_with(b".git")) {
            // A repository made in a subfolder (`sub/.git`, a directory or
            // a gitfile): git run there, or `git status` of a superproject
            // that registers it as a submodule, runs its configuration.
            if let Some(made) = creates.filter(|p| p.ends_with(b"/.git")) {
                self.note_git_change(made);
            }
            return Ok(());
        }
        if creates.is_some_and(is_forbidden_commondir) {
            log::warn!(
                "refused: creating .git/commondir through the mount (it would point the \
                 repository at another configuration)"
            );
            return Err(libc::EPERM);
        }
        for p in [Some(a), b].into_iter().flatten() {
            if is_git_trusted(p) {
                self.note_git_change(p);
            }
        }
        Ok(())
    }

    fn note_git_change(&self, path: &[u8]) {
        let turn = self.lock().turn.number;
        let fresh = self
            .git_notes
            .seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((turn, path.to_vec()));
        if !fresh {
            return;
        }
        let file = self.state.git_changes_path();
        let line = format!("{turn}\t{}\n", escape(path));
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&file)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            log::warn!(
                "{}: cannot note that {} changed in turn {turn}: {e}",
                file.display(),
                escape(path)
            );
        }
    }
}

/// `path` as text: bytes that are not printable ASCII as `\xNN`.
fn escape(path: &[u8]) -> String {
    let mut s = String::new();
    for &b in path {
        if b.is_ascii_graphic() || b == b' ' {
            if b == b'\\' {
                s.push_str("\\\\");
            } else {
                s.push(b as char);
            }
        } else {
            s.push_str(&format!("\\x{b:02x}"));
        }
    }
    s
}

/// The paths git runs or trusts that changed through the mount, per turn
/// (ascending turns, each turn's paths sorted and distinct), from the
/// state dir's notes. Empty when there are none or the file cannot be
/// read.
pub fn git_changes(state: &StateDir) -> Vec<(u64, Vec<String>)> {
    let Ok(text) = std::fs::read_to_string(state.git_changes_path()) else {
        return Vec::new();
    };
    let mut by_turn: std::collections::BTreeMap<u64, BTreeSet<String>> = Default::default();
    for line in text.lines() {
        if let Some((t, p)) = line.split_once('\t') {
            if let Ok(t) = t.parse::<u64>() {
                by_turn.entry(t).or_default().insert(p.to_string());
            }
        }
    }
    by_turn
        .into_iter()
        .map(|(t, ps)| (t, ps.into_iter().collect()))
        .collect()
}

/// The warning for `paths` changed in `turn`, as `status` and `log` say it.
pub fn git_change_warning(turn: u64, paths: &[String]) -> String {
    format!(
        "turn {turn} changed what git runs or trusts through the mount: {}; no rewind restores \
         .git, so check them before running git here (`git config --list --show-origin`, \
         `ls -la .git/hooks`)",
        paths.join(", ")
    )
}

/// Whether `path` (relative to a project root, bytes as the mount hook
/// sees them) is one of the files git runs or trusts in the project's
/// own `.git` (`docs/sandbox.md`): `config`, `config.worktree`,
/// `commondir`, anything under `hooks/` or `info/`, the same in a
/// submodule's git dir under `modules/`, a linked worktree's
/// `config.worktree`, `commondir` or `gitdir`, or `.git` itself. A prefix
/// check first: any other path costs one comparison.
pub fn is_git_trusted(path: &[u8]) -> bool {
    let Some(rest) = path.strip_prefix(b".git") else {
        return false;
    };
    if rest.is_empty() {
        return true;
    }
    let Some(rest) = rest.strip_prefix(b"/") else {
        return false;
    };
    trusted_in_git_dir(rest, true)
}

fn trusted_in_git_dir(rest: &[u8], top: bool) -> bool {
    let first = rest.split(|b| *b == b'/').next().unwrap_or_default();
    match first {
        b"config" | b"config.worktree" | b"commondir" => rest.len() == first.len(),
        b"hooks" | b"info" => true,
        b"modules" if top => {
            // modules/NAME.../X where X is trusted in the submodule's git
            // dir; a name may hold '/', so any suffix counts.
            let mut parts = rest.splitn(2, |b| *b == b'/');
            parts.next();
            let Some(inner) = parts.next() else {
                return true;
            };
            let comps: Vec<&[u8]> = inner.split(|b| *b == b'/').collect();
            (1..comps.len()).any(|i| {
                let tail = comps[i..].join(&b'/');
                trusted_in_git_dir(&tail, false)
            })
        }
        b"worktrees" if top => {
            let comps: Vec<&[u8]> = rest.split(|b| *b == b'/').collect();
            comps.len() == 3 && matches!(comps[2], b"config.worktree" | b"commondir" | b"gitdir")
        }
        _ => false,
    }
}

/// Whether `path` (as [`is_git_trusted`]) names a `commondir` file git
/// never makes: in the project's own git dir or a submodule's (only `git
/// worktree add` makes one, under `worktrees/`). The mount refuses to
/// create it (`EPERM`): it would redirect the repository to a
/// configuration of the creator's choosing.
pub fn is_forbidden_commondir(path: &[u8]) -> bool {
    path.ends_with(b"/commondir")
        && path.starts_with(b".git/")
        && !path.starts_with(b".git/worktrees/")
        && is_git_trusted(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trusted_paths_are_recognised_by_prefix() {
        for p in [
            ".git",
            ".git/config",
            ".git/config.worktree",
            ".git/commondir",
            ".git/hooks",
            ".git/hooks/post-checkout",
            ".git/info/attributes",
            ".git/modules/sub/config",
            ".git/modules/a/b/hooks/pre-commit",
            ".git/modules/sub/commondir",
            ".git/worktrees/w/config.worktree",
            ".git/worktrees/w/commondir",
        ] {
            assert!(is_git_trusted(p.as_bytes()), "{p}");
        }
        for p in [
            "",
            "a.txt",
            ".gitignore",
            ".github/x",
            ".git/index",
            ".git/HEAD",
            ".git/objects/ab/cdef",
            ".git/refs/heads/main",
            ".git/logs/HEAD",
            ".git/configx",
            ".git/config/x",
            ".git/worktrees/w/HEAD",
            ".git/modules/sub/objects/pack/x",
        ] {
            assert!(!is_git_trusted(p.as_bytes()), "{p}");
        }
        assert!(is_forbidden_commondir(b".git/commondir"));
        assert!(is_forbidden_commondir(b".git/modules/s/commondir"));
        assert!(!is_forbidden_commondir(b".git/worktrees/w/commondir"));
        assert!(!is_forbidden_commondir(b"sub/.git/commondir"));
    }
}
