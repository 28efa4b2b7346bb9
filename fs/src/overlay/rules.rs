//! The overlay's visibility rules, pure: which entry of the upper and the
//! lower layer the merged view shows, given what the layers hold. No I/O
//! of its own: the callers hand the layers in as closures (the FUSE
//! overlay reads its upper directory and its [`super::Lower`]; the core's
//! worktree history reads the upper layer as its journal says it was at a
//! turn; the worktree merge walks the upper layer).
//!
//! The upper layer is a plain directory tree (the aufs / fuse-overlayfs
//! unprivileged convention):
//!
//! - a **whiteout** for `d/x` is an entry `d/.wh.x` of the upper layer: the
//!   lower `d/x` does not show;
//! - an **opaque** directory `d` holds the entry `d/.wh..wh..opq`: no
//!   lower child of `d` shows;
//! - a whiteout hides only the lower entry: an upper entry of the same
//!   name shows whether or not the whiteout is there;
//! - an upper name starting with `.wh.` is **reserved** and never shows; a
//!   lower name starting with `.wh.` shows (unless whited out itself);
//! - the lower children of a merged directory show when it is a directory
//!   of the lower layer that shows through (not whited out, below
//!   directories whose lower children show) and, when the upper layer
//!   also holds it, that upper entry is a directory and not opaque.
//!
//! The merged path of an entry is its upper path and, where a lower entry
//! shows through, its lower path (renames copy their source up whole), so
//! the rules are stated per path.

use std::collections::{BTreeMap, BTreeSet};

use crate::inode::child as join;

/// The prefix of whiteout names (and of every reserved upper name).
pub const PREFIX: &[u8] = b".wh.";

/// The opaque marker's name.
pub const OPAQUE: &[u8] = b".wh..wh..opq";

/// True for a name the overlay keeps for itself in the upper layer (a
/// whiteout or the opaque marker): the merged view never shows it as an
/// upper entry.
pub fn reserved(name: &[u8]) -> bool {
    name.starts_with(PREFIX)
}

/// The whiteout name for `name` (`.wh.` + `name`).
pub fn whiteout_name(name: &[u8]) -> Vec<u8> {
    let mut out = PREFIX.to_vec();
    out.extend_from_slice(name);
    out
}

/// What a name of the upper layer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Name<'a> {
    /// The opaque marker of its directory.
    Opaque,
    /// A whiteout hiding the lower entry of this name (may be empty for
    /// the bare `.wh.`, which hides nothing a directory can hold).
    Whiteout(&'a [u8]),
    /// An ordinary entry, shown as itself.
    Plain,
}

/// What the upper name `name` is.
pub fn classify(name: &[u8]) -> Name<'_> {
    if name == OPAQUE {
        return Name::Opaque;
    }
    match name.strip_prefix(PREFIX) {
        Some(hidden) => Name::Whiteout(hidden),
        None => Name::Plain,
    }
}

/// The upper path of the whiteout of `dir/name`.
pub fn whiteout_path(dir: &[u8], name: &[u8]) -> Vec<u8> {
    join(dir, &whiteout_name(name))
}

/// The upper path of the opaque marker of directory `dir` (the root's
/// when empty).
pub fn opaque_path(dir: &[u8]) -> Vec<u8> {
    join(dir, OPAQUE)
}

/// The merged path an upper path stands for: a whiteout the name it hides,
/// an opaque marker its directory, anything else itself. `None` for the
/// root, the root's opaque marker (the root is never a change) and a bare
/// `.wh.`.
pub fn view_path_of(upper: &[u8]) -> Option<Vec<u8>> {
    if upper.is_empty() {
        return None;
    }
    let (dir, name) = match upper.iter().rposition(|&b| b == b'/') {
        Some(i) => (&upper[..i], &upper[i + 1..]),
        None => (&upper[..0], upper),
    };
    match classify(name) {
        Name::Opaque => (!dir.is_empty()).then(|| dir.to_vec()),
        Name::Whiteout(hidden) if !hidden.is_empty() => Some(join(dir, hidden)),
        Name::Whiteout(_) => None,
        Name::Plain => Some(upper.to_vec()),
    }
}

