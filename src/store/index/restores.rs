//! The `restores` table: the restore journal. A rewind marks its restore
//! `running` before it changes the project and `done` after, so a restore
//! a crash interrupted is found and finished at the next start.

use rusqlite::{params, OptionalExtension};

use super::codec::Uint;
use super::{Index, IndexError};

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

    /// A restore that started and did not finish (the process died during
    /// it): `(rewind turn, rewound-to turn)`; the newest when there are
    /// several.
    pub fn unfinished_restore(&self) -> Result<Option<(u64, u64)>, IndexError> {
        self.conn
            .query_row(
                "SELECT rewind_turn, rewound_to FROM restores WHERE state = 'running'
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
