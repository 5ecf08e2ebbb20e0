//! `eptrace analyze`: the diagnoses in a trace ([`eventpipe_analysis`]), read in one pass
//! in time order and printed as text (findings first, then one section each) or JSON ([`Analysis`]
//! serialized).

use std::fmt::Write as _;
use std::io::{self, BufWriter, Write};

use anyhow::{Context, Result};
use std::sync::{Arc, Mutex, PoisonError};

use eventpipe_analysis::{Analysis, Analyzer, Sections, Skipped};
use nettrace::source::Input;
use nettrace::{SortedReader, TraceReader};

use crate::input::{self, InputSpec, Opened};
use crate::progress::Progress;

/// What `analyze` was asked to do.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// The trace to read.
    pub(crate) input: InputSpec,
    /// Print JSON instead of text.
    pub(crate) json: bool,
    /// How many rows each text table shows.
    pub(crate) top: usize,
    /// The sections to compute and show.
    pub(crate) sections: Sections,
    /// Whether a cut-off trace is read.
    pub(crate) cut: crate::cut::CutTraces,
    /// Polls this long or longer (ms) are long polls.
    pub(crate) long_poll_ms: f64,
}

/// Runs `eptrace analyze`.
pub(crate) fn do_analyze(config: &Config) -> Result<()> {
    let name = config.input.display_name();
    let opened = input::open(&config.input)?;
    let (analysis, cut) = match opened {
        Opened::Mapped(_) => {
            let bytes = opened.bytes().unwrap_or(&[]);
            let total = Some(bytes.len() as u64);
            let (mut analysis, cut) =
                read(crate::input::paged_reader(bytes), config, &name, total)?;
            // JSON has every stack; the text shows `top`.
            let top = if config.json { usize::MAX } else { config.top };
            let reader = config.cut.apply(crate::input::paged_reader(bytes)?);
            crate::analyze_stacks::add_stacks(&mut analysis, reader, top, config.long_poll_ms)
                .with_context(|| format!("cannot read {name}'s stacks"))?;
            (analysis, cut)
        }
        Opened::Stream(stream) => {
            let (analysis, cut) = read(TraceReader::from_read(stream), config, &name, None)?;
            if crate::analyze_stacks::has_stacks(&analysis) {
                eprintln!(
                    "note: the sections' stacks need a second read, which a stream does not \
                     allow: analyze a file for them"
                );
            }
            (analysis, cut)
        }
    };
    let text = if config.json {
        let mut s =
            serde_json::to_string_pretty(&analysis).context("cannot serialize the analysis")?;
        s.push('\n');
        s
    } else {
        render_text(&analysis, config.top)
    };
    let mut out = BufWriter::new(io::stdout().lock());
    out.write_all(text.as_bytes())
        .context("cannot write to stdout")?;
    out.flush().context("cannot write to stdout")?;
    crate::cut::verdict(&name, cut.as_ref(), analysis.events)
}

fn read<I: Input>(
    reader: nettrace::Result<TraceReader<I>>,
    config: &Config,
    name: &str,
    total: Option<u64>,
) -> Result<(Analysis, Option<nettrace::Truncation>)> {
    let reader = config
        .cut
        .apply(reader.with_context(|| format!("cannot read {name}"))?);
    let progress = Arc::new(Mutex::new(Progress::new(total)));
    let bar = Arc::clone(&progress);
    let read = pass(reader, config.sections, name, false, move |offset| {
        bar.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .set(offset);
    })
    .with_context(|| format!("cannot read {name}"));
    progress
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .finish();
    let read = read?;
    Ok((read.analysis, read.truncation))
}

/// What [`pass`] read.
pub(crate) struct Pass {
    pub(crate) analysis: Analysis,
    pub(crate) truncation: Option<nettrace::Truncation>,
    /// The whole trace's order check, when asked for.
    pub(crate) order: Option<nettrace::OrderCheck>,
}

/// One pass over `reader` for `sections`, in time order: only the events a section reads
/// are sorted; the rest are counted as they pass. `at_offset` hears the stream offset every
/// few thousand events (a progress bar). With `check_order`, the pass also checks the whole
/// trace's time order ([`SortedReader::checking_order`]): `report`'s sorted pass.
pub(crate) fn pass<I: Input>(
    reader: TraceReader<I>,
    sections: Sections,
    name: &str,
    check_order: bool,
    mut at_offset: impl FnMut(u64) + Send + 'static,
) -> nettrace::Result<Pass> {
    let skipped = Arc::new(Skipped::default());
    let tally = Arc::clone(&skipped);
    let trace = reader.trace().clone();
    let mut seen = 0u64;
    let mut reader = SortedReader::with_filter(reader, move |event| {
        seen += 1;
        if seen % 4096 == 0 {
            at_offset(event.offset().0);
        }
        let read = sections.reads(event.metadata());
        if !read {
            tally.note(event.header().timestamp);
        }
        read
    });
    if check_order {
        reader = reader.checking_order();
    }
    let mut analyzer = Analyzer::new(sections);
    while let Some(event) = reader.next_event()? {
        analyzer.observe(&event);
    }
    analyzer.add_skipped(&skipped, &trace);
    Ok(Pass {
        analysis: analyzer.finish(name),
        truncation: reader.stats().truncation,
        order: reader.order_check(),
    })
}

/// The text form: findings, then each section, then what to collect for the rest.
pub(crate) fn render_text(a: &Analysis, top: usize) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}: {:.1} s, {} events",
        a.file,
        a.duration_ms / 1000.0,
        a.events
    );
    s.push_str("\nFindings\n");
    if a.findings.is_empty() {
        s.push_str("  none: no rule fired (eptrace analyze --json lists the rules' measures)\n");
    }
    for f in &a.findings {
        let _ = writeln!(s, "  - {}\n    → {}", f.summary, f.detail);
    }
    if let Some(gc) = &a.gc {
        crate::analyze_text::gc(&mut s, gc, top);
    }
    if let Some(alloc) = &a.allocations {
        crate::analyze_text::allocations(&mut s, alloc, top);
    }
    if let Some(jit) = &a.jit {
        crate::analyze_text::jit(&mut s, jit, top);
    }
    if let Some(c) = &a.contention {
        crate::analyze_text::contention(&mut s, c, top);
    }
    if let Some(e) = &a.exceptions {
        crate::analyze_text::exceptions(&mut s, e, top);
    }
    if let Some(t) = &a.threadpool {
        crate::analyze_text::threadpool(&mut s, t, top);
    }
    if let Some(o) = &a.offcpu {
        crate::analyze_text::offcpu(&mut s, o, top);
    }
    if let Some(p) = &a.async_polls {
        crate::analyze_text::async_polls(&mut s, p, top);
    }
    if !a.missing.is_empty() {
        s.push_str("\nNot in this trace\n");
        for m in &a.missing {
            let _ = writeln!(s, "  {:<12} collect with {}", m.section, m.collect);
        }
    }
    s
}
