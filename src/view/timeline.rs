//! Every record from some turn on, grouped by path: what a [`super::Reader`]
//! resolves states from.

use std::collections::BTreeMap;

use crate::record::PreImage;
use crate::store::{Index, IndexError};

/// Every record from some turn on, grouped by path, each path's records in
/// turn order.
///
/// Loaded raw ([`Timeline::load`]) it may hold [`PreImage::Ranged`]
/// records; [`Reader::timeline`](super::Reader::timeline) puts them together into file records.
#[derive(Debug, Default)]
pub struct Timeline {
    pub(super) by_path: BTreeMap<Vec<u8>, Vec<(u64, PreImage)>>,
    pub(super) from: u64,
}

impl Timeline {
    /// Loads every record with turn >= `from` (one query), as stored.
    pub fn load(index: &Index, from: u64) -> Result<Timeline, IndexError> {
        let mut by_path: BTreeMap<Vec<u8>, Vec<(u64, PreImage)>> = BTreeMap::new();
        for (turn, path, pre) in index.records_since(from)? {
            by_path.entry(path).or_default().push((turn, pre));
        }
        Ok(Timeline { by_path, from })
    }

    /// The state of `path` when turn `turn` began, if a record says so
    /// (`None`: unchanged since then, so the project's current state).
    pub fn state_at(&self, path: &[u8], turn: u64) -> Option<&PreImage> {
        self.by_path
            .get(path)?
            .iter()
            .find(|(t, _)| *t >= turn)
            .map(|(_, p)| p)
    }

    /// The record of `path` made in exactly `turn`.
    pub fn record(&self, path: &[u8], turn: u64) -> Option<&PreImage> {
        self.by_path
            .get(path)?
            .iter()
            .find(|(t, _)| *t == turn)
            .map(|(_, p)| p)
    }

    /// Paths with a record in turns `from..=to`, sorted.
    pub fn paths_in(&self, from: u64, to: u64) -> Vec<Vec<u8>> {
        self.by_path
            .iter()
            .filter(|(_, recs)| recs.iter().any(|(t, _)| (from..=to).contains(t)))
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// Records per turn: turn → paths recorded in it, sorted.
    pub fn by_turn(&self) -> BTreeMap<u64, Vec<Vec<u8>>> {
        let mut out: BTreeMap<u64, Vec<Vec<u8>>> = BTreeMap::new();
        for (path, recs) in &self.by_path {
            for (t, _) in recs {
                out.entry(*t).or_default().push(path.clone());
            }
        }
        out
    }

    /// Adds `path`'s record in `turn` unless the path already has one in
    /// that turn (the first record of a turn wins, as in the index): for a
    /// reader that also reads records not yet in the index (a capture log).
    pub fn add(&mut self, turn: u64, path: &[u8], pre: PreImage) {
        if turn < self.from {
            return;
        }
        let recs = self.by_path.entry(path.to_vec()).or_default();
        match recs.binary_search_by_key(&turn, |(t, _)| *t) {
            Ok(_) => {}
            Err(at) => recs.insert(at, (turn, pre)),
        }
    }

    /// The direct children of directory `dir` (`b""`: the root) that have a
    /// record, with their state when `turn` began (`None`: recorded only
    /// before `turn`, so unchanged since). Names are single components.
    /// Cost: the recorded paths under `dir`, not the tree.
    pub fn children_at(&self, dir: &[u8], turn: u64) -> Vec<(Vec<u8>, Option<&PreImage>)> {
        let prefix = if dir.is_empty() {
            Vec::new()
        } else {
            let mut p = dir.to_vec();
            p.push(b'/');
            p
        };
        self.by_path
            .range(prefix.clone()..)
            .take_while(|(p, _)| p.starts_with(&prefix))
            .filter(|(p, _)| p.len() > prefix.len() && !p[prefix.len()..].contains(&b'/'))
            .map(|(p, recs)| {
                let state = recs.iter().find(|(t, _)| *t >= turn).map(|(_, s)| s);
                (p[prefix.len()..].to_vec(), state)
            })
            .collect()
    }

    /// Every path in the timeline, with its records.
    pub fn iter(&self) -> impl Iterator<Item = (&Vec<u8>, &Vec<(u64, PreImage)>)> {
        self.by_path.iter()
    }
}
