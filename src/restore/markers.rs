//! Conflict markers, as git writes them, for a text file a restore would
//! otherwise leave as a conflict (`--markers`).
//!
//! - A **rewind** (or `opfs restore`) of a file changed behind the mount:
//!   opfs keeps no copy of the bytes it last saw, so there is no common
//!   ancestor; the markers are two-way, per differing run of lines: what
//!   the project holds now between `<<<<<<< project now` and `=======`,
//!   the state restored between `=======` and `>>>>>>> turn N`. Lines the
//!   two share are written once.
//! - A **worktree merge** of a file both sides changed: the three-way
//!   merge's conflicting hunks, `<<<<<<< project` / `=======` /
//!   `>>>>>>> worktree NAME` (the clean hunks merged).
//!
//! Either way only regular files whose two sides are text (no NUL byte in
//! their first 8,000 bytes, as git decides) get markers; the file keeps
//! the permission bits it has now. The marked file is a target state like
//! any other, so the rewind or merge turn records the file's current bytes
//! first and a rewind to that turn gives them back.

use crate::record::PreImage;
use crate::store::{BlobError, BlobStore};

/// Marker lines are this long, as git's.
const LEN: usize = 7;

/// True when `data` looks like text to git: no NUL in its first 8,000
/// bytes.
pub fn is_text(data: &[u8]) -> bool {
    !data[..data.len().min(8000)].contains(&0)
}

fn marker(out: &mut Vec<u8>, c: u8, label: Option<&str>) {
    if !out.is_empty() && out.last() != Some(&b'\n') {
        out.push(b'\n');
    }
    out.extend(std::iter::repeat_n(c, LEN));
    if let Some(l) = label {
        out.push(b' ');
        out.extend_from_slice(l.as_bytes());
    }
    out.push(b'\n');
}

/// The two-way marked file of `now` (the project's bytes) against `then`
/// (the bytes restored), labelled `ours` and `theirs`: `None` when they
/// are equal or either is not text.
pub fn two_way(now: &[u8], then: &[u8], ours: &str, theirs: &str) -> Option<Vec<u8>> {
    if now == then || !is_text(now) || !is_text(then) {
        return None;
    }
    let lines = now.iter().chain(then).filter(|&&b| b == b'\n').count() + 2;
    let patch = diffy::DiffOptions::new()
        .set_context_len(lines)
        .create_patch_bytes(now, then);
    let mut out = Vec::with_capacity(now.len() + then.len());
    let mut mine: Vec<&[u8]> = Vec::new();
    let mut other: Vec<&[u8]> = Vec::new();
    let flush = |out: &mut Vec<u8>, mine: &mut Vec<&[u8]>, other: &mut Vec<&[u8]>| {
        if mine.is_empty() && other.is_empty() {
            return;
        }
        marker(out, b'<', Some(ours));
        mine.drain(..).for_each(|l| out.extend_from_slice(l));
        marker(out, b'=', None);
        other.drain(..).for_each(|l| out.extend_from_slice(l));
        marker(out, b'>', Some(theirs));
    };
    for hunk in patch.hunks() {
        for line in hunk.lines() {
            match line {
                diffy::Line::Context(l) => {
                    flush(&mut out, &mut mine, &mut other);
                    out.extend_from_slice(l);
                }
                diffy::Line::Delete(l) => mine.push(l),
                diffy::Line::Insert(l) => other.push(l),
            }
        }
    }
    flush(&mut out, &mut mine, &mut other);
    Some(out)
}

/// The three-way merge of `ours` (the project) and `theirs` (a worktree)
/// from `ancestor`: `Ok(merged)` when clean, `Err(marked)` with git-style
/// markers labelled `ours_label` and `theirs_label` when hunks conflict,
/// `None` when a side is not text.
pub fn three_way(
    ancestor: &[u8],
    ours: &[u8],
    theirs: &[u8],
    ours_label: &str,
    theirs_label: &str,
) -> Option<Result<Vec<u8>, Vec<u8>>> {
    if ![ancestor, ours, theirs].iter().all(|b| is_text(b)) {
        return None;
    }
    let mut opts = diffy::MergeOptions::new();
    opts.set_conflict_style(diffy::ConflictStyle::Merge);
    match opts.merge_bytes(ancestor, ours, theirs) {
        Ok(merged) => Some(Ok(merged)),
        Err(marked) => Some(Err(relabel(&marked, ours_label, theirs_label))),
    }
}

/// diffy labels its markers `ours` and `theirs`: name the two sides.
fn relabel(marked: &[u8], ours: &str, theirs: &str) -> Vec<u8> {
    let open = [&[b'<'; LEN][..], b" ours\n"].concat();
    let close = [&[b'>'; LEN][..], b" theirs\n"].concat();
    let mut out = Vec::with_capacity(marked.len());
    for line in marked.split_inclusive(|&b| b == b'\n') {
        if line == open.as_slice() {
            marker(&mut out, b'<', Some(ours));
        } else if line == close.as_slice() {
            marker(&mut out, b'>', Some(theirs));
        } else {
            out.extend_from_slice(line);
        }
    }
    out
}

/// `bytes` stored as a file target with permission bits `perm`.
///
/// Errors: the blob store fails.
pub fn file_target(blobs: &BlobStore, bytes: &[u8], perm: u32) -> Result<PreImage, BlobError> {
    let (blob, size) = blobs.put(&mut &bytes[..], bytes.len() as u64)?;
    Ok(PreImage::File {
        blob,
        size,
        perm,
        ino: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_way_marks_each_differing_run_and_keeps_shared_lines_once() {
        let now = b"a\nb\nc\nd\n";
        let then = b"a\nB\nc\nd\ne\n";
        let marked = two_way(now, then, "project now", "turn 2").expect("text");
        assert_eq!(
            String::from_utf8(marked).expect("utf8"),
            "a\n<<<<<<< project now\nb\n=======\nB\n>>>>>>> turn 2\nc\nd\n\
             <<<<<<< project now\n=======\ne\n>>>>>>> turn 2\n"
        );
    }

    #[test]
    fn two_way_ends_a_last_line_without_newline_before_a_marker() {
        let marked = two_way(b"x", b"y", "a", "b").expect("text");
        assert_eq!(marked, b"<<<<<<< a\nx\n=======\ny\n>>>>>>> b\n");
    }

    #[test]
    fn binary_gets_no_markers() {
        assert!(two_way(b"a\0", b"b", "a", "b").is_none());
        assert!(three_way(b"", b"\0", b"x", "a", "b").is_none());
    }

    #[test]
    fn three_way_names_the_sides() {
        let got = three_way(b"a\nb\n", b"a\nP\n", b"a\nW\n", "project", "worktree w")
            .expect("text")
            .expect_err("conflict");
        assert_eq!(
            String::from_utf8(got).expect("utf8"),
            "a\n<<<<<<< project\nP\n=======\nW\n>>>>>>> worktree w\n"
        );
    }
}
