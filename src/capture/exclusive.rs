//! [`Exclusive`]: the proof that no mutation of the project is in flight.

/// Held while no mutation through the mount is in flight and none can
/// start: the mount's quiesce gate, taken for writing
/// ([`opfs_fs::Controller::quiesce`]). A turn boundary, a rewind, a merge
/// and each step of gc inside the daemon run while one lives, so every
/// mutation falls wholly in one turn and nothing writes beside them.
/// Released on drop (dropping it lets the waiting mutations go on).
#[must_use = "mutations resume as soon as the Exclusive is dropped"]
pub struct Exclusive {
    _gate: opfs_fs::QuiesceGuard,
}

impl Exclusive {
    /// Holds `gate`, the mount's quiesce gate taken for writing, until
    /// this value is dropped.
    pub fn quiesced(gate: opfs_fs::QuiesceGuard) -> Exclusive {
        Exclusive { _gate: gate }
    }
}

impl std::fmt::Debug for Exclusive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Exclusive")
    }
}
