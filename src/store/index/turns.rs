//! The `turns` table: opening, closing and reading turns.

use rusqlite::{params, OptionalExtension};

use super::codec::Uint;
use super::{now_ns, Index, IndexError};
use crate::record::{Turn, TurnKind};

/// The columns [`Index::turn_from_row`] reads, in order.
const TURN_COLUMNS: &str = "number, kind, label, external_id, started_at, ended_at, rewound_to";

impl Index {
    /// The turn in a row of [`TURN_COLUMNS`]; the inner `Err` says what is
    /// malformed.
    fn turn_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<Turn, String>> {
        let kind: String = r.get(1)?;
        let Some(kind) = TurnKind::parse(&kind) else {
            return Ok(Err(format!("unknown turn kind {kind:?}")));
        };
        Ok(Ok(Turn {
            number: r.get::<_, Uint>(0)?.0,
            kind,
            label: r.get(2)?,
            external_id: r.get(3)?,
            started_at: r.get(4)?,
            ended_at: r.get(5)?,
            rewound_to: r.get::<_, Option<Uint>>(6)?.map(|v| v.0),
        }))
    }

    /// The one turn `sql` (selecting [`TURN_COLUMNS`]) finds, if any.
    fn one_turn(&self, sql: &str, p: impl rusqlite::Params) -> Result<Option<Turn>, IndexError> {
        let row = self
            .conn
            .query_row(sql, p, Self::turn_from_row)
            .optional()
            .map_err(self.err())?;
        row.transpose().map_err(|w| self.corrupt(w))
    }

    /// The newest turn, if any.
    ///
    /// Errors: [`IndexError::Corrupt`] for a malformed row, else SQLite's.
    pub fn last_turn(&self) -> Result<Option<Turn>, IndexError> {
        let sql = format!("SELECT {TURN_COLUMNS} FROM turns ORDER BY number DESC LIMIT 1");
        self.one_turn(&sql, [])
    }

    /// The turn numbered `number`, if it exists.
    ///
    /// Errors: [`IndexError::Corrupt`] for a malformed row, else SQLite's.
    pub fn turn(&self, number: u64) -> Result<Option<Turn>, IndexError> {
        let sql = format!("SELECT {TURN_COLUMNS} FROM turns WHERE number = ?1");
        self.one_turn(&sql, [Uint(number)])
    }

    /// The newest turn carrying external id `id`.
    ///
    /// Errors: [`IndexError::Corrupt`] for a malformed row, else SQLite's.
    pub fn turn_by_external_id(&self, id: &str) -> Result<Option<Turn>, IndexError> {
        let sql = format!(
            "SELECT {TURN_COLUMNS} FROM turns WHERE external_id = ?1 ORDER BY number DESC LIMIT 1"
        );
        self.one_turn(&sql, [id])
    }

