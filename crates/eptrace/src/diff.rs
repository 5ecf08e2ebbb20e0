//! `eptrace diff BASE NEW`: two traces' profiles of one kind compared function by function
//! ([`eventpipe_insight::diff`]), as text ranked by change or JSON; optionally a
//! differential flame graph and a pprof of the difference; `--fail-if` for CI.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use eventpipe_insight::diff::{
    diff, span_seconds, FunctionChange, Normalize, ProfileDiff, NOISE_SIGMAS,
};
use eventpipe_insight::import::{self, Format};
use eventpipe_insight::{Profile, SampleSelection, SampleUnit};

use crate::input::{self, InputSpec};

/// The exit status when a `--fail-if` threshold is crossed.
pub(crate) const FAIL_IF_STATUS: u8 = 4;

/// What `diff` was asked to do.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) base: PathBuf,
    pub(crate) new: PathBuf,
    pub(crate) samples: SampleSelection,
    /// `None`: per second when both profiles span time, else as shares.
    pub(crate) normalize: Option<Normalize>,
    pub(crate) json: bool,
    pub(crate) top: usize,
    /// Show functions whose change is within the noise too.
    pub(crate) all: bool,
    pub(crate) flamegraph: Option<PathBuf>,
    pub(crate) pprof: Option<PathBuf>,
    pub(crate) fail_if: Vec<Threshold>,
}

/// `--fail-if 'NAME > +10%'`: a function's total (or the profile's, `total`) changed by more
/// than a share of its base, beyond noise.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Threshold {
    /// A function's name, or `total`.
    pub(crate) what: String,
    /// `>`: grew by more than `percent`; `<`: changed by less than it (shrank, for a
    /// negative one).
    pub(crate) above: bool,
    pub(crate) percent: f64,
}

impl std::fmt::Display for Threshold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let op = if self.above { '>' } else { '<' };
        write!(f, "{} {op} {:+}%", self.what, self.percent)
    }
}

/// Parses `NAME > +10%` (or `<`, a signed percentage).
pub(crate) fn parse_threshold(text: &str) -> Result<Threshold, String> {
    // The last one: a function's name can hold `<` and `>` (`Vec<T>::push`).
    let at = text
        .rfind(['>', '<'])
        .ok_or_else(|| format!("`{text}`: expected `NAME > +10%` or `NAME < -10%`"))?;
    let what = text[..at].trim();
    if what.is_empty() {
        return Err(format!("`{text}`: name a function, or `total`"));
    }
    let number = text[at + 1..].trim();
    let percent: f64 = number
        .strip_suffix('%')
        .and_then(|n| n.trim().parse().ok())
        .filter(|p: &f64| p.is_finite())
        .ok_or_else(|| format!("`{text}`: `{number}` is not a percentage like +10%"))?;
    Ok(Threshold {
        what: what.to_owned(),
        above: &text[at..=at] == ">",
        percent,
    })
}

/// A `--fail-if` that held: the exit status is [`FAIL_IF_STATUS`].
#[derive(Debug)]
pub(crate) struct ThresholdCrossed(pub(crate) Vec<String>);

impl std::fmt::Display for ThresholdCrossed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0.join("; "))
    }
}

impl std::error::Error for ThresholdCrossed {}

/// Runs `eptrace diff`.
pub(crate) fn do_diff(config: &Config) -> Result<()> {
    let base = profile(&config.base, config)?;
    let new = profile(&config.new, config)?;
    let normalize = config.normalize.unwrap_or_else(|| {
        if span_seconds(&base) > 0.0 && span_seconds(&new) > 0.0 {
            Normalize::PerSecond
        } else {
            eprintln!(
                "note: a profile keeps no duration (speedscope): comparing shares of each \
                 total (--normalize share)"
            );
            Normalize::Share
        }
    });
    let d = diff(&base, &new, normalize).context("cannot compare the profiles")?;
    if let Some(path) = &config.flamegraph {
        let out =
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        eventpipe_insight::write_differential_flamegraph(
            &base,
            &new,
            normalize != Normalize::Raw,
            BufWriter::new(out),
        )
        .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("wrote {} (differential flame graph)", path.display());
    }
    if let Some(path) = &config.pprof {
        let out =
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        eventpipe_insight::write_pprof_diff(&base, &new, &Default::default(), out)
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!(
            "wrote {} (the new profile minus the base, as `go tool pprof -diff_base` reads them)",
            path.display()
        );
    }
    let text = if config.json {
        let mut s = serde_json::to_string_pretty(&d).context("cannot serialize the diff")?;
        s.push('\n');
        s
    } else {
        render(&d, config)
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .context("cannot write to stdout")?;
    out.flush().context("cannot write to stdout")?;
    let crossed = crossed(&d, &config.fail_if)?;
    if !crossed.is_empty() {
        return Err(ThresholdCrossed(crossed).into());
    }
    Ok(())
}

/// The profile of one trace file, as `convert --samples` builds it; or of a converted
/// profile, as it is.
fn profile(path: &std::path::Path, config: &Config) -> Result<Profile> {
    let name = path.display().to_string();
    let opened = input::open(&InputSpec::Path(path.to_path_buf()))?;
    let data = opened.bytes().unwrap_or(&[]);
    if let Some(format) = Format::sniff(data) {
        let profile = import::read_profile(data, format)
            .with_context(|| format!("{name} does not read as a {} profile", format.name()))?;
        if profile.samples.is_empty() {
            bail!("{name} has no samples to compare");
        }
        return Ok(profile);
    }
    let convert = crate::convert::Config {
        input: InputSpec::Path(path.to_path_buf()),
        cut: crate::cut::CutTraces::Refuse,
        formats: Vec::new(),
        output: None,
        samples: config.samples.clone(),
        by_thread: false,
        async_stacks: true,
    };
    let (built, _) = crate::convert::read_profile(data, &name, &convert)?;
    if built.profile.samples.is_empty() {
        bail!(
            "{name} has no {} samples to compare (`eptrace report {name}` shows what it holds)",
            built.profile.name
        );
    }
    Ok(built.profile)
}

/// The messages of the thresholds `d` crosses.
fn crossed(d: &ProfileDiff, thresholds: &[Threshold]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for t in thresholds {
        let (base, new, error) = if t.what == "total" {
            (d.base_total, d.new_total, d.total_error)
        } else {
            let f = find(d, &t.what).with_context(|| {
                format!("--fail-if {t}: no function `{}` in either profile", t.what)
            })?;
            (f.base_total, f.new_total, f.total_error)
        };
        let change = new - base;
        let percent = if base > 0.0 {
            change / base * 100.0
        } else if change > 0.0 {
            f64::INFINITY
        } else {
            0.0
        };
        let past = if t.above {
            percent > t.percent
        } else {
            percent < t.percent
        };
        if past && change.abs() > NOISE_SIGMAS * error {
            out.push(format!("{t}: {} changed by {percent:+.1}%", t.what));
        }
    }
    Ok(out)
}

/// The function named `what`: exactly, else the one whose path ends in `::what`.
fn find<'d>(d: &'d ProfileDiff, what: &str) -> Option<&'d FunctionChange> {
    d.functions.iter().find(|f| f.function == what).or_else(|| {
        let suffix = format!("::{what}");
        d.functions.iter().find(|f| f.function.ends_with(&suffix))
    })
}

