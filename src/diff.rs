//! Rendering what turns changed as git-style patches, `--stat` and
//! `--name-status`.
//!
//! The patch is what `git diff` prints with default options, so `git apply`
//! (and `git apply --reverse`) accept it for text changes: `diff --git`
//! headers, `new file mode` / `deleted file mode` / `old mode` / `new mode`
//! lines, unified hunks with three lines of context, and `\ No newline at
//! end of file` markers. Paths that need it are quoted the way git quotes
//! them (C escapes, octal for bytes outside printable ASCII), so non-UTF-8
//! names survive. Binary files (a NUL byte in the first 8000 bytes, git's
//! test) are reported as `Binary files ... differ` and carry no data. A
//! change between a file and a symlink is a deletion plus an addition. A
//! path deleted and another added with identical content and mode is shown
//! as a rename (`similarity index 100%`). Special files are not shown, nor
//! directories, which git has no way to represent, except that
//! [`write_dirs`] adds a line for each empty directory created or removed
//! (`new empty directory d/`), which `git apply` skips.

use std::collections::HashMap;
use std::io::{self, Write};

use crate::history::{git_file_mode, DirChange, HistoryError, PathChange, Sources};
use crate::record::PreImage;

/// One side of a changed path as git sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Side {
    /// Git mode: 100644, 100755 or 120000.
    pub mode: u32,
    /// The bytes (a symlink's target for 120000).
    pub data: Vec<u8>,
    /// The permission bits (`0o7777`) of a file, which a rewind restores
    /// exactly though git keeps only 644 or 755; 0 for a symlink.
    pub perm: u32,
}

/// One entry of a diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileDiff {
    /// A new path.
    Added {
        /// The path.
        path: Vec<u8>,
        /// What it holds now.
        new: Side,
    },
    /// A removed path.
    Deleted {
        /// The path.
        path: Vec<u8>,
        /// What it held.
        old: Side,
    },
    /// Same path, same type (file or symlink), different content or mode.
    Modified {
        /// The path.
        path: Vec<u8>,
        /// Before.
        old: Side,
        /// After.
        new: Side,
    },
    /// A file became a symlink or the other way round.
    TypeChanged {
        /// The path.
        path: Vec<u8>,
        /// Before.
        old: Side,
        /// After.
        new: Side,
    },
    /// Content moved unchanged from one path to another.
    Renamed {
        /// The old path.
        from: Vec<u8>,
        /// The new path.
        to: Vec<u8>,
        /// The content (identical on both sides).
        side: Side,
    },
}

impl FileDiff {
    fn sort_key(&self) -> &[u8] {
        match self {
            FileDiff::Added { path, .. }
            | FileDiff::Deleted { path, .. }
            | FileDiff::Modified { path, .. }
            | FileDiff::TypeChanged { path, .. } => path,
            FileDiff::Renamed { to, .. } => to,
        }
    }
}

fn side(
    src: &Sources<'_>,
    path: &[u8],
    v: &crate::view::Version,
) -> Result<Option<Side>, HistoryError> {
    let (mode, perm) = match &v.state {
        PreImage::File { perm, .. } => (git_file_mode(*perm), *perm & 0o7777),
        PreImage::Symlink { .. } => (0o120000, 0),
        _ => return Ok(None),
    };
    Ok(src.content(path, v)?.map(|data| Side { mode, data, perm }))
}

/// Loads both sides of every change and pairs exact renames.
///
/// Errors: a recorded blob is missing or corrupt.
pub fn build(src: &Sources<'_>, changes: &[PathChange]) -> Result<Vec<FileDiff>, HistoryError> {
    let mut out = Vec::new();
    for c in changes {
        let old = side(src, &c.path, &c.old)?;
        let new = side(src, &c.path, &c.new)?;
        let path = c.path.clone();
        match (old, new) {
            (None, None) => {}
            (None, Some(new)) => out.push(FileDiff::Added { path, new }),
            (Some(old), None) => out.push(FileDiff::Deleted { path, old }),
            (Some(old), Some(new)) => {
                if old == new {
                    continue;
                }
                if (old.mode == 0o120000) == (new.mode == 0o120000) {
                    out.push(FileDiff::Modified { path, old, new });
                } else {
                    out.push(FileDiff::TypeChanged { path, old, new });
                }
            }
        }
    }
    pair_renames(&mut out);
    out.sort_by(|a, b| a.sort_key().cmp(b.sort_key()));
    Ok(out)
}

