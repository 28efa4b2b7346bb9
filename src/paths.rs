//! Project-relative paths as raw bytes.
//!
//! Every path opfs stores or passes between its layers is relative to the
//! project root: no leading `/`, no empty, `.` or `..` components. The root
//! itself is the empty path. Names are bytes, not strings: non-UTF-8 names
//! round-trip exactly.

use std::fmt::Write as _;

/// Checks that `path` is a well-formed project-relative path.
///
/// Returns a description of the first defect found. Used on everything read
/// back from the index: a malformed path there is corruption, never followed.
pub fn validate(path: &[u8]) -> Result<(), &'static str> {
    if path.is_empty() {
        return Ok(());
    }
    if path[0] == b'/' {
        return Err("absolute path");
    }
    if path.contains(&0) {
        return Err("NUL byte in path");
    }
    for component in path.split(|&b| b == b'/') {
        match component {
            b"" => return Err("empty path component"),
            b"." | b".." => return Err("`.` or `..` component"),
            _ => {}
        }
    }
    Ok(())
}

/// Joins a project-relative directory path and one more component or
/// relative path.
pub fn join(base: &[u8], rest: &[u8]) -> Vec<u8> {
    if base.is_empty() {
        return rest.to_vec();
    }
    if rest.is_empty() {
        return base.to_vec();
    }
    let mut out = Vec::with_capacity(base.len() + 1 + rest.len());
    out.extend_from_slice(base);
    out.push(b'/');
    out.extend_from_slice(rest);
    out
}

/// The proper ancestors of a project-relative path, nearest first
/// (`a/b/c` gives `a/b`, then `a`); none for a top-level name.
pub fn ancestors(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = path;
    std::iter::from_fn(move || {
        let (parent, _) = split(rest)?;
        if parent.is_empty() {
            return None;
        }
        rest = parent;
        Some(parent)
    })
}

/// Splits `path` into its parent path and final name. The root has no parent.
pub fn split(path: &[u8]) -> Option<(&[u8], &[u8])> {
    if path.is_empty() {
        return None;
    }
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) => Some((&path[..i], &path[i + 1..])),
        None => Some((&b""[..], path)),
    }
}

/// True when `path` is `.git` at the project root or anything under it: the
/// project's own repository is served through the mount but never captured
/// and never restored (design §2.7).
pub fn is_excluded(path: &[u8]) -> bool {
    path == b".git" || path.starts_with(b".git/")
}

/// The paths a mount does not record: `.git/` at the root (always, see
/// [`is_excluded`]) and the user's `[record] exclude` list
/// (`docs/design.md` "Excluded paths"), gitignore patterns matched by the
/// `ignore` crate as if they sat in a `.gitignore` at the project root.
///
/// The verdict depends on the path's bytes only, never on what the path
/// holds now: a path is excluded when one of its ancestors matches a
/// pattern as a directory, or when the path itself matches a pattern as a
/// directory or as a file (so `target/` excludes a name `target` whatever
/// its type). That keeps a path recorded or not for the whole life of a
/// mount, whatever type it takes from one turn to the next. A directory
/// excluded whole is never looked inside: a later `!pattern` cannot
/// re-include a path below it (as in git).
#[derive(Clone, Default)]
pub struct Exclude {
    /// The patterns as given, in order.
    patterns: Vec<String>,
    /// Their matcher; `None` when there are none.
    matcher: Option<ignore::gitignore::Gitignore>,
}

impl std::fmt::Debug for Exclude {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Exclude").field(&self.patterns).finish()
    }
}

impl PartialEq for Exclude {
    fn eq(&self, other: &Exclude) -> bool {
        self.patterns == other.patterns
    }
}

/// A `[record] exclude` pattern that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ExcludePatternError {
    /// The pattern holds a line break (one pattern is one line).
    #[error("exclude pattern {0:?} holds a line break: give one pattern per list entry")]
    LineBreak(String),
    /// The glob does not parse.
    #[error("exclude pattern {pattern:?}: {source}")]
    Glob {
        /// The pattern as given.
        pattern: String,
        /// The parser's complaint.
        source: ignore::Error,
    },
}

impl Exclude {
    /// Only `.git/` is excluded.
    pub fn none() -> Exclude {
        Exclude::default()
    }