/// A value in the diff's unit, as text.
fn value(d: &ProfileDiff, v: f64) -> String {
    let per = match d.normalize {
        Normalize::PerSecond => "/s",
        _ => "",
    };
    match (d.normalize, d.unit) {
        (Normalize::Share, _) => format!("{:.2}%", v * 100.0),
        (_, u) if u.is_time() => format!("{:.1} ms{per}", v / 1e6),
        (_, SampleUnit::Bytes | SampleUnit::LiveBytes | SampleUnit::HeapBytes) => {
            format!("{:.2} MB{per}", v / 1e6)
        }
        _ => format!("{v:.1}{per}"),
    }
}

fn render(d: &ProfileDiff, config: &Config) -> String {
    let mut s = String::new();
    let how = match d.normalize {
        Normalize::Raw => "as recorded",
        Normalize::PerSecond => "per second of each trace",
        Normalize::Share => "as shares of each profile",
    };
    let _ = writeln!(
        s,
        "{}: base {} ({:.1} s), new {} ({:.1} s), {how}",
        d.measure,
        config.base.display(),
        d.base_seconds,
        config.new.display(),
        d.new_seconds,
    );
    let verdict = if d.total_beyond_noise() {
        "beyond noise"
    } else {
        "within noise"
    };
    let _ = writeln!(
        s,
        "total: {} → {} ({}, ± {}; {verdict})\n",
        value(d, d.base_total),
        value(d, d.new_total),
        signed(d, d.new_total - d.base_total),
        value(d, d.total_error),
    );
    let shown: Vec<&FunctionChange> = d
        .functions
        .iter()
        .filter(|f| config.all || f.beyond_noise)
        .take(config.top)
        .collect();
    if shown.is_empty() {
        let _ = writeln!(
            s,
            "No function changed beyond noise ({NOISE_SIGMAS} standard errors of sampling); \
             --all lists them anyway."
        );
        return s;
    }
    let _ = writeln!(
        s,
        "{:>14} {:>14} {:>14} {:>14}  function (self change, then total; * beyond noise)",
        "self base", "self new", "total base", "total new"
    );
    for f in shown {
        let mark = if f.beyond_noise { "*" } else { " " };
        let ratio = f
            .total_change_ratio()
            .map_or_else(|| "new".to_owned(), |r| format!("{:+.0}%", r * 100.0));
        let _ = writeln!(
            s,
            "{:>14} {:>14} {:>14} {:>14} {mark}{} ({}, total {} {ratio})",
            value(d, f.base_self),
            value(d, f.new_self),
            value(d, f.base_total),
            value(d, f.new_total),
            f.function,
            signed(d, f.self_change()),
            signed(d, f.total_change()),
        );
    }
    s
}

fn signed(d: &ProfileDiff, v: f64) -> String {
    let text = value(d, v.abs());
    if v < 0.0 {
        format!("-{text}")
    } else {
        format!("+{text}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_read_as_written() {
        assert_eq!(
            parse_threshold("total > +10%").unwrap(),
            Threshold {
                what: "total".into(),
                above: true,
                percent: 10.0
            }
        );
        let t = parse_threshold("my_crate::parse<-5.5%").unwrap();
        assert_eq!(
            (t.what.as_str(), t.above, t.percent),
            ("my_crate::parse", false, -5.5)
        );
        assert!(parse_threshold("total 10%").is_err());
        assert!(parse_threshold("> 10%").is_err());
        assert!(parse_threshold("total > ten%").is_err());
        assert!(parse_threshold("total > 10").is_err());
    }
}
