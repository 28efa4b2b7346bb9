//! The overlay's visibility rules (`opfs_fs::overlay::rules`) against a
//! naive model of two layers: the merged tree built top-down, directory by
//! directory, from the layers' full listings, as the overlay's docs state
//! it. Every path of either layer (and some beneath files and reserved
//! names) must resolve through `rules::view` as the model shows it, and
//! every merged directory must list through `rules::merge` as the model
//! lists it. The FUSE overlay, the worktree history and the worktree merge
//! all decide through these functions.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;

use opfs_fs::overlay::rules::{self, Layers, Shown};
use proptest::prelude::*;

/// An entry: which layer, whether it is a directory, and a tag telling
/// entries apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct E {
    upper: bool,
    dir: bool,
    tag: u8,
}

type Layer = BTreeMap<Vec<u8>, E>;

struct Two {
    upper: Layer,
    lower: Layer,
}

impl Layers for Two {
    type Entry = E;
    type Error = Infallible;
    fn upper(&self, path: &[u8]) -> Result<Option<E>, Infallible> {
        assert!(!rules::reserved(last(path)), "asked for a reserved name");
        Ok(self.upper.get(path).copied())
    }
    fn marker(&self, path: &[u8]) -> Result<bool, Infallible> {
        Ok(self.upper.contains_key(path))
    }
    fn lower(&self, path: &[u8]) -> Result<Option<E>, Infallible> {
        Ok(self.lower.get(path).copied())
    }
    fn is_dir(e: &E) -> bool {
        e.dir
    }
}

fn last(path: &[u8]) -> &[u8] {
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) => &path[i + 1..],
        None => path,
    }
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    if dir.is_empty() {
        return name.to_vec();
    }
    [dir, b"/", name].concat()
}

/// The names directly in `dir` of `layer`.
fn children(layer: &Layer, dir: &[u8]) -> Vec<(Vec<u8>, E)> {
    layer
        .iter()
        .filter(|(p, _)| {
            let parent = match p.iter().rposition(|&b| b == b'/') {
                Some(i) => &p[..i],
                None => &p[..0],
            };
            parent == dir
        })
        .map(|(p, e)| (last(p).to_vec(), *e))
        .collect()
}

/// The model: every merged path, with what shows there and whether the
/// lower children of it show.
fn model(two: &Two) -> BTreeMap<Vec<u8>, (E, bool)> {
    let mut out = BTreeMap::new();
    let root_through = !two.upper.contains_key(b".wh..wh..opq".as_slice());
    let mut stack = vec![(Vec::new(), root_through)];
    while let Some((dir, through)) = stack.pop() {
        let mut names: BTreeSet<Vec<u8>> = BTreeSet::new();
        for (n, _) in children(&two.upper, &dir) {
            names.insert(n);
        }
        if through {
            for (n, _) in children(&two.lower, &dir) {
                names.insert(n);
            }
        }
        for name in names {
            let p = join(&dir, &name);
            let whited = two
                .upper
                .contains_key(&join(&dir, &[b".wh.", &name[..]].concat()));
            let lower = two.lower.get(&p).filter(|_| through && !whited);
            let upper = two.upper.get(&p).filter(|_| !name.starts_with(b".wh."));
            let (shown, child_through) = match (upper, lower) {
                (Some(u), l) => {
                    let opaque = two.upper.contains_key(&join(&p, b".wh..wh..opq"));
                    (*u, u.dir && l.is_some_and(|l| l.dir) && !opaque)
                }
                (None, Some(l)) => (*l, l.dir),
                (None, None) => continue,
            };
            if shown.dir {
                stack.push((p.clone(), child_through));
            }
            out.insert(p, (shown, child_through));
        }
    }
    out
}

