//! What gc must keep whatever the policy says ([`Pin`]: an unfinished
//! restore, a worktree's base). The lock that keeps the pins still while
//! gc decides is [`crate::state::lock::PinsLock`].

use crate::store::{Index, IndexError, StateDir};

/// A turn gc must keep, with every turn after it, whatever the
/// [`Retention`] asks: a rewind point something still needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pin {
    /// A restore marked `running` that did not finish (the process died
    /// during a rewind): the next start finishes it from the records of
    /// every turn from `rewound_to` on.
    Restore {
        /// The turn the restore is recorded as.
        rewind_turn: u64,
        /// The turn whose start it restores (the pinned turn).
        rewound_to: u64,
    },
    /// A worktree's base turn: its lower layer is the project at the start
    /// of that turn, read from the records of every turn from it on.
    Worktree {
        /// The worktree's name.
        name: String,
        /// Its base turn (the pinned turn).
        base: u64,
    },
}

impl Pin {
    /// The oldest turn this pin keeps.
    pub fn turn(&self) -> u64 {
        match self {
            Pin::Restore { rewound_to, .. } => *rewound_to,
            Pin::Worktree { base, .. } => *base,
        }
    }

    /// Why turns from `cut` on were kept, for [`GcReport::note`].
    pub(super) fn note(&self, cut: u64) -> String {
        match self {
            Pin::Restore {
                rewind_turn,
                rewound_to,
            } => format!(
                "kept turns from {cut}: the unfinished rewind to turn {rewound_to} (recorded as turn {rewind_turn}) needs them"
            ),
            Pin::Worktree { name, base } => format!(
                "kept turns from {cut}: worktree {name:?} shows the project at turn {base} (`opfs worktree discard {name}` releases them)"
            ),
        }
    }
}

/// Every pin of the store behind `index`: the unfinished restores, and the
/// base turn of each worktree of the project whose state dir is `state`.
///
/// Errors: the index cannot be read.
pub fn pins(index: &Index, state: &StateDir) -> Result<Vec<Pin>, IndexError> {
    let mut pins: Vec<Pin> = index
        .running_restores()?
        .into_iter()
        .map(|(rewind_turn, rewound_to)| Pin::Restore {
            rewind_turn,
            rewound_to,
        })
        .collect();
    pins.extend(
        crate::worktree::list(state)
            .into_iter()
            .map(|(wt, meta)| Pin::Worktree {
                name: wt.name,
                base: meta.base_turn,
            }),
    );
    Ok(pins)
}
