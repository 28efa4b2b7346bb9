//! The project's ignore rules, as the export applies them (`docs/export.md`
//! "Ignored paths"): `.gitignore` files at every level, `.git/info/exclude`
//! and the user's global excludes (`core.excludesFile`, else
//! `$XDG_CONFIG_HOME/git/ignore`), with git's precedence. The patterns are
//! matched by the `ignore` crate (ripgrep's); this file only decides which
//! pattern lists apply to a path and in which order, as git does:
//!
//! - a `.gitignore` deeper in the tree overrides one above it, which
//!   overrides `.git/info/exclude`, which overrides the global excludes;
//!   within one list the last matching pattern wins (the crate's job);
//! - a path below an ignored directory is ignored whatever a deeper list
//!   says (git never looks inside an excluded directory).
//!
//! The files are read from the project as it is when the export runs
//! (through the confined [`Dir`], never following symlinks), each once per
//! export run; a worktree's branch reads them from the worktree's view as
//! it is then instead ([`IgnoreRules::load_with`], `export::branch`). Reading `.git/info/exclude` is the one read of the
//! project's `.git` opfs makes, and only for this. The crate finds the
//! global excludes from `$HOME`, `$XDG_CONFIG_HOME` and `$GIT_CONFIG_GLOBAL`
//! the way git does: the one place the library's behaviour follows the
//! environment (documented in `docs/export.md`).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;

use crate::paths;
use crate::tree::Dir;

/// Reads the text of the ignore file at a project-relative path (`None`:
/// there is none, or it cannot be read).
pub type ReadRules<'a> = dyn Fn(&[u8]) -> Option<String> + 'a;

/// The ignore rules of one project, loaded lazily per directory.
pub struct IgnoreRules<'a> {
    /// Where the ignore files are read from.
    read: Box<ReadRules<'a>>,
    /// The directory the patterns are relative to.
    root: PathBuf,
    /// `.git/info/exclude`, then the global excludes: the lists below
    /// every `.gitignore`.
    bottom: Vec<Gitignore>,
    /// A directory (project-relative, `""` = the root) → its `.gitignore`,
    /// `None` when it has none (or it cannot be read).
    per_dir: HashMap<Vec<u8>, Option<Gitignore>>,
    /// A directory → whether it is ignored (itself or an ancestor).
    dirs: HashMap<Vec<u8>, bool>,
}