/// Replaces a deletion and an addition of identical content and mode by a
/// rename. Empty files are never paired (every empty file looks alike).
fn pair_renames(diffs: &mut Vec<FileDiff>) {
    let mut deleted: HashMap<(u32, blake3::Hash), Vec<usize>> = HashMap::new();
    for (i, d) in diffs.iter().enumerate() {
        if let FileDiff::Deleted { old, .. } = d {
            if !old.data.is_empty() {
                deleted
                    .entry((old.mode, blake3::hash(&old.data)))
                    .or_default()
                    .push(i);
            }
        }
    }
    if deleted.is_empty() {
        return;
    }
    let mut pairs = Vec::new();
    for (i, d) in diffs.iter().enumerate() {
        if let FileDiff::Added { new, .. } = d {
            if let Some(list) = deleted.get_mut(&(new.mode, blake3::hash(&new.data))) {
                if let Some(j) = list.pop() {
                    pairs.push((j, i));
                }
            }
        }
    }
    if pairs.is_empty() {
        return;
    }
    let mut taken = vec![false; diffs.len()];
    let mut renames = Vec::new();
    for (del, add) in pairs {
        taken[del] = true;
        taken[add] = true;
        if let (FileDiff::Deleted { path: from, .. }, FileDiff::Added { path: to, new }) =
            (&diffs[del], &diffs[add])
        {
            renames.push(FileDiff::Renamed {
                from: from.clone(),
                to: to.clone(),
                side: new.clone(),
            });
        }
    }
    let mut i = 0;
    diffs.retain(|_| {
        let keep = !taken[i];
        i += 1;
        keep
    });
    diffs.extend(renames);
}

/// True when git would call `data` binary: a NUL in its first 8000 bytes.
pub fn is_binary(data: &[u8]) -> bool {
    data[..data.len().min(8000)].contains(&0)
}

/// Renders `prefix` + `path` the way git does in patch headers: unquoted
/// when every byte is printable ASCII other than `"` and `\`, else in
/// double quotes with C escapes and octal for the rest.
pub fn quote_path(prefix: &str, path: &[u8]) -> Vec<u8> {
    let needs = path
        .iter()
        .any(|&b| !(0x20..0x7f).contains(&b) || b == b'"' || b == b'\\');
    let mut out = Vec::with_capacity(path.len() + prefix.len() + 2);
    if !needs {
        out.extend_from_slice(prefix.as_bytes());
        out.extend_from_slice(path);
        return out;
    }
    out.push(b'"');
    out.extend_from_slice(prefix.as_bytes());
    for &b in path {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            0x07 => out.extend_from_slice(b"\\a"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0b => out.extend_from_slice(b"\\v"),
            0x0c => out.extend_from_slice(b"\\f"),
            0x20..=0x7e => out.push(b),
            _ => out.extend_from_slice(format!("\\{b:03o}").as_bytes()),
        }
    }
    out.push(b'"');
    out
}

fn header(out: &mut dyn Write, a: &[u8], b: &[u8]) -> io::Result<()> {
    out.write_all(b"diff --git ")?;
    out.write_all(&quote_path("a/", a))?;
    out.write_all(b" ")?;
    out.write_all(&quote_path("b/", b))?;
    out.write_all(b"\n")
}

