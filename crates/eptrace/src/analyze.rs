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
}

/// Runs `eptrace analyze`.
pub(crate) fn do_analyze(config: &Config) -> Result<()> {
    let name = config.input.display_name();
    let opened = input::open(&config.input)?;
    let (analysis, cut) = match opened {
        Opened::Mapped(_) => {
            let bytes = opened.bytes().unwrap_or(&[]);
            let total = Some(bytes.len() as u64);
            read(crate::input::paged_reader(bytes), config, &name, total)?
        }
        Opened::Stream(stream) => read(TraceReader::from_read(stream), config, &name, None)?,
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
    // In time order: a GC's events come from several threads (a background GC's own), and
    // its pause and completion depend on their order. Only the events a section reads are
    // sorted; the rest are counted as they pass.
    let sections = config.sections;
    let skipped = Arc::new(Skipped::default());
    let tally = Arc::clone(&skipped);
    let trace = reader.trace().clone();
    // The filter sees every event: it moves the progress bar.
    let progress = Arc::new(Mutex::new(Progress::new(total)));
    let bar = Arc::clone(&progress);
    let mut seen = 0u64;
    let mut reader = SortedReader::with_filter(reader, move |event| {
        seen += 1;
        if seen % 4096 == 0 {
            bar.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .set(event.offset().0);
        }
        let read = sections.reads(event.metadata());
        if !read {
            tally.note(event.header().timestamp);
        }
        read
    });
    let mut analyzer = Analyzer::new(sections);
    while let Some(event) = reader
        .next_event()
        .with_context(|| format!("cannot read {name}"))?
    {
        analyzer.observe(&event);
    }
    progress
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .finish();
    analyzer.add_skipped(&skipped, &trace);
    Ok((analyzer.finish(name), reader.stats().truncation))
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
    if !a.missing.is_empty() {
        s.push_str("\nNot in this trace\n");
        for m in &a.missing {
            let _ = writeln!(s, "  {:<12} collect with {}", m.section, m.collect);
        }
    }
    s
}