impl<'a> IgnoreRules<'a> {
    /// The rules of the project `backing` serves: its info/exclude and the
    /// user's global excludes now; `.gitignore` files as they are asked for.
    /// Files that cannot be read or patterns that do not parse are left out
    /// (logged at `debug`): an ignore file must never stop an export.
    pub fn load(backing: &'a Dir) -> IgnoreRules<'a> {
        IgnoreRules::load_with(backing.path(), Box::new(|rel| read_rules(backing, rel)))
    }

    /// As [`IgnoreRules::load`], the ignore files read by `read` (a
    /// worktree's view) instead of from a directory; `root` is the
    /// directory the patterns are relative to.
    pub fn load_with(root: &Path, read: Box<ReadRules<'a>>) -> IgnoreRules<'a> {
        let mut bottom = Vec::new();
        if let Some(text) = read(b".git/info/exclude") {
            bottom.push(build(root, &text));
        }
        let (global, err) = GitignoreBuilder::new(root).build_global();
        if let Some(e) = err {
            log::debug!("global excludes: {e}");
        }
        bottom.push(global);
        IgnoreRules {
            read,
            root: root.to_path_buf(),
            bottom,
            per_dir: HashMap::new(),
            dirs: HashMap::new(),
        }
    }

    /// True when `path` (project-relative; `is_dir`: it is a directory) is
    /// ignored: it, or a directory above it, matches an ignore pattern that
    /// no later or deeper pattern re-includes.
    pub fn is_ignored(&mut self, path: &[u8], is_dir: bool) -> bool {
        if let Some((parent, _)) = paths::split(path) {
            if !parent.is_empty() && self.dir_ignored(parent) {
                return true;
            }
        }
        self.decide(path, is_dir)
    }

    /// Whether directory `dir` (not the root) is ignored, memoized.
    fn dir_ignored(&mut self, dir: &[u8]) -> bool {
        if let Some(&d) = self.dirs.get(dir) {
            return d;
        }
        let above = match paths::split(dir) {
            Some((parent, _)) if !parent.is_empty() => self.dir_ignored(parent),
            _ => false,
        };
        let d = above || self.decide(dir, true);
        self.dirs.insert(dir.to_vec(), d);
        d
    }

    /// The verdict of the lists that apply to `path` itself, deepest
    /// first; its ancestors are not looked at.
    fn decide(&mut self, path: &[u8], is_dir: bool) -> bool {
        // The directories whose .gitignore applies: the parent of `path`,
        // its parent, ..., the root.
        let mut dirs: Vec<&[u8]> = Vec::new();
        let mut cur = path;
        while let Some((parent, _)) = paths::split(cur) {
            dirs.push(parent);
            if parent.is_empty() {
                break;
            }
            cur = parent;
        }
        for dir in dirs {
            let rel = if dir.is_empty() {
                path
            } else {
                &path[dir.len() + 1..]
            };
            let (read, root) = (&self.read, &self.root);
            let gi = self.per_dir.entry(dir.to_vec()).or_insert_with(|| {
                read(&paths::join(dir, b".gitignore"))
                    .map(|t| build(&root.join(OsStr::from_bytes(dir)), &t))
            });
            if let Some(gi) = gi {
                match gi.matched(Path::new(OsStr::from_bytes(rel)), is_dir) {
                    Match::None => {}
                    m => return m.is_ignore(),
                }
            }
        }
        for gi in &self.bottom {
            match gi.matched(Path::new(OsStr::from_bytes(path)), is_dir) {
                Match::None => {}
                m => return m.is_ignore(),
            }
        }
        false
    }
}

/// The text of the ignore file at `rel`, if it is a regular file that can
/// be read.
fn read_rules(backing: &Dir, rel: &[u8]) -> Option<String> {
    let mut f = match backing.open_file(rel, libc::O_RDONLY, 0) {
        Ok(f) => f,
        Err(e) => {
            if !crate::tree::is_not_found(&e) {
                log::debug!("ignore file {}: {e}", paths::display(rel));
            }
            return None;
        }
    };
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return None;
    }
    let mut bytes = Vec::new();
    if let Err(e) = f.read_to_end(&mut bytes) {
        log::debug!("ignore file {}: {e}", paths::display(rel));
        return None;
    }
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// One pattern list from `text`, its patterns relative to `root`.
fn build(root: &Path, text: &str) -> Gitignore {
    let mut b = GitignoreBuilder::new(root);
    for line in text.lines() {
        if let Err(e) = b.add_line(None, line) {
            log::debug!("ignore pattern {line:?}: {e}");
        }
    }
    b.build().unwrap_or_else(|e| {
        log::debug!("ignore rules under {}: {e}", root.display());
        Gitignore::empty()
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn project(files: &[(&str, &str)]) -> (tempfile::TempDir, Dir) {
        let t = tempfile::tempdir().unwrap();
        for (p, text) in files {
            let full = t.path().join(p);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, text).unwrap();
        }
        let d = Dir::open(t.path()).unwrap();
        (t, d)
    }

    #[test]
    fn git_precedence_and_excluded_directories() {
        let (_t, d) = project(&[
            (".gitignore", "target/\n*.log\n!keep.log\n/top-only\n"),
            ("sub/.gitignore", "!again.log\nlocal\n"),
            (".git/info/exclude", "secret\n*.tmp\n"),
        ]);
        let mut r = IgnoreRules::load(&d);
        let mut ig = |p: &str, dir: bool| r.is_ignored(p.as_bytes(), dir);
        assert!(ig("target", true));
        assert!(!ig("target", false), "target/ matches directories only");
        assert!(ig("target/debug/build/x.o", false));
        assert!(ig("sub/target/x", false), "unanchored dir pattern");
        assert!(ig("a.log", false));
        assert!(!ig("keep.log", false));
        assert!(ig("sub/x.log", false));
        assert!(!ig("sub/again.log", false), "a deeper list overrides");
        assert!(ig("sub/local", false));
        assert!(!ig("local", false), "sub's rules apply below sub only");
        assert!(ig("top-only", false));
        assert!(!ig("sub/top-only", false), "anchored to the root");
        assert!(ig("secret", false));
        assert!(ig("deep/er/x.tmp", false));
        assert!(!ig("src/main.rs", false));
        assert!(!ig(".gitignore", false));
    }

    #[test]
    fn nothing_below_an_ignored_directory_comes_back() {
        let (_t, d) = project(&[(".gitignore", "build/\n"), ("build/.gitignore", "!*\n")]);
        let mut r = IgnoreRules::load(&d);
        assert!(r.is_ignored(b"build/out.bin", false));
    }
}