/// Writes the body of a content change: `--- / +++` lines and hunks, or a
/// `Binary files` line. `old`/`new` of `None` mean /dev/null.
fn body(
    out: &mut dyn Write,
    path: &[u8],
    old: Option<&[u8]>,
    new: Option<&[u8]>,
) -> io::Result<()> {
    let o = old.unwrap_or_default();
    let n = new.unwrap_or_default();
    if o == n {
        return Ok(());
    }
    let minus = if old.is_some() {
        quote_path("a/", path)
    } else {
        b"/dev/null".to_vec()
    };
    let plus = if new.is_some() {
        quote_path("b/", path)
    } else {
        b"/dev/null".to_vec()
    };
    if is_binary(o) || is_binary(n) {
        out.write_all(b"Binary files ")?;
        out.write_all(&minus)?;
        out.write_all(b" and ")?;
        out.write_all(&plus)?;
        return out.write_all(b" differ\n");
    }
    out.write_all(b"--- ")?;
    out.write_all(&minus)?;
    out.write_all(b"\n+++ ")?;
    out.write_all(&plus)?;
    out.write_all(b"\n")?;
    hunks(out, o, n)
}

fn range(start: usize, len: usize) -> String {
    match len {
        0 => format!("{start},0"),
        1 => format!("{}", start + 1),
        _ => format!("{},{len}", start + 1),
    }
}

fn hunks(out: &mut dyn Write, old: &[u8], new: &[u8]) -> io::Result<()> {
    let diff = similar::TextDiff::configure()
        .algorithm(similar::Algorithm::Myers)
        .diff_lines(old, new);
    for group in diff.grouped_ops(3) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        let o = first.old_range().start..last.old_range().end;
        let n = first.new_range().start..last.new_range().end;
        writeln!(
            out,
            "@@ -{} +{} @@",
            range(o.start, o.len()),
            range(n.start, n.len())
        )?;
        for op in &group {
            for change in diff.iter_changes(op) {
                let tag = match change.tag() {
                    similar::ChangeTag::Equal => b' ',
                    similar::ChangeTag::Delete => b'-',
                    similar::ChangeTag::Insert => b'+',
                };
                let line: &[u8] = change.value();
                out.write_all(&[tag])?;
                out.write_all(line)?;
                if !line.ends_with(b"\n") {
                    out.write_all(b"\n\\ No newline at end of file\n")?;
                }
            }
        }
    }
    Ok(())
}

/// Writes `diffs` as a git-style patch.
pub fn write_patch(diffs: &[FileDiff], out: &mut dyn Write) -> io::Result<()> {
    for d in diffs {
        match d {
            FileDiff::Added { path, new } => {
                header(out, path, path)?;
                writeln!(out, "new file mode {:o}", new.mode)?;
                body(out, path, None, Some(&new.data))?;
            }
            FileDiff::Deleted { path, old } => {
                header(out, path, path)?;
                writeln!(out, "deleted file mode {:o}", old.mode)?;
                body(out, path, Some(&old.data), None)?;
            }
            FileDiff::Modified { path, old, new } => {
                if old.mode == new.mode && old.data == new.data {
                    // Permission bits git cannot show: a line after the
                    // patch (`write_perms`).
                    continue;
                }
                header(out, path, path)?;
                if old.mode != new.mode {
                    writeln!(out, "old mode {:o}\nnew mode {:o}", old.mode, new.mode)?;
                }
                body(out, path, Some(&old.data), Some(&new.data))?;
            }
            FileDiff::TypeChanged { path, old, new } => {
                header(out, path, path)?;
                writeln!(out, "deleted file mode {:o}", old.mode)?;
                body(out, path, Some(&old.data), None)?;
                header(out, path, path)?;
                writeln!(out, "new file mode {:o}", new.mode)?;
                body(out, path, None, Some(&new.data))?;
            }
            FileDiff::Renamed { from, to, .. } => {
                header(out, from, to)?;
                out.write_all(b"similarity index 100%\nrename from ")?;
                out.write_all(&quote_path("", from))?;
                out.write_all(b"\nrename to ")?;
                out.write_all(&quote_path("", to))?;
                out.write_all(b"\n")?;
            }
        }
    }
    write_perms(diffs, out)
}

