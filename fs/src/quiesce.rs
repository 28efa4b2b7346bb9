//! The quiesce gate: a readers-writer lock whose read side every mutating
//! callback holds from `MutationHook::before` until the backing mutation is
//! done, and whose write side [`crate::Controller::quiesce`] hands out.
//!
//! It prefers writers: once a quiesce is waiting, new mutations wait behind
//! it, so a quiesce cannot be starved by a steady stream of writes. The write
//! guard owns an `Arc` of the gate, so it can outlive the `Controller` it came
//! from and be moved between threads.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};

#[derive(Default)]
struct State {
    readers: usize,
    writer: bool,
    writers_waiting: usize,
}

/// The lock itself. Callbacks take the read side; the controller the write side.
#[derive(Default)]
pub(crate) struct Gate {
    state: Mutex<State>,
    changed: Condvar,
}

impl Gate {
    fn lock(&self) -> MutexGuard<'_, State> {
        // No code path panics while holding this mutex; if one ever did, the
        // counters are still consistent (they are updated in single steps).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed.wait(guard).unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the read side; blocks while a quiesce is held or waiting.
    /// Must not be called twice on one thread without dropping the first guard.
    pub(crate) fn read(&self) -> ReadGuard<'_> {
        let mut state = self.lock();
        while state.writer || state.writers_waiting > 0 {
            state = self.wait(state);
        }
        state.readers += 1;
        ReadGuard { gate: self }
    }

    /// Takes the write side; returns once no mutation is in flight.
    pub(crate) fn write(self: &Arc<Self>) -> QuiesceGuard {
        let mut state = self.lock();
        state.writers_waiting += 1;
        while state.writer || state.readers > 0 {
            state = self.wait(state);
        }
        state.writers_waiting -= 1;
        state.writer = true;
        QuiesceGuard {
            gate: Arc::clone(self),
        }
    }
}

/// Read side of the gate, held by one mutating callback.
pub(crate) struct ReadGuard<'a> {
    gate: &'a Gate,
}

impl Drop for ReadGuard<'_> {
    fn drop(&mut self) {
        let mut state = self.gate.lock();
        state.readers -= 1;
        // Only a quiesce waits for the readers to drain (readers wait only
        // while one is held or waiting): no wake-up, no system call, when
        // none waits.
        if state.readers == 0 && state.writers_waiting > 0 {
            drop(state);
            self.gate.changed.notify_all();
        }
    }
}

/// Holds every mutation of the mount off until dropped.
///
/// While it lives, no mutating callback is between its `MutationHook::before`
/// call and the end of its backing mutation, and new mutating callbacks wait
/// (read-only callbacks still run). Dropping it lets them proceed. Do not
/// call [`crate::Controller::invalidate`] or touch the mount while holding it.
#[must_use = "the mount is quiesced only while the guard lives"]
pub struct QuiesceGuard {
    gate: Arc<Gate>,
}

impl std::fmt::Debug for QuiesceGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QuiesceGuard")
    }
}

impl Drop for QuiesceGuard {
    fn drop(&mut self) {
        let mut state = self.gate.lock();
        state.writer = false;
        drop(state);
        self.gate.changed.notify_all();
    }
}
