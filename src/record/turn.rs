//! Turns: the unit of history (design §1). A turn is one agent step (or
//! one rewind, or one merge); its records hold each path's state when the
//! turn began.

/// The kind of a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnKind {
    /// Agent work (normally one user message).
    Agent,
    /// The mutations a rewind made.
    Rewind,
    /// A worktree merge.
    Merge,
}

impl TurnKind {
    /// The word stored in the index and shown to users.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnKind::Agent => "agent",
            TurnKind::Rewind => "rewind",
            TurnKind::Merge => "merge",
        }
    }

    /// The kind whose word ([`TurnKind::as_str`]) is `s`; `None` for any
    /// other word.
    pub fn parse(s: &str) -> Option<TurnKind> {
        match s {
            "agent" => Some(TurnKind::Agent),
            "rewind" => Some(TurnKind::Rewind),
            "merge" => Some(TurnKind::Merge),
            _ => None,
        }
    }
}

/// One turn's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    /// Turn number (starts at 1, only grows).
    pub number: u64,
    /// Agent, rewind or merge.
    pub kind: TurnKind,
    /// The user's label, if any.
    pub label: Option<String>,
    /// An external id (e.g. the agent's message id), if any.
    pub external_id: Option<String>,
    /// Start, ns since the Unix epoch.
    pub started_at: i64,
    /// End, ns since the Unix epoch; `None` while open.
    pub ended_at: Option<i64>,
    /// For rewind turns: the turn whose start was restored.
    pub rewound_to: Option<u64>,
}
