//! `eptrace counters monitor`'s view: the latest value of every counter, grouped by
//! provider, names as `dotnet-counters` shows them (`Allocation Rate (B / 1 sec)`),
//! histograms as their percentiles, redrawn in place once per refresh interval.
//!
//! On a terminal the screen is redrawn whole (the terminal in raw mode, so `p` pauses, `r`
//! resumes and `q` or Ctrl-C quits without Enter); a terminal too narrow for the table
//! says so instead of wrapping it. Anywhere else (a pipe, a file, or a terminal that has
//! no size, as `script` gives one) each refresh prints the table as plain lines.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use anyhow::Result;
use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use crossterm::{cursor, execute, queue, terminal};
use eventpipe_client::capture::counters::{SessionEnd, Sink, SinkResult};
use eventpipe_counters::{CounterKind, CounterValue};

/// Columns the table needs at least.
pub(crate) const MIN_WIDTH: u16 = 40;
/// Columns of the value.
const VALUE_WIDTH: usize = 16;

/// The latest values, and how to show them.
pub(crate) struct Screen {
    interactive: bool,
    refresh: Duration,
    last_draw: Instant,
    paused: bool,
    /// Provider → shown name → latest value.
    values: BTreeMap<String, BTreeMap<String, CounterValue>>,
    problems: Vec<String>,
    status: Option<String>,
    quit: bool,
}

impl Screen {
    pub(crate) fn new(refresh_sec: f64) -> Result<Screen> {
        // A terminal that reports no size (0 × 0, as `script` makes) cannot be drawn on.
        let sized = matches!(terminal::size(), Ok((cols, rows)) if cols > 0 && rows > 0);
        let interactive =
            std::io::stdout().is_terminal() && std::io::stdin().is_terminal() && sized;
        if interactive {
            terminal::enable_raw_mode()?;
            execute!(
                std::io::stdout(),
                terminal::EnterAlternateScreen,
                cursor::Hide
            )?;
        }
        let mut s = Screen {
            interactive,
            refresh: Duration::from_secs_f64(refresh_sec.max(0.1)),
            last_draw: Instant::now(),
            paused: false,
            values: BTreeMap::new(),
            problems: Vec::new(),
            status: None,
            quit: false,
        };
        s.draw()?;
        Ok(s)
    }

    /// Puts the terminal back.
    pub(crate) fn close(&mut self) {
        if self.interactive {
            let _ = self.draw();
            let _ = execute!(
                std::io::stdout(),
                cursor::Show,
                terminal::LeaveAlternateScreen
            );
            let _ = terminal::disable_raw_mode();
            self.interactive = false;
            // What the screen showed last stays readable after the alternate screen goes.
            let _ = self.print_plain();
        }
    }

    fn keys(&mut self) -> Result<()> {
        while event::poll(Duration::ZERO)? {
            if let Event::Key(KeyEvent {
                code,
                modifiers,
                kind: KeyEventKind::Press,
                ..
            }) = event::read()?
            {
                match code {
                    KeyCode::Char('q') | KeyCode::Char('Q') => self.quit = true,
                    KeyCode::Char('c') if modifiers.contains(KeyModifiers::CONTROL) => {
                        self.quit = true
                    }
                    KeyCode::Char('p') | KeyCode::Char('P') => self.paused = true,
                    KeyCode::Char('r') | KeyCode::Char('R') => self.paused = false,
                    _ => {}
                }
                self.draw()?;
            }
        }
        Ok(())
    }

    /// The table's lines for a terminal `width` columns wide.
    fn lines(&self, width: usize) -> Vec<String> {
        let mut lines = vec![
            "Press p to pause, r to resume, q to quit.".to_owned(),
            format!(
                "    Status: {}",
                match (&self.status, self.paused) {
                    (Some(s), _) => s.as_str(),
                    (None, true) => "Paused",
                    (None, false) => "Running",
                }
            ),
            String::new(),
        ];
        let name_width = width.saturating_sub(VALUE_WIDTH + 1).max(10);
        lines.push(format!(
            "{:<name_width$} {:>VALUE_WIDTH$}",
            "Name", "Current Value"
        ));
        if self.values.is_empty() {
            lines.push("    (waiting for the first values...)".to_owned());
        }
        for (provider, counters) in &self.values {
            lines.push(format!("[{provider}]"));
            for (shown, v) in counters {
                if v.kind == CounterKind::Histogram && !v.quantiles.is_empty() {
                    lines.push(fit(&format!("    {shown}"), width));
                    for (q, value) in &v.quantiles {
                        lines.push(row(
                            &format!("        Percentile={}", q * 100.0),
                            *value,
                            name_width,
                        ));
                    }
                } else {
                    lines.push(row(&format!("    {shown}"), v.value, name_width));
                }
            }
        }
        // Whole here; a terminal's redraw cuts every line to its width.
        for p in &self.problems {
            lines.push(format!("note: {p}"));
        }
        lines
    }

