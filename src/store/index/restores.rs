//! The `restores` table: the restore journal. A rewind marks its restore
//! `running` before it changes the project and `done` after, so a restore
//! a crash interrupted is found and finished at the next start. A restore
//! that ended otherwise says how in `outcome` (`docs/format.md`):
//! `rolled_back` (it failed and put back what it changed), `resumed` (a
//! later rewind turn finished it), `aborted` (a later rewind turn put back
//! what it changed), `superseded` (a newer rewind ran over it), or, still
//! `running`, `stopped`: it failed midway and could not roll back, and
//! waits for `opfs rewind --resume` or `--abort`.

use rusqlite::{params, OptionalExtension};

use super::codec::Uint;
use super::{Index, IndexError};

/// A restore that failed midway and could not put back what it changed
/// ([`Index::stop_restore`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoppedRestore {
    /// The rewind turn that records it.
    pub rewind_turn: u64,
    /// The turn whose start it was restoring.
    pub rewound_to: u64,
    /// Planned paths that hold their target.
    pub restored: u64,
    /// Planned paths.
    pub total: u64,
    /// Why it stopped, and what was left as it was.
    pub detail: String,
}

impl std::fmt::Display for StoppedRestore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.restored == 0 {
            // Nothing holds its target; a step a crash cut short may have
            // left one path partly written (the rewind's turn holds its
            // state before).
            return write!(
                f,
                "the rewind to turn {} (turn {}) stopped: 0 of {} paths restored ({}); none of \
                 them holds its rewound state yet: run `opfs rewind --resume` to finish it or \
                 `opfs rewind --abort` to put back anything it changed",
                self.rewound_to, self.rewind_turn, self.total, self.detail
            );
        }
        write!(
            f,
            "the rewind to turn {} (turn {}) stopped: {} of {} paths restored ({}); the project \
             is half restored: run `opfs rewind --resume` to finish it or `opfs rewind --abort` \
             to put back what it changed",
            self.rewound_to, self.rewind_turn, self.restored, self.total, self.detail
        )
    }
}

impl Index {
    /// Marks the start of the restore recorded as `rewind_turn`.
    ///
    /// Durable after `Ok` to the level the index was opened with.
    pub fn begin_restore(&self, rewind_turn: u64, rewound_to: u64) -> Result<(), IndexError> {
        self.conn
            .execute(
                "INSERT OR REPLACE INTO restores(rewind_turn, rewound_to, state) VALUES (?1, ?2, 'running')",
                params![Uint(rewind_turn), Uint(rewound_to)],
            )
            .map(drop)
            .map_err(self.err())
    }

    /// Marks the restore recorded as `rewind_turn` (to the start of
    /// `rewound_to`) rolled back with `detail`, whether or not it was
    /// marked running: a rewind that failed before it wrote anything.
    ///
    /// Durable after `Ok` to the level the index was opened with.
    pub fn abandon_restore(
        &self,
        rewind_turn: u64,
        rewound_to: u64,
        detail: &str,
    ) -> Result<(), IndexError> {
        self.conn
            .execute(
                "INSERT OR REPLACE INTO restores(rewind_turn, rewound_to, state, outcome, detail)
                 VALUES (?1, ?2, 'done', 'rolled_back', ?3)",
                params![Uint(rewind_turn), Uint(rewound_to), detail],
            )
            .map(drop)
            .map_err(self.err())
    }

    /// Marks the restore recorded as `rewind_turn` complete.
    ///
    /// Durable after `Ok` to the level the index was opened with.
    pub fn finish_restore(&self, rewind_turn: u64) -> Result<(), IndexError> {
        self.conn
            .execute(
                "UPDATE restores SET state = 'done' WHERE rewind_turn = ?1",
                [Uint(rewind_turn)],
            )
            .map(drop)
            .map_err(self.err())
    }

    /// Whether a restore was ever marked running for `rewind_turn` (it may
    /// since have been marked done).
    pub fn restore_started(&self, rewind_turn: u64) -> Result<bool, IndexError> {
        self.conn
            .query_row(
                "SELECT 1 FROM restores WHERE rewind_turn = ?1",
                [Uint(rewind_turn)],
                |_| Ok(()),
            )
            .optional()
            .map(|r| r.is_some())
            .map_err(self.err())
    }

