//! The async profiler's polls, written as complete slices on their threads.

use super::json::{Duration, Integer, JsonEvent, Micros, PollArgs};
use super::*;

impl<W: Write> Converter<W> {
    pub(super) fn poll_span(&mut self, span: &PollSpan) -> Result<()> {
        self.summary.poll_spans += 1;
        // The name is the frame's short name (or `frame#N` before its AsyncFrame event):
        // the frame id is not repeated in args, the full name is the AsyncFrame instant's.
        let name = match self.frame_names.get(&span.frame) {
            Some(name) => name.clone(),
            None => span.frame.to_string(),
        };
        let start = ticks_to_ns(&self.trace, span.start);
        let end = ticks_to_ns(&self.trace, span.end);
        self.w.event(&JsonEvent {
            name: &name,
            // No category: a poll is known by its `ctx`.
            cat: None,
            ph: "X",
            ts: Some(Micros(start)),
            dur: Some(Duration { start, end }),
            pid: self
                .poll_pids
                .get(&span.thread)
                .copied()
                .unwrap_or(self.default_pid),
            tid: span.thread,
            args: PollArgs {
                ctx: Integer(span.ctx.0),
                ended: (span.ended != SpanEnd::Suspend).then(|| span.ended.as_str()),
                start_exact: (!span.start_exact).then_some(false),
            },
        })
    }
}
