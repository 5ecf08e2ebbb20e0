//! Helpers shared by the integration tests: locating `../shared/traces` and reading the
//! TraceEvent baselines.

#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;

/// `../shared/traces` relative to the workspace root, or `None` (with a one-line notice)
/// when it is absent, as on a user's fresh clone.
pub fn shared_traces(test: &str) -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces");
    if root.is_dir() {
        Some(root)
    } else {
        eprintln!("skipping {test}: ../shared/traces is absent");
        None
    }
}

/// One line of a TraceEvent baseline.
#[derive(Debug)]
pub struct BaselineLine {
    /// `Provider/EventName`.
    pub name: String,
    /// How many such events TraceEvent saw.
    pub count: u64,
    /// Attributes of the first event, in order, XML-unescaped.
    pub attributes: Vec<(String, String)>,
}

/// Parses a `*.baseline.txt` file.
pub fn read_baseline(path: &std::path::Path) -> Vec<BaselineLine> {
    let text = std::fs::read_to_string(path).expect("baseline readable");
    let text = text.trim_start_matches('\u{feff}');
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let (name, rest) = line.split_once(", ").expect("name, count, event");
            let (count, event) = rest.split_once(", ").expect("count, event");
            BaselineLine {
                name: name.to_string(),
                count: count.trim().parse().expect("count"),
                attributes: parse_attributes(event),
            }
        })
        .collect()
}

fn parse_attributes(event: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = event.trim_start_matches("<Event");
    while let Some(eq) = rest.find('=') {
        let name = rest[..eq].trim().to_string();
        let after = rest[eq + 1..].trim_start();
        let Some(value_and_rest) = after.strip_prefix('"') else {
            break;
        };
        let Some(close) = value_and_rest.find('"') else {
            break;
        };
        out.push((name, unescape(&value_and_rest[..close])));
        rest = &value_and_rest[close + 1..];
        let t = rest.trim_start();
        if t.starts_with("/>") || t.starts_with('>') {
            break;
        }
    }
    out
}

fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}
