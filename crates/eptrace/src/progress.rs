//! A progress bar on stderr for long reads.
//!
//! The bar is drawn only when stderr is a terminal, and only once a read has taken longer
//! than [`SHOW_AFTER`], so small traces and redirected output never see it. Positions are
//! stream byte offsets; callers update every few thousand events, not every event.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long a read runs before the bar appears.
const SHOW_AFTER: Duration = Duration::from_millis(300);

/// A byte-offset progress bar that stays hidden for short reads.
#[derive(Debug)]
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
    started: Instant,
    shown: bool,
}

impl Progress {
    /// A bar over `total` bytes (unknown for a stream); a no-op unless stderr is a terminal.
    pub(crate) fn new(total: Option<u64>) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let (bar, template) = match total {
                Some(len) => (
                    ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::hidden()),
                    "{spinner} reading {wide_bar} {binary_bytes}/{binary_total_bytes} ({eta})",
                ),
                None => (
                    ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden()),
                    "{spinner} reading {binary_bytes} ({binary_bytes_per_sec})",
                ),
            };
            if let Ok(style) = ProgressStyle::with_template(template) {
                bar.set_style(style);
            }
            bar
        });
        Progress {
            bar,
            started: Instant::now(),
            shown: false,
        }
    }

    /// Moves the bar to byte `pos`, drawing it from now on if the read has become long.
    pub(crate) fn set(&mut self, pos: u64) {
        let Some(bar) = &self.bar else { return };
        if !self.shown && self.started.elapsed() >= SHOW_AFTER {
            bar.set_draw_target(ProgressDrawTarget::stderr());
            self.shown = true;
        }
        bar.set_position(pos);
    }

    /// Removes the bar.
    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

pub(crate) use eventpipe_client::capture::Report;

/// Writes `report` to stderr: status lines in place on a terminal, one per line elsewhere.
/// `in_line` tracks whether a status line is on screen (it must be ended before a note).
pub(crate) fn say(report: Report<'_>, interactive: bool, in_line: &mut bool) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    match report {
        Report::Note(text) => {
            if std::mem::take(in_line) && interactive {
                let _ = writeln!(err);
            }
            let _ = writeln!(err, "{text}");
        }
        Report::Progress(line) if interactive => {
            *in_line = true;
            let _ = write!(err, "\r{line}\x1b[K");
        }
        Report::Progress(line) => {
            let _ = writeln!(err, "{line}");
        }
    }
}

/// Ends a status line left on screen.
pub(crate) fn end_line(interactive: bool, in_line: bool) {
    if interactive && in_line {
        use std::io::Write;
        let _ = writeln!(std::io::stderr().lock());
    }
}