/// Every upper path the view of `q` (not the root) depends on: the root's
/// opaque marker, each prefix of `q` and its whiteout, and each proper
/// prefix's opaque marker. Inserted into `out`.
pub fn needed_for(q: &[u8], out: &mut BTreeSet<Vec<u8>>) {
    out.insert(OPAQUE.to_vec());
    let mut prefix: Vec<u8> = Vec::new();
    let comps: Vec<&[u8]> = q.split(|&b| b == b'/').collect();
    for (i, name) in comps.iter().enumerate() {
        let p = join(&prefix, name);
        out.insert(whiteout_path(&prefix, name));
        out.insert(p.clone());
        if i + 1 < comps.len() {
            out.insert(opaque_path(&p));
        }
        prefix = p;
    }
}

/// The entries of the upper and the lower layer that show for one name of
/// a merged directory: the result of [`resolve`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved<U, L> {
    /// The upper entry (never one with a reserved name).
    pub upper: Option<U>,
    /// The lower entry that shows through.
    pub lower: Option<L>,
}

/// Resolves `name` in a merged directory. `upper(name)` reads the upper
/// directory's entry (asked only when the name is not reserved, and only
/// when the directory has an upper side: the caller's closure says
/// `None` otherwise); `whited()` says whether the upper directory holds
/// the whiteout of `name`; `lower_visible()` whether the lower children of
/// the directory show ([`children_show`]); `lower()` reads the lower entry
/// (asked only when it can show). The closures are called in this order,
/// each at most once, and the first error is returned.
pub fn resolve<U, L, E>(
    name: &[u8],
    upper: impl FnOnce() -> Result<Option<U>, E>,
    whited: impl FnOnce() -> Result<bool, E>,
    lower_visible: impl FnOnce() -> Result<bool, E>,
    lower: impl FnOnce() -> Result<Option<L>, E>,
) -> Result<Resolved<U, L>, E> {
    let upper = if reserved(name) { None } else { upper()? };
    let lower = if !whited()? && lower_visible()? {
        lower()?
    } else {
        None
    };
    Ok(Resolved { upper, lower })
}

/// Whether the lower children of a merged directory show: it has a lower
/// directory that shows (`lower_dir`), and its upper entry, if any
/// (`upper`: `Some(is_dir)`), is a directory that `opaque()` says is not
/// opaque (asked only then).
pub fn children_show<E>(
    lower_dir: bool,
    upper: Option<bool>,
    opaque: impl FnOnce() -> Result<bool, E>,
) -> Result<bool, E> {
    if !lower_dir {
        return Ok(false);
    }
    match upper {
        None => Ok(true),
        Some(false) => Ok(false),
        Some(true) => Ok(!opaque()?),
    }
}

/// Where the entry a merged path shows comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shown<T> {
    /// The upper layer's entry.
    Upper(T),
    /// The lower layer's entry, showing through.
    Lower(T),
    /// Nothing: the path is not in the merged view.
    Absent,
}

/// One layer's answers for [`view`], by path (relative, `/`-separated).
pub trait Layers {
    /// An entry of either layer.
    type Entry;
    /// The error of a read.
    type Error;
    /// The upper layer's entry at `path` (never asked for a reserved
    /// name).
    fn upper(&self, path: &[u8]) -> Result<Option<Self::Entry>, Self::Error>;
    /// True when the upper layer holds the reserved entry `path` (a
    /// whiteout or an opaque marker).
    fn marker(&self, path: &[u8]) -> Result<bool, Self::Error>;
    /// The lower layer's entry at `path`.
    fn lower(&self, path: &[u8]) -> Result<Option<Self::Entry>, Self::Error>;
    /// True when `entry` is a directory.
    fn is_dir(entry: &Self::Entry) -> bool;
}