    fn draw(&mut self) -> Result<()> {
        self.last_draw = Instant::now();
        if !self.interactive {
            return self.print_plain();
        }
        let (cols, rows) = terminal::size().unwrap_or((80, 24));
        let mut out = std::io::stdout().lock();
        queue!(
            out,
            cursor::MoveTo(0, 0),
            terminal::Clear(terminal::ClearType::All)
        )?;
        if cols < MIN_WIDTH {
            write!(
                out,
                "The terminal is {cols} columns wide; the counters need {MIN_WIDTH}. Widen it, \
                 or press q to quit."
            )?;
            out.flush()?;
            return Ok(());
        }
        for (i, line) in self
            .lines(cols as usize)
            .iter()
            .take(rows as usize)
            .enumerate()
        {
            queue!(out, cursor::MoveTo(0, i as u16))?;
            write!(out, "{}", fit(line, cols as usize))?;
        }
        out.flush()?;
        Ok(())
    }

    fn print_plain(&self) -> Result<()> {
        let mut out = std::io::stdout().lock();
        for line in self.lines(80) {
            writeln!(out, "{line}")?;
        }
        writeln!(out)?;
        out.flush()?;
        Ok(())
    }
}

impl Sink for Screen {
    fn value(&mut self, v: CounterValue, _at: std::time::SystemTime) -> SinkResult<()> {
        if self.paused {
            return Ok(());
        }
        let mut shown = v.display();
        if !v.tags.is_empty() && v.kind != CounterKind::Histogram {
            shown.push_str(&format!(" [{}]", v.tags.replace(',', ";")));
        }
        self.values
            .entry(v.provider.clone())
            .or_default()
            .insert(shown, v);
        Ok(())
    }

    fn problem(&mut self, problem: String) -> SinkResult<()> {
        if !self.problems.contains(&problem) {
            self.problems.push(problem);
        }
        Ok(())
    }

    fn tick(&mut self) -> SinkResult<bool> {
        if self.interactive {
            self.keys()?;
        }
        if !self.paused && self.last_draw.elapsed() >= self.refresh {
            self.draw()?;
        }
        Ok(!self.quit)
    }

    fn ended(&mut self, why: &SessionEnd) -> SinkResult<()> {
        self.status = Some(format!("Stopped: {why}"));
        Ok(self.draw()?)
    }
}

/// A name and a value, the value right-aligned.
fn row(name: &str, value: f64, name_width: usize) -> String {
    let name = fit(name, name_width);
    format!("{name:<name_width$} {:>VALUE_WIDTH$}", format_value(value))
}

/// `line` cut to `width` characters (a trailing `…` says it was cut).
fn fit(line: &str, width: usize) -> String {
    if line.chars().count() <= width {
        return line.to_owned();
    }
    let mut cut: String = line.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// A value as the table shows it: integers grouped by thousands, others with up to three
/// decimals.
pub(crate) fn format_value(v: f64) -> String {
    if !v.is_finite() {
        return "-".to_owned();
    }
    if v.fract() == 0.0 && v.abs() < 1e15 {
        let n = crate::numbers::thousands(v.abs() as u64);
        return if v < 0.0 { format!("-{n}") } else { n };
    }
    let text = format!("{v:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_rows_fit_their_columns() {
        assert_eq!(format_value(16384.0), "16,384");
        assert_eq!(format_value(-3.0), "-3");
        assert_eq!(format_value(0.125), "0.125");
        assert_eq!(format_value(42.5), "42.5");
        assert_eq!(format_value(f64::NAN), "-");
        assert_eq!(fit("abcdef", 4), "abc…");
        let r = row("    CPU Usage (%)", 0.5, 30);
        assert_eq!(r.chars().count(), 30 + 1 + VALUE_WIDTH);
        assert!(r.ends_with("0.5"));
    }
}