/// Writes, after a patch, one line per file whose permission bits changed
/// in a way git's modes (100644, 100755) do not show, as `git diff
/// --summary` words a mode change: ` mode change 0644 => 0600 f`. `git
/// apply` skips such lines (as the empty directory lines); `opfs rewind`
/// restores those bits.
fn write_perms(diffs: &[FileDiff], out: &mut dyn Write) -> io::Result<()> {
    for d in diffs {
        if let FileDiff::Modified { path, old, new } = d {
            if old.mode == new.mode && old.perm != new.perm {
                write!(out, " mode change {:04o} => {:04o} ", old.perm, new.perm)?;
                out.write_all(&quote_path("", path))?;
                out.write_all(b"\n")?;
            }
        }
    }
    Ok(())
}

/// The directories of `dirs` that are empty at the end where they exist:
/// no path of `diffs` lies beneath them (everything beneath a created or
/// removed directory changed with it, so the diff lists it).
pub fn empty_dirs(dirs: &[DirChange], diffs: &[FileDiff]) -> Vec<DirChange> {
    let beneath = |d: &[u8], p: &[u8]| p.len() > d.len() && p.starts_with(d) && p[d.len()] == b'/';
    dirs.iter()
        .filter(|d| {
            !diffs.iter().any(|f| match f {
                FileDiff::Renamed { from, to, .. } => {
                    beneath(&d.path, from) || beneath(&d.path, to)
                }
                other => beneath(&d.path, other.sort_key()),
            }) && !dirs
                .iter()
                .any(|o| o.added == d.added && beneath(&d.path, &o.path))
        })
        .cloned()
        .collect()
}