/// What the merged view shows at `q` (not the root), walking down from
/// the root through [`resolve`] and [`children_show`], and whether the
/// lower children of `q` show.
pub fn view<L: Layers>(layers: &L, q: &[u8]) -> Result<(Shown<L::Entry>, bool), L::Error> {
    let mut lower_visible = !layers.marker(OPAQUE)?;
    let mut prefix: Vec<u8> = Vec::new();
    let comps: Vec<&[u8]> = q.split(|&b| b == b'/').collect();
    for (i, name) in comps.iter().enumerate() {
        let p = join(&prefix, name);
        let shown_lower = lower_visible;
        let found = resolve(
            name,
            || layers.upper(&p),
            || layers.marker(&whiteout_path(&prefix, name)),
            || Ok(shown_lower),
            || layers.lower(&p),
        )?;
        let lower_dir = found.lower.as_ref().is_some_and(L::is_dir);
        let (shown, upper) = match (found.upper, found.lower) {
            (Some(u), _) => {
                let is_dir = L::is_dir(&u);
                (Shown::Upper(u), Some(is_dir))
            }
            (None, Some(l)) => (Shown::Lower(l), None),
            (None, None) => (Shown::Absent, None),
        };
        let is_dir = match &shown {
            Shown::Upper(e) | Shown::Lower(e) => L::is_dir(e),
            Shown::Absent => false,
        };
        let children = children_show(lower_dir && is_dir, upper, || {
            layers.marker(&opaque_path(&p))
        })?;
        if i + 1 == comps.len() {
            return Ok((shown, children));
        }
        if !is_dir {
            return Ok((Shown::Absent, false));
        }
        lower_visible = children;
        prefix = p;
    }
    Ok((Shown::Absent, false))
}

/// A merged directory listing, from the upper directory's names (with
/// their values) and the lower directory's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing<T> {
    /// The entries, sorted by name, without reserved upper names.
    pub items: BTreeMap<Vec<u8>, Shown<T>>,
    /// The reserved names of the upper directory (whiteouts and the
    /// opaque marker), in the order given.
    pub reserved: Vec<Vec<u8>>,
    /// The upper directory holds the opaque marker.
    pub opaque: bool,
}

impl<T> Default for Listing<T> {
    fn default() -> Self {
        Listing {
            items: BTreeMap::new(),
            reserved: Vec::new(),
            opaque: false,
        }
    }
}

/// Merges a directory's listing: every upper entry (`upper`, without `.`
/// and `..`) whose name is not reserved, then, when `lower_visible` and the
/// upper directory is not opaque, each entry of `lower()` (asked only
/// then) not already there and not whited out.
pub fn merge<T, E>(
    upper: impl IntoIterator<Item = (Vec<u8>, T)>,
    lower_visible: bool,
    lower: impl FnOnce() -> Result<Vec<(Vec<u8>, T)>, E>,
) -> Result<Listing<T>, E> {
    let mut out = Listing::default();
    let mut hidden: Vec<Vec<u8>> = Vec::new();
    for (name, v) in upper {
        match classify(&name) {
            Name::Opaque => out.opaque = true,
            Name::Whiteout(h) => hidden.push(h.to_vec()),
            Name::Plain => {
                out.items.insert(name, Shown::Upper(v));
                continue;
            }
        }
        out.reserved.push(name);
    }
    if lower_visible && !out.opaque {
        hidden.sort_unstable();
        for (name, v) in lower()? {
            if out.items.contains_key(&name) || hidden.binary_search(&name).is_ok() {
                continue;
            }
            out.items.insert(name, Shown::Lower(v));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upper_names_map_to_the_paths_they_stand_for() {
        assert_eq!(view_path_of(b"d/.wh.x"), Some(b"d/x".to_vec()));
        assert_eq!(view_path_of(b".wh.top"), Some(b"top".to_vec()));
        assert_eq!(view_path_of(b"d/.wh..wh..opq"), Some(b"d".to_vec()));
        assert_eq!(view_path_of(b".wh..wh..opq"), None);
        assert_eq!(view_path_of(b"d/e/f"), Some(b"d/e/f".to_vec()));
        assert_eq!(view_path_of(b""), None);
    }

    #[test]
    fn the_view_of_a_path_needs_its_ancestors_whiteouts_and_markers() {
        let mut n = BTreeSet::new();
        needed_for(b"a/b", &mut n);
        let got: Vec<&[u8]> = n.iter().map(Vec::as_slice).collect();
        let want: [&[u8]; 6] = [
            b".wh..wh..opq",
            b".wh.a",
            b"a",
            b"a/.wh..wh..opq",
            b"a/.wh.b",
            b"a/b",
        ];
        assert_eq!(got, want);
    }
}