    /// Marks the restore recorded as `rewind_turn` ended with `outcome`
    /// (`rolled_back`, `resumed`, `aborted`, `superseded`) and `detail`
    /// (what happened, for people): it is no longer pending.
    ///
    /// Durable after `Ok` to the level the index was opened with.
    pub fn end_restore(
        &self,
        rewind_turn: u64,
        outcome: &str,
        detail: Option<&str>,
    ) -> Result<(), IndexError> {
        self.conn
            .execute(
                "UPDATE restores SET state = 'done', outcome = ?2, detail = ?3
                 WHERE rewind_turn = ?1",
                params![Uint(rewind_turn), outcome, detail],
            )
            .map(drop)
            .map_err(self.err())
    }

    /// Marks the restore recorded as `rewind_turn` stopped on a failure it
    /// could not roll back: `restored` of `total` planned paths hold their
    /// target, `detail` says why it stopped. It stays pending (`running`)
    /// but no start finishes it by itself ([`Index::stopped_restore`]).
    ///
    /// Durable after `Ok` to the level the index was opened with.
    pub fn stop_restore(
        &self,
        rewind_turn: u64,
        restored: u64,
        total: u64,
        detail: &str,
    ) -> Result<(), IndexError> {
        self.conn
            .execute(
                "UPDATE restores SET outcome = 'stopped', restored = ?2, total = ?3, detail = ?4
                 WHERE rewind_turn = ?1",
                params![Uint(rewind_turn), Uint(restored), Uint(total), detail],
            )
            .map(drop)
            .map_err(self.err())
    }

    /// How the restore recorded as `rewind_turn` stands, for listings:
    /// `running`, `done`, or its outcome (`rolled_back`, `stopped`,
    /// `resumed`, `aborted`, `superseded`); `None` when it has no row (a
    /// rewind turn a crash closed before its restore began).
    pub fn restore_outcome(&self, rewind_turn: u64) -> Result<Option<String>, IndexError> {
        self.conn
            .query_row(
                "SELECT coalesce(outcome, state) FROM restores WHERE rewind_turn = ?1",
                [Uint(rewind_turn)],
                |r| r.get::<_, String>(0),
            )
            .optional()
            .map_err(self.err())
    }

    /// The newest restore that stopped on a failure and waits for the user
    /// (`opfs rewind --resume` or `--abort`), if any.
    pub fn stopped_restore(&self) -> Result<Option<StoppedRestore>, IndexError> {
        self.conn
            .query_row(
                "SELECT rewind_turn, rewound_to, restored, total, detail FROM restores
                 WHERE state = 'running' AND outcome = 'stopped'
                 ORDER BY rewind_turn DESC LIMIT 1",
                [],
                |r| {
                    Ok(StoppedRestore {
                        rewind_turn: r.get::<_, Uint>(0)?.0,
                        rewound_to: r.get::<_, Uint>(1)?.0,
                        restored: r.get::<_, Option<Uint>>(2)?.map_or(0, |u| u.0),
                        total: r.get::<_, Option<Uint>>(3)?.map_or(0, |u| u.0),
                        detail: r.get::<_, Option<String>>(4)?.unwrap_or_default(),
                    })
                },
            )
            .optional()
            .map_err(self.err())
    }

    /// A restore that started and did not finish because the process died
    /// during it (not one that [stopped](Index::stop_restore)): `(rewind
    /// turn, rewound-to turn)`; the newest when there are several.
    pub fn unfinished_restore(&self) -> Result<Option<(u64, u64)>, IndexError> {
        self.conn
            .query_row(
                "SELECT rewind_turn, rewound_to FROM restores
                 WHERE state = 'running' AND outcome IS NULL
                 ORDER BY rewind_turn DESC LIMIT 1",
                [],
                |r| Ok((r.get::<_, Uint>(0)?.0, r.get::<_, Uint>(1)?.0)),
            )
            .optional()
            .map_err(self.err())
    }

    /// Every restore marked running, as `(rewind turn, rewound-to turn)`,
    /// the one that needs the oldest turn first (what `opfs gc` must keep).
    pub fn running_restores(&self) -> Result<Vec<(u64, u64)>, IndexError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT rewind_turn, rewound_to FROM restores WHERE state = 'running'
                 ORDER BY rewound_to",
            )
            .map_err(self.err())?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, Uint>(0)?.0, r.get::<_, Uint>(1)?.0)))
            .map_err(self.err())?;
        rows.collect::<Result<_, _>>().map_err(self.err())
    }
}
