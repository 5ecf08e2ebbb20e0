//! Async-aware CPU stacks: a sample taken inside an instrumented future's poll gets that
//! poll's async callstack in place of the executor's frames that drove it.
//!
//! A CPU sample's `AsyncContext` names the innermost poll running when it was taken; the
//! async profiler's poll span of that context gives the logical callstack, task root
//! first (docs/async-profiler-format.md, "Correlation"). The native stack of such a sample
//! reads
//!
//! ```text
//! thread start … executor … Profiled<A>::poll  a's code … Profiled<B>::poll  b's code … leaf
//!                           └ outermost wrapper          └ innermost wrapper
//! ```
//!
//! and becomes `thread start … executor`, `async A`, `async B`, `b's code … leaf`: the
//! frames from the outermost poll wrapper to the innermost one are what the async frames
//! say better (the state machines' `poll` functions, the wrappers themselves), and the
//! native frames on either side keep the executor's and the leaf code's detail.
//!
//! A poll wrapper is a frame whose function name contains both `eventpipe_profiler::futures`
//! and `poll`, whatever its kind (so inlined wrappers count, and tests can name .NET-style
//! methods so).
//!
//! **No wrapper in the native stack** (frame pointers lost on the way up, or a binary
//! that cannot be symbolized): the async frames go directly above all the native frames,
//! i.e. at the root. That is the rule above with the wrapper assumed beyond the last frame
//! the walk reached, which is where it usually went missing. It keeps the leaf's self time
//! where it was and groups such samples under their task, which is what is left to say about
//! them when their native frames have no names; the executor's frames, if any, then appear
//! under the async ones.

use crate::async_trace::{AsyncFrameId, AsyncTrace};
use crate::profile::{Frame, FrameKind};

/// Whether `frame` is the async profiler's poll wrapper.
pub(crate) fn is_poll_wrapper(frame: &Frame) -> bool {
    frame.function.contains("eventpipe_profiler::futures") && frame.function.contains("poll")
}

/// The profile frame of async frame `id`: `async NAME`, with its source location.
pub(crate) fn async_frame(trace: &AsyncTrace, id: AsyncFrameId) -> Frame {
    let described = trace.frames.get(&id);
    Frame {
        function: format!("async {}", trace.frame_name(id)),
        module: None,
        file: described.and_then(|f| f.file.clone()),
        line: described.and_then(|f| f.line),
        kind: FrameKind::Async,
    }
}

/// Replaces the poll wrappers' part of root-first `native` by root-first `async_frames`
/// (see the module doc).
pub(crate) fn splice(native: Vec<Frame>, async_frames: Vec<Frame>) -> Vec<Frame> {
    let outermost = native.iter().position(is_poll_wrapper);
    let innermost = native.iter().rposition(is_poll_wrapper);
    let (above, below) = match (outermost, innermost) {
        (Some(first), Some(last)) => (first, last + 1),
        _ => (0, 0),
    };
    let mut out = Vec::with_capacity(native.len() + async_frames.len());
    let mut native = native.into_iter();
    out.extend(native.by_ref().take(above));
    out.extend(async_frames);
    out.extend(native.skip(below - above));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(names: &[&str]) -> Vec<Frame> {
        names
            .iter()
            .map(|n| Frame::named(*n, FrameKind::Native))
            .collect()
    }

    fn names(frames: &[Frame]) -> Vec<&str> {
        frames.iter().map(|f| f.function.as_str()).collect()
    }

    const OUTER: &str =
        "<eventpipe_profiler::futures::Profiled<F> as core::future::future::Future>::poll";

    #[test]
    fn the_wrappers_and_what_lies_between_them_become_the_async_frames() {
        let native = frames(&[
            "main",
            "executor::block_on",
            OUTER,
            "app::serve::{{closure}}",
            OUTER,
            "app::handle::{{closure}}",
            "memcpy",
        ]);
        let out = splice(native, frames(&["async app::serve", "async app::handle"]));
        assert_eq!(
            names(&out),
            [
                "main",
                "executor::block_on",
                "async app::serve",
                "async app::handle",
                "app::handle::{{closure}}",
                "memcpy"
            ]
        );
    }

    #[test]
    fn one_wrapper_is_both_the_outermost_and_the_innermost() {
        let native = frames(&["main", OUTER, "leaf"]);
        let out = splice(native, frames(&["async a"]));
        assert_eq!(names(&out), ["main", "async a", "leaf"]);
        // A wrapper as the leaf: nothing below it.
        let out = splice(frames(&["main", OUTER]), frames(&["async a"]));
        assert_eq!(names(&out), ["main", "async a"]);
    }

    #[test]
    fn without_a_wrapper_the_async_frames_go_at_the_root() {
        let native = frames(&["app+0x10", "app+0x20", "leaf"]);
        let out = splice(native, frames(&["async a", "async b"]));
        assert_eq!(
            names(&out),
            ["async a", "async b", "app+0x10", "app+0x20", "leaf"]
        );
    }

    #[test]
    fn wrappers_are_recognised_by_crate_path_and_poll() {
        let named = |n: &str| Frame::named(n, FrameKind::Native);
        assert!(is_poll_wrapper(&named(OUTER)));
        assert!(is_poll_wrapper(&named(
            "eventpipe_profiler::futures::poll_inner"
        )));
        assert!(!is_poll_wrapper(&named(
            "eventpipe_profiler::futures::record"
        )));
        assert!(!is_poll_wrapper(&named("tokio::runtime::task::poll")));
    }
}
