//! Progress bars (`indicatif`) on stderr for what can run for more than a
//! second (verify, rewind, the export's baseline, gc). Shown only when
//! stdout and stderr are both terminals and not with `--json`, and only
//! once the work has run for [`DELAY`], so quick commands, scripts and
//! pipes see nothing. The library reports progress through a callback
//! (`done, total`); this is the CLI's side of it.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::Ctx;

/// How long the work runs before a bar appears.
pub const DELAY: Duration = Duration::from_secs(1);

/// A bar that appears after [`DELAY`], if it is to be shown at all.
pub struct Bar {
    what: &'static str,
    shown: bool,
    started: Instant,
    bar: Option<ProgressBar>,
}

impl Bar {
    /// A bar for `what` (`"checking blobs"`), drawn only when `ctx`'s
    /// stdout and stderr are terminals and the output is not JSON.
    pub fn new(ctx: &Ctx, what: &'static str) -> Bar {
        Bar {
            what,
            shown: Bar::wanted(ctx),
            started: Instant::now(),
            bar: None,
        }
    }

    /// Whether a bar would be drawn for `ctx` at all (a command may skip
    /// asking the daemon for progress when not).
    pub fn wanted(ctx: &Ctx) -> bool {
        ctx.env.term.stderr_tty && ctx.env.term.stdout_tty && !ctx.format.is_json()
    }

    /// True when this bar may be drawn (see [`Bar::wanted`]).
    pub fn is_shown(&self) -> bool {
        self.shown
    }

    /// The callback the library calls: `done` of `total` units.
    pub fn update(&mut self, done: u64, total: u64) {
        if !self.shown {
            return;
        }
        if self.bar.is_none() && self.started.elapsed() >= DELAY && done < total {
            let b = ProgressBar::new(total);
            if let Ok(style) =
                ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({eta} left)")
            {
                b.set_style(style.progress_chars("=> "));
            }
            b.set_message(self.what);
            self.bar = Some(b);
        }
        if let Some(b) = &self.bar {
            b.set_length(total);
            b.set_position(done);
        }
    }

    /// The callback for work whose total is not known: `done` units so
    /// far (a spinner with the count).
    pub fn tick(&mut self, done: u64) {
        if !self.shown {
            return;
        }
        if self.bar.is_none() && self.started.elapsed() >= DELAY {
            let b = ProgressBar::new_spinner();
            if let Ok(style) = ProgressStyle::with_template("{spinner} {msg}: {pos} ({elapsed})") {
                b.set_style(style);
            }
            b.set_message(self.what);
            self.bar = Some(b);
        }
        if let Some(b) = &self.bar {
            b.set_position(done);
        }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}