    /// `.git/` and `patterns` (gitignore syntax, one pattern each; blank
    /// entries and `#` comments are allowed and match nothing).
    ///
    /// Errors: a pattern holds a line break, or is not a valid glob; the
    /// error names it.
    pub fn new<S: AsRef<str>>(patterns: &[S]) -> Result<Exclude, ExcludePatternError> {
        let patterns: Vec<String> = patterns.iter().map(|p| p.as_ref().to_string()).collect();
        if patterns.is_empty() {
            return Ok(Exclude::none());
        }
        // Root "." : the paths matched are project-relative already, and
        // the crate strips nothing from them.
        let mut b = ignore::gitignore::GitignoreBuilder::new(".");
        for p in &patterns {
            if p.contains(['\n', '\r']) {
                return Err(ExcludePatternError::LineBreak(p.clone()));
            }
            b.add_line(None, p)
                .map_err(|source| ExcludePatternError::Glob {
                    pattern: p.clone(),
                    source,
                })?;
        }
        let matcher = b.build().map_err(|source| ExcludePatternError::Glob {
            pattern: patterns.join(", "),
            source,
        })?;
        Ok(Exclude {
            patterns,
            matcher: Some(matcher),
        })
    }

    /// The patterns as given (not `.git/`).
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// True when only `.git/` is excluded.
    pub fn is_empty(&self) -> bool {
        self.matcher.is_none()
    }

    /// True when the mount does not record `path` (project-relative): it
    /// is `.git` or under it, or the list excludes it or an ancestor. The
    /// root is never excluded. Cost: one glob-set match per component
    /// (two for the last), nothing when the list is empty.
    pub fn excludes(&self, path: &[u8]) -> bool {
        if is_excluded(path) {
            return true;
        }
        let Some(m) = &self.matcher else {
            return false;
        };
        if path.is_empty() {
            return false;
        }
        let hit = |p: &[u8], is_dir: bool| {
            use std::os::unix::ffi::OsStrExt;
            m.matched(std::path::Path::new(std::ffi::OsStr::from_bytes(p)), is_dir)
                .is_ignore()
        };
        // Outermost ancestor first: git never looks inside an excluded
        // directory.
        let mut ends: Vec<usize> = path
            .iter()
            .enumerate()
            .filter(|(_, &b)| b == b'/')
            .map(|(i, _)| i)
            .collect();
        ends.push(path.len());
        let last = ends.len() - 1;
        ends.iter().enumerate().any(|(k, &end)| {
            let p = &path[..end];
            hit(p, true) || (k == last && hit(p, false))
        })
    }
}

/// True when `path` equals `ancestor` or lies under it.
pub fn is_within(path: &[u8], ancestor: &[u8]) -> bool {
    ancestor.is_empty()
        || path == ancestor
        || (path.len() > ancestor.len()
            && path.starts_with(ancestor)
            && path[ancestor.len()] == b'/')
}