/// Writes one line per empty directory created or removed, after a patch
/// (`new empty directory d/`, `deleted empty directory d/`; `git apply`
/// skips such lines) or, with `name_status`, as `A\td/` / `D\td/`.
pub fn write_dirs(dirs: &[DirChange], name_status: bool, out: &mut dyn Write) -> io::Result<()> {
    for d in dirs {
        let mut name = d.path.clone();
        name.push(b'/');
        let name = quote_path("", &name);
        match (name_status, d.added) {
            (true, true) => out.write_all(b"A\t")?,
            (true, false) => out.write_all(b"D\t")?,
            (false, true) => out.write_all(b"new empty directory ")?,
            (false, false) => out.write_all(b"deleted empty directory ")?,
        }
        out.write_all(&name)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// Writes `git diff --name-status` lines: `A`, `M`, `D`, `T` or `R100`,
/// a tab, and the path(s).
pub fn write_name_status(diffs: &[FileDiff], out: &mut dyn Write) -> io::Result<()> {
    for d in diffs {
        let (status, paths): (&str, Vec<&[u8]>) = match d {
            FileDiff::Added { path, .. } => ("A", vec![path]),
            FileDiff::Deleted { path, .. } => ("D", vec![path]),
            FileDiff::Modified { path, .. } => ("M", vec![path]),
            FileDiff::TypeChanged { path, .. } => ("T", vec![path]),
            FileDiff::Renamed { from, to, .. } => ("R100", vec![from, to]),
        };
        out.write_all(status.as_bytes())?;
        for p in paths {
            out.write_all(b"\t")?;
            out.write_all(&quote_path("", p))?;
        }
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// Lines added and removed between two texts (`None` when either is binary).
fn line_counts(old: &[u8], new: &[u8]) -> Option<(usize, usize)> {
    if is_binary(old) || is_binary(new) {
        return None;
    }
    let diff = similar::TextDiff::configure()
        .algorithm(similar::Algorithm::Myers)
        .diff_lines(old, new);
    let mut ins = 0;
    let mut del = 0;
    for c in diff.iter_all_changes() {
        match c.tag() {
            similar::ChangeTag::Insert => ins += 1,
            similar::ChangeTag::Delete => del += 1,
            similar::ChangeTag::Equal => {}
        }
    }
    Some((ins, del))
}

/// The width `--stat` lines fit in, as git's default for a pipe.
pub const STAT_WIDTH: usize = 80;

/// `name` cut to `width` bytes the way `git diff --stat` cuts it: `...`
/// and its tail, from a `/` when the tail holds one. Names are quoted
/// (ASCII), so any byte is a character boundary.
fn cut_name(name: &[u8], width: usize) -> Vec<u8> {
    if name.len() <= width {
        return name.to_vec();
    }
    let keep = width.saturating_sub(3);
    let mut tail = &name[name.len() - keep..];
    if let Some(i) = tail.iter().position(|&b| b == b'/') {
        tail = &tail[i..];
    }
    let mut out = b"...".to_vec();
    out.extend_from_slice(tail);
    out
}

/// `count` of `max` as a bar of at most `width` characters (git's
/// `scale_linear`: a non-zero count is at least one character).
fn scale(count: usize, max: usize, width: usize) -> usize {
    if count == 0 || max <= width {
        return count;
    }
    1 + count * width.saturating_sub(1) / max
}

/// Writes a `git diff --stat`-like summary: one line per path with its
/// inserted/deleted line counts and a +/- bar, then the totals. Lines fit
/// [`STAT_WIDTH`] columns as git's do: the bar gets what the names leave,
/// at least 3/8 of the room, scaled to the largest change; a name that
/// still does not fit is cut to `...` and its tail. A change of
/// permission bits alone counts 0 lines, as git shows a mode change.
pub fn write_stat(diffs: &[FileDiff], out: &mut dyn Write) -> io::Result<()> {
    let empty: &[u8] = &[];
    let mut rows = Vec::new();
    for d in diffs {
        let (name, old, new): (Vec<u8>, &[u8], &[u8]) = match d {
            FileDiff::Added { path, new } => (quote_path("", path), empty, &new.data),
            FileDiff::Deleted { path, old } => (quote_path("", path), &old.data, empty),
            FileDiff::Modified { path, old, new } | FileDiff::TypeChanged { path, old, new } => {
                (quote_path("", path), &old.data, &new.data)
            }
            FileDiff::Renamed { from, to, side } => {
                let mut n = quote_path("", from);
                n.extend_from_slice(b" => ");
                n.extend_from_slice(&quote_path("", to));
                (n, &side.data, &side.data)
            }
        };
        rows.push((name, old.len(), new.len(), line_counts(old, new)));
    }
    let max_change = rows
        .iter()
        .filter_map(|r| r.3.map(|(i, d)| i + d))
        .max()
        .unwrap_or(0);
    let binary = rows.iter().any(|r| r.3.is_none());
    let number_width = max_change.to_string().len().max(if binary { 3 } else { 1 });
    // " " name " | " number " " bar
    let room = STAT_WIDTH.saturating_sub(5 + number_width);
    let mut name_width = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let mut graph_width = max_change;
    if name_width + graph_width > room {
        graph_width = graph_width.min(room.saturating_sub(name_width).max(room * 3 / 8));
        name_width = name_width.min(room - graph_width);
    }
    let (mut total_ins, mut total_del) = (0usize, 0usize);
    for (name, old_len, new_len, counts) in &rows {
        let name = cut_name(name, name_width);
        out.write_all(b" ")?;
        out.write_all(&name)?;
        out.write_all(&vec![b' '; name_width.saturating_sub(name.len())])?;
        match counts {
            Some((ins, del)) => {
                total_ins += ins;
                total_del += del;
                // As git: both signs show when both kinds of line changed.
                let mut total = scale(ins + del, max_change, graph_width);
                if *ins > 0 && *del > 0 && total < 2 {
                    total = 2;
                }
                let plus = if ins < del {
                    scale(*ins, max_change, graph_width).min(total)
                } else {
                    total - scale(*del, max_change, graph_width).min(total)
                };
                write!(out, " | {:>number_width$}", ins + del)?;
                if total > 0 {
                    write!(out, " {}{}", "+".repeat(plus), "-".repeat(total - plus))?;
                }
                writeln!(out)?;
            }
            None => writeln!(
                out,
                " | {:<number_width$} {old_len} -> {new_len} bytes",
                "Bin"
            )?,
        }
    }
    let files = rows.len();
    write!(
        out,
        " {files} file{} changed",
        if files == 1 { "" } else { "s" }
    )?;
    if total_ins > 0 || files == 0 {
        write!(
            out,
            ", {total_ins} insertion{}(+)",
            if total_ins == 1 { "" } else { "s" }
        )?;
    }
    if total_del > 0 {
        write!(
            out,
            ", {total_del} deletion{}(-)",
            if total_del == 1 { "" } else { "s" }
        )?;
    }
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(data: &[u8]) -> Side {
        Side {
            mode: 0o100644,
            data: data.to_vec(),
            perm: 0o644,
        }
    }

    #[test]
    fn quoting_matches_git() {
        assert_eq!(quote_path("a/", b"plain name"), b"a/plain name");
        assert_eq!(quote_path("a/", b"caf\xe9"), b"\"a/caf\\351\"");
        assert_eq!(quote_path("", b"tab\there"), b"\"tab\\there\"");
    }

    #[test]
    fn patch_of_a_modification() {
        let d = vec![FileDiff::Modified {
            path: b"f".to_vec(),
            old: file(b"a\nb\nc\n"),
            new: file(b"a\nB\nc"),
        }];
        let mut out = Vec::new();
        write_patch(&d, &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf8");
        assert_eq!(
            text,
            "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n-c\n+B\n+c\n\\ No newline at end of file\n"
        );
    }

    #[test]
    fn stat_lines_fit_80_columns_as_gits_do() {
        let long = "a/very/deep/directory/tree/with/many/levels/and/a/rather/long/file_name.rs";
        let d = vec![
            FileDiff::Added {
                path: long.as_bytes().to_vec(),
                new: file("x\n".repeat(500).as_bytes()),
            },
            FileDiff::Modified {
                path: b"short".to_vec(),
                old: file(b"a\n"),
                new: file(b"b\n"),
            },
        ];
        let mut out = Vec::new();
        write_stat(&d, &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf8");
        for line in text.lines() {
            assert!(line.len() <= STAT_WIDTH, "{line:?} is {} wide", line.len());
        }
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with(" .../"), "{text}");
        assert!(lines[0].contains("| 500 +++"), "{text}");
        assert!(lines[1].starts_with(" short"), "{text}");
        assert!(lines[1].ends_with("|   2 +-"), "{text}");
        // Short names keep their whole width and a bar of their own size.
        let mut out = Vec::new();
        write_stat(&d[1..], &mut out).expect("write");
        assert_eq!(
            String::from_utf8(out).expect("utf8"),
            " short | 2 +-\n 1 file changed, 1 insertion(+), 1 deletion(-)\n"
        );
    }

    #[test]
    fn a_permission_change_git_cannot_show_is_a_line_after_the_patch() {
        let mut private = file(b"x\n");
        private.perm = 0o600;
        let d = vec![FileDiff::Modified {
            path: b"f".to_vec(),
            old: file(b"x\n"),
            new: private,
        }];
        let mut out = Vec::new();
        write_patch(&d, &mut out).expect("write");
        assert_eq!(
            String::from_utf8(out).expect("utf8"),
            " mode change 0644 => 0600 f\n"
        );
    }

    #[test]
    fn renames_pair_identical_content() {
        let mut d = vec![
            FileDiff::Deleted {
                path: b"old".to_vec(),
                old: file(b"x\n"),
            },
            FileDiff::Added {
                path: b"new".to_vec(),
                new: file(b"x\n"),
            },
        ];
        pair_renames(&mut d);
        assert!(matches!(&d[..], [FileDiff::Renamed { .. }]));
    }
}