/// Makes a layer a tree: an entry stays only when every ancestor is a
/// directory of it.
fn tree(raw: BTreeMap<Vec<u8>, E>) -> Layer {
    let mut out = Layer::new();
    for (p, e) in raw {
        let mut ok = true;
        let mut i = 0;
        while let Some(off) = p[i..].iter().position(|&b| b == b'/') {
            let anc = &p[..i + off];
            if !out.get(anc).is_some_and(|a| a.dir) {
                ok = false;
                break;
            }
            i += off + 1;
        }
        if ok {
            out.insert(p, e);
        }
    }
    out
}

fn layer(upper: bool, names: &'static [&'static str]) -> impl Strategy<Value = Layer> {
    let path = prop::collection::vec(prop::sample::select(names), 1..=3)
        .prop_map(|c| c.join("/").into_bytes());
    prop::collection::btree_map(path, (any::<bool>(), any::<u8>()), 0..24).prop_map(move |m| {
        tree(
            m.into_iter()
                .map(|(p, (dir, tag))| {
                    // Reserved upper names are marker files.
                    let dir = dir && !(upper && rules::reserved(last(&p)));
                    (p, E { upper, dir, tag })
                })
                .collect(),
        )
    })
}

const UPPER: &[&str] = &["a", "b", ".wh.a", ".wh.b", ".wh..wh..opq", ".wh.x"];
const LOWER: &[&str] = &["a", "b", "x", ".wh.a"];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_rules_agree_with_a_model_of_two_layers(upper in layer(true, UPPER), lower in layer(false, LOWER)) {
        let two = Two { upper, lower };
        let want = model(&two);
        // Every path of either layer, and one beneath each.
        let mut paths: BTreeSet<Vec<u8>> = BTreeSet::new();
        for p in two.upper.keys().chain(two.lower.keys()) {
            paths.insert(p.clone());
            paths.insert(join(p, b"a"));
        }
        for p in &paths {
            let (shown, through) = match rules::view(&two, p) {
                Ok(v) => v,
                Err(e) => match e {},
            };
            match want.get(p) {
                Some((e, t)) => {
                    let got = match shown {
                        Shown::Upper(g) => { prop_assert!(g.upper); g }
                        Shown::Lower(g) => { prop_assert!(!g.upper); g }
                        Shown::Absent => panic!("{} absent, model shows it", String::from_utf8_lossy(p)),
                    };
                    prop_assert_eq!(got, *e, "{}", String::from_utf8_lossy(p));
                    prop_assert_eq!(through, *t, "{}", String::from_utf8_lossy(p));
                }
                None => prop_assert_eq!(shown, Shown::Absent, "{}", String::from_utf8_lossy(p)),
            }
        }
        // Every merged directory (the root too) lists as the model does.
        // The root's listing takes the lower layer as showing: the root's
        // own opaque marker decides, as `merge` reads it.
        let mut dirs: Vec<(Vec<u8>, bool)> = vec![(Vec::new(), true)];
        for (p, (e, t)) in &want {
            if e.dir {
                dirs.push((p.clone(), *t));
            }
        }
        for (dir, through) in dirs {
            let up = if dir.is_empty() || two.upper.get(&dir).is_some_and(|u| u.dir) {
                children(&two.upper, &dir)
            } else {
                Vec::new()
            };
            let listing = match rules::merge(up, through, || Ok::<_, Infallible>(children(&two.lower, &dir))) {
                Ok(l) => l,
                Err(e) => match e {},
            };
            let got: BTreeMap<Vec<u8>, E> = listing
                .items
                .into_iter()
                .map(|(n, s)| match s {
                    Shown::Upper(e) | Shown::Lower(e) => (join(&dir, &n), e),
                    Shown::Absent => panic!("an absent item"),
                })
                .collect();
            let model_children: BTreeMap<Vec<u8>, E> = want
                .iter()
                .filter(|(p, _)| {
                    let parent = match p.iter().rposition(|&b| b == b'/') {
                        Some(i) => &p[..i],
                        None => &p[..0],
                    };
                    parent == dir.as_slice()
                })
                .map(|(p, (e, _))| (p.clone(), *e))
                .collect();
            prop_assert_eq!(got, model_children, "listing of {:?}", String::from_utf8_lossy(&dir));
        }
    }
}