    /// Turns, newest first; at most `limit` of them (`None`: all).
    ///
    /// Errors: [`IndexError::Corrupt`] for a malformed row, else SQLite's.
    pub fn turns(&self, limit: Option<u64>) -> Result<Vec<Turn>, IndexError> {
        let sql = format!("SELECT {TURN_COLUMNS} FROM turns ORDER BY number DESC LIMIT ?1");
        let mut stmt = self.conn.prepare(&sql).map_err(self.err())?;
        // SQLite reads a negative limit as none; a limit past i64::MAX is
        // none too.
        let limit = limit.map_or(-1, |l| i64::try_from(l).unwrap_or(-1));
        let rows = stmt
            .query_map([limit], Self::turn_from_row)
            .map_err(self.err())?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row.map_err(self.err())?.map_err(|w| self.corrupt(w))?);
        }
        Ok(out)
    }

    /// Closes turn `open` (if given) and opens turn `open + 1` (or 1) in one
    /// transaction. Returns the new turn's number.
    ///
    /// Durable after `Ok` to the level the index was opened with; after
    /// `Err` neither change is. Errors: SQLite's (a turn number past
    /// `i64::MAX` is refused).
    pub fn next_turn(
        &mut self,
        open: Option<u64>,
        kind: TurnKind,
        label: Option<&str>,
        external_id: Option<&str>,
        rewound_to: Option<u64>,
    ) -> Result<u64, IndexError> {
        self.next_turn_closing(open, None, kind, label, external_id, rewound_to)
    }

    /// [`Index::next_turn`], also setting the label of the turn it closes
    /// to `closing_label` when given (`opfs turn -m`), in the same
    /// transaction: after `Ok` the closed turn has that label, after
    /// `Err` nothing changed. Errors as [`Index::next_turn`].
    pub fn next_turn_closing(
        &mut self,
        open: Option<u64>,
        closing_label: Option<&str>,
        kind: TurnKind,
        label: Option<&str>,
        external_id: Option<&str>,
        rewound_to: Option<u64>,
    ) -> Result<u64, IndexError> {
        let now = now_ns();
        let number = open.map_or(1, |n| n.saturating_add(1));
        self.in_transaction(|tx| {
            if let Some(open) = open {
                tx.execute(
                    "UPDATE turns SET ended_at = ?1 WHERE number = ?2",
                    params![now, Uint(open)],
                )?;
                if let Some(l) = closing_label {
                    tx.execute(
                        "UPDATE turns SET label = ?1 WHERE number = ?2",
                        params![(!l.is_empty()).then_some(l), Uint(open)],
                    )?;
                }
            }
            tx.execute(
                "INSERT INTO turns(number, kind, label, external_id, started_at, rewound_to)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    Uint(number),
                    kind.as_str(),
                    label,
                    external_id,
                    now,
                    rewound_to.map(Uint)
                ],
            )?;
            Ok(number)
        })
    }

    /// The oldest turn still in the index (retention may have dropped
    /// older ones), if any.
    pub fn first_turn(&self) -> Result<Option<u64>, IndexError> {
        self.conn
            .query_row("SELECT min(number) FROM turns", [], |r| {
                r.get::<_, Option<Uint>>(0)
            })
            .map(|v| v.map(|n| n.0))
            .map_err(self.err())
    }

    /// The oldest turn that is open or ended after `ns` (the turns after
    /// it are younger still); `u64::MAX` when there is none. Retention's
    /// minimum age (`crate::gc`).
    ///
    /// Errors: SQLite's.
    pub fn first_turn_ended_after(&self, ns: i64) -> Result<u64, IndexError> {
        self.conn
            .query_row(
                "SELECT min(number) FROM turns WHERE ended_at IS NULL OR ended_at > ?1",
                [ns],
                |r| r.get::<_, Option<Uint>>(0),
            )
            .map(|v| v.map_or(u64::MAX, |n| n.0))
            .map_err(self.err())
    }

    /// Sets the label of turn `number` (`None` removes it): `opfs label`.
    /// Returns false when there is no such turn (nothing changed).
    ///
    /// Durable after `Ok` to the level the index was opened with; one
    /// statement, so a crash leaves the old label or the new one. Errors:
    /// SQLite's (a busy database waits up to the busy timeout).
    pub fn set_label(&mut self, number: u64, label: Option<&str>) -> Result<bool, IndexError> {
        let n = self
            .conn
            .execute(
                "UPDATE turns SET label = ?1 WHERE number = ?2",
                params![label, Uint(number)],
            )
            .map_err(self.err())?;
        Ok(n > 0)
    }

    /// Opens a turn for a prompt sent from inside `opfs run`'s sandbox
    /// (`docs/sandbox.md`, "Turns opened from inside"), in one transaction:
    /// when the open turn `open` recorded nothing and is an agent turn
    /// that was opened from inside (`origin = 'sandbox'`) or is
    /// `placeholder` (the turn `opfs run` opened for the session with a
    /// label of its own), it is relabelled (`label`, `external_id`) and
    /// stays open; else `open` is closed and a new agent turn, marked
    /// `origin = 'sandbox'`, is opened. Returns the open turn's number and
    /// whether it is a new one.
    ///
    /// Durable after `Ok` to the level the index was opened with; after
    /// `Err` nothing changed. Errors: SQLite's.
    pub fn sandbox_turn(
        &mut self,
        open: u64,
        label: Option<&str>,
        external_id: Option<&str>,
        placeholder: Option<u64>,
    ) -> Result<(u64, bool), IndexError> {
        let now = now_ns();
        self.in_transaction(|tx| {
            let reusable: bool = tx
                .query_row(
                    "SELECT kind = 'agent' AND (origin = 'sandbox' OR number = ?2)
                     AND NOT EXISTS (SELECT 1 FROM preimages WHERE turn = ?1)
                     AND NOT EXISTS (SELECT 1 FROM ranges WHERE turn = ?1)
                     AND NOT EXISTS (SELECT 1 FROM links WHERE turn = ?1)
                     AND NOT EXISTS (SELECT 1 FROM outside_edits WHERE turn = ?1)
                     AND NOT EXISTS (SELECT 1 FROM repo_moves WHERE turn = ?1)
                 FROM turns WHERE number = ?1",
                    params![Uint(open), placeholder.map(Uint)],
                    |r| Ok(r.get::<_, Option<bool>>(0)?.unwrap_or(false)),
                )
                .optional()?
                .unwrap_or(false);
            if reusable {
                tx.execute(
                    "UPDATE turns SET label = ?1, external_id = ?2 WHERE number = ?3",
                    params![label, external_id, Uint(open)],
                )?;
                return Ok((open, false));
            }
            let number = open.saturating_add(1);
            tx.execute(
                "UPDATE turns SET ended_at = ?1 WHERE number = ?2",
                params![now, Uint(open)],
            )?;
            tx.execute(
                "INSERT INTO turns(number, kind, label, external_id, started_at, origin)
                 VALUES (?1, 'agent', ?2, ?3, ?4, 'sandbox')",
                params![Uint(number), label, external_id, now],
            )?;
            Ok((number, true))
        })
    }

    /// The number of the `keep`-th newest turn opened from outside the
    /// sandbox (`origin` unset), or `None` when there are fewer: where
    /// count-based retention may cut (turns opened from inside are not
    /// counted, so no number of them pushes older turns out).
    ///
    /// Errors: SQLite's.
    pub fn nth_newest_outside_turn(&self, keep: u64) -> Result<Option<u64>, IndexError> {
        // A file no build of this version has opened for writing yet has
        // no `origin` column, and no turn opened from inside.
        let sql = if self.has_column("turns", "origin")? {
            "SELECT number FROM turns WHERE origin IS NULL ORDER BY number DESC LIMIT 1 OFFSET ?1"
        } else {
            "SELECT number FROM turns ORDER BY number DESC LIMIT 1 OFFSET ?1"
        };
        self.conn
            .query_row(sql, [Uint(keep.max(1) - 1)], |r| r.get::<_, Uint>(0))
            .optional()
            .map(|v| v.map(|n| n.0))
            .map_err(self.err())
    }
}
