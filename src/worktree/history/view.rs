//! The view of a path at a turn boundary: the overlay's rules
//! ([`opfs_fs::overlay::rules`]) over the upper layer's states then and
//! the base.

use std::cell::RefCell;

use opfs_fs::overlay::rules;

use crate::history::HistoryError;
use crate::record::PreImage;
use crate::view::Version;

use super::{present, Layer, Seen, UpperAt};

/// The view of `q` (not the root) when the upper layer is `up` and the
/// base's state of a path is `base(path)`, and whether the lower children
/// of `q` show: the overlay's rules ([`rules::view`]).
pub(super) fn view_of(
    up: &UpperAt,
    q: &[u8],
    base: &mut BaseOf<'_>,
) -> Result<(Seen, bool), HistoryError> {
    let layers = AtTurn {
        up,
        base: RefCell::new(base),
    };
    let (shown, children) = rules::view(&layers, q)?;
    let seen = match shown {
        rules::Shown::Upper(version) => Seen {
            version,
            layer: Layer::Upper,
        },
        rules::Shown::Lower(version) => Seen {
            version,
            layer: Layer::Lower,
        },
        rules::Shown::Absent => Seen::absent(),
    };
    Ok((seen, children))
}

/// The two layers as [`view_of`] reads them: the upper layer's states at
/// one turn boundary, and the base.
struct AtTurn<'a> {
    up: &'a UpperAt,
    base: RefCell<&'a mut BaseOf<'a>>,
}

/// The base's state of a path, as [`view_of`] is handed it.
type BaseOf<'a> = dyn FnMut(&[u8]) -> Result<PreImage, HistoryError> + 'a;

impl rules::Layers for AtTurn<'_> {
    type Entry = Version;
    type Error = HistoryError;

    fn upper(&self, path: &[u8]) -> Result<Option<Version>, HistoryError> {
        Ok(self
            .up
            .get(path)
            .filter(|v| !matches!(v.state, PreImage::Absent))
            .cloned())
    }

    fn marker(&self, path: &[u8]) -> Result<bool, HistoryError> {
        Ok(present(self.up, path))
    }

    fn lower(&self, path: &[u8]) -> Result<Option<Version>, HistoryError> {
        let mut base = self.base.borrow_mut();
        Ok(match (*base)(path)? {
            PreImage::Absent => None,
            lower => Some(Version::recorded(lower)),
        })
    }

    fn is_dir(v: &Version) -> bool {
        matches!(v.state, PreImage::Dir { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Layer, UpperAt};
    use super::*;

    fn file(b: u8) -> Version {
        Version::recorded(PreImage::File {
            blob: [b; 32],
            size: 1,
            perm: 0o644,
            ino: 0,
        })
    }

    fn dir() -> Version {
        Version::recorded(PreImage::Dir { perm: 0o755 })
    }

    /// The base: `d/` (with `d/x`), `f`, `e/` (with `e/y`).
    fn base(p: &[u8]) -> Result<PreImage, HistoryError> {
        Ok(match p {
            b"d" | b"e" => PreImage::Dir { perm: 0o755 },
            b"d/x" | b"f" | b"e/y" => PreImage::File {
                blob: [9; 32],
                size: 1,
                perm: 0o644,
                ino: 0,
            },
            _ => PreImage::Absent,
        })
    }

    fn seen(up: &[(&str, Version)], q: &str) -> (PreImage, Layer, bool) {
        let up: UpperAt = up
            .iter()
            .map(|(p, v)| (p.as_bytes().to_vec(), v.clone()))
            .collect();
        let (s, lower) = view_of(&up, q.as_bytes(), &mut base).expect("view");
        (s.version.state, s.layer, lower)
    }

    #[test]
    fn the_view_follows_the_overlays_rules() {
        let absent = PreImage::Absent;
        // Nothing in the upper layer: the base shows.
        assert_eq!(seen(&[], "d/x").1, Layer::Lower);
        assert!(seen(&[], "d").2, "a lower directory shows its children");
        // A whiteout hides the lower entry, and everything under it.
        assert_eq!(seen(&[(".wh.d", file(0))], "d").0, absent);
        assert_eq!(seen(&[(".wh.d", file(0))], "d/x").0, absent);
        // An upper entry shows even with its whiteout there (the crash-safe
        // order of the overlay makes the whiteout first).
        assert_eq!(
            seen(&[(".wh.f", file(0)), ("f", file(1))], "f"),
            (file(1).state, Layer::Upper, false)
        );
        // A copied-up directory merges; an opaque one hides the base's
        // children but shows its own.
        assert_eq!(seen(&[("d", dir())], "d/x").1, Layer::Lower);
        let opaque = [
            ("d", dir()),
            ("d/.wh..wh..opq", file(0)),
            ("d/new", file(2)),
        ];
        assert_eq!(seen(&opaque, "d/x").0, absent);
        assert_eq!(seen(&opaque, "d/new").0, file(2).state);
        assert!(!seen(&opaque, "d").2);
        // An upper file over a lower directory hides its children; an upper
        // directory over a lower file shows none of the base beneath.
        assert_eq!(seen(&[("e", file(3))], "e/y").0, absent);
        assert!(!seen(&[("f", dir())], "f").2);
        // A lower directory whited out and made again in the upper layer:
        // its own children show, the base's do not.
        assert_eq!(
            seen(&[(".wh.d", file(0)), ("d", dir()), ("d/n", file(4))], "d/n").0,
            file(4).state
        );
        assert_eq!(
            seen(&[(".wh.d", file(0)), ("d", dir())], "d/x").0,
            absent,
            "a whited-out lower directory under a new upper one stays hidden"
        );
        // Upper names starting with `.wh.` never show.
        assert_eq!(seen(&[("d/.wh.x", file(0))], "d/.wh.x").0, absent);
    }
}