/// Renders a path for people: UTF-8 as is, every other byte as `\xNN`
/// (and a literal backslash as `\\`), so distinct paths render distinctly.
pub fn display(path: &[u8]) -> String {
    let mut out = String::with_capacity(path.len());
    for chunk in path.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '\\' {
                out.push_str("\\\\");
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// True when `c` must not reach a terminal as it is: a control character
/// (Unicode general category Cc: `\n`, ESC, U+009B...), a format
/// character (Cf: the bidirectional overrides and isolates U+202A–202E,
/// U+2066–2069, the marks U+200E/U+200F, zero-width characters), or a
/// line or paragraph separator (Zl, Zp). Each can make text (a path, a
/// ref name, a URL written by someone else) read as other text, reorder
/// a line, or move the cursor.
pub fn is_unprintable(c: char) -> bool {
    use unicode_general_category::{get_general_category, GeneralCategory as G};
    c.is_control()
        || matches!(
            get_general_category(c),
            G::Format | G::LineSeparator | G::ParagraphSeparator
        )
}

/// `word` (a path, a URL) as one word of a POSIX shell command line, for
/// the commands opfs suggests: as it is when it holds nothing the shell
/// reads (`/srv/ckpt.git`), else quoted (`'/tmp/my project'`,
/// `'https://h/x?a&b'`), through the `shlex` crate. A word holding a NUL
/// (which no argument can) is shown as a Rust string literal.
pub fn shell_quote(word: &str) -> String {
    shlex::try_quote(word)
        .map(|q| q.into_owned())
        .unwrap_or_else(|_| format!("{word:?}"))
}

/// Inverse of [`display`]: turns `\xNN` and `\\` back into bytes. Other text
/// is taken as UTF-8.
pub fn parse_display(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 1 < bytes.len() {
            if bytes[i + 1] == b'\\' {
                out.push(b'\\');
                i += 2;
                continue;
            }
            if bytes[i + 1] == b'x' && i + 3 < bytes.len() {
                if let Ok(v) = u8::from_str_radix(&text[i + 2..i + 4], 16) {
                    out.push(v);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

/// A failure about one project-relative path: what went wrong (`source`,
/// an `io::Error` unless said otherwise) and where (`path`, raw bytes, so a
/// non-UTF-8 name stays exact). Displays as `PATH: SOURCE`, the path
/// rendered with [`display`].
#[derive(Debug)]
pub struct PathError<E = std::io::Error> {
    /// The path, project-relative raw bytes.
    pub path: Vec<u8>,
    /// The cause.
    pub source: E,
}

impl<E: std::fmt::Display> std::fmt::Display for PathError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", display(&self.path), self.source)
    }
}

impl<E: std::error::Error + 'static> std::error::Error for PathError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Attaches the path an operation was about to its error:
/// `tree.lstat(p).at(p)?` (Jujutsu's `.context(path)`).
pub trait PathContext<T, E> {
    /// The result, its error wrapped in a [`PathError`] naming `path`.
    fn at(self, path: &[u8]) -> Result<T, PathError<E>>;
}

impl<T, E> PathContext<T, E> for Result<T, E> {
    fn at(self, path: &[u8]) -> Result<T, PathError<E>> {
        self.map_err(|source| PathError {
            path: path.to_vec(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn validate_rejects_escapes() {
        assert!(validate(b"a/b").is_ok());
        assert!(validate(b"").is_ok());
        assert!(validate(b"/a").is_err());
        assert!(validate(b"a/../b").is_err());
        assert!(validate(b"a//b").is_err());
        assert!(validate(b"a/").is_err());
        assert!(validate(b"./a").is_err());
    }

    #[test]
    fn exclude_list_by_name_whatever_the_type() {
        let e = Exclude::new(&["target/", "*.log", "!keep.log", "/top", "build/**/gen"]).unwrap();
        assert!(e.excludes(b".git/HEAD"), ".git stays excluded");
        assert!(
            e.excludes(b"target"),
            "a dir pattern excludes the name itself"
        );
        assert!(e.excludes(b"target/debug/x.o"));
        assert!(e.excludes(b"sub/target/x"), "unanchored");
        assert!(!e.excludes(b"targets/x"));
        assert!(e.excludes(b"a.log") && e.excludes(b"d/b.log"));
        assert!(!e.excludes(b"keep.log"), "re-included");
        assert!(
            e.excludes(b"target/keep.log"),
            "nothing comes back below an excluded dir"
        );
        assert!(e.excludes(b"top") && !e.excludes(b"sub/top"), "anchored");
        assert!(e.excludes(b"build/a/b/gen/f"));
        assert!(!e.excludes(b"src/main.rs") && !e.excludes(b""));
        assert!(e.excludes(b"\xff/x.log"), "non-UTF-8 names");
        assert!(Exclude::none().is_empty() && !Exclude::none().excludes(b"target"));
        assert!(matches!(
            Exclude::new(&["a\nb"]),
            Err(ExcludePatternError::LineBreak(_))
        ));
        assert!(matches!(
            Exclude::new(&["a{b"]),
            Err(ExcludePatternError::Glob { .. })
        ));
    }

    #[test]
    fn split_and_join() {
        assert_eq!(split(b"a/b/c"), Some((&b"a/b"[..], &b"c"[..])));
        assert_eq!(split(b"c"), Some((&b""[..], &b"c"[..])));
        assert_eq!(split(b""), None);
        assert_eq!(join(b"", b"x"), b"x");
        assert_eq!(join(b"a", b"x/y"), b"a/x/y");
    }

    #[test]
    fn excluded_and_within() {
        assert!(is_excluded(b".git"));
        assert!(is_excluded(b".git/HEAD"));
        assert!(!is_excluded(b".github/x"));
        assert!(!is_excluded(b"sub/.git/x"));
        assert!(is_within(b"a/b", b"a"));
        assert!(!is_within(b"ab", b"a"));
    }

    #[test]
    fn display_round_trips_non_utf8() {
        let raw = b"caf\xe9/back\\slash/\xff\xfe".to_vec();
        let shown = display(&raw);
        assert_eq!(shown, "caf\\xe9/back\\\\slash/\\xff\\xfe");
        assert_eq!(parse_display(&shown), raw);
        assert_eq!(parse_display("plain/ü"), "plain/ü".as_bytes());
    }
}
