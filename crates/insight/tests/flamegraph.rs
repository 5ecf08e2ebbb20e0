//! Collapsed stacks, exactly, for the hand-built profile; and the SVG flame graph read back
//! as XML: every frame rectangle inferno drew has the width (in samples) that the profile's
//! call tree gives that node.

mod common;

use std::collections::BTreeMap;

use eventpipe_insight::flamegraph::{flamegraph_title, sanitize_frame_name};
use eventpipe_insight::{
    collapsed_stacks, write_collapsed, write_flamegraph, Error, Frame, FrameKind, Grouping,
    Profile, Sample, SampleUnit,
};
use quick_xml::events::Event;

fn collapsed_text(profile: &Profile, grouping: Grouping) -> String {
    let mut out = Vec::new();
    write_collapsed(profile, grouping, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn collapsed_lines_are_exact() {
    // Bytes: the weights as they are.
    let bytes = common::workload(SampleUnit::Bytes);
    assert_eq!(
        collapsed_text(&bytes, Grouping::Merged),
        "main;alloc 12\n\
         main;run 4\n\
         main;run;parse 3\n\
         main;run;parse;lex 2\n\
         thread_start;worker;run;parse 6\n"
    );
    // Time: microseconds (the table's weights are 1 ms periods).
    let p = common::cpu_workload();
    assert_eq!(
        collapsed_text(&p, Grouping::ByThread),
        "Thread 9;main;alloc 12000\n\
         main (7);main;run 4000\n\
         main (7);main;run;parse 3000\n\
         main (7);main;run;parse;lex 2000\n\
         worker (8);thread_start;worker;run;parse 6000\n"
    );
}

#[test]
fn names_are_made_safe_for_the_format() {
    assert_eq!(
        sanitize_frame_name("<[u8; 8] as Debug>::fmt"),
        "<[u8, 8] as Debug>::fmt"
    );
    assert_eq!(sanitize_frame_name("line\nbreak\r\tx"), "line break  x");
    assert_eq!(sanitize_frame_name(""), "[unknown]");
    assert_eq!(sanitize_frame_name(" \n "), "[unknown]");

    let mut p = Profile::new("odd names", SampleUnit::Events);
    let t = p.intern_thread(1, Some("a;thread\n"), None);
    let frames: Vec<usize> = ["root", "a;b", "two\nlines", ""]
        .iter()
        .map(|n| p.intern_frame(Frame::named(*n, FrameKind::Native)))
        .collect();
    let full = p.intern_stack(frames);
    let empty = p.intern_stack(Vec::new());
    for (stack, weight) in [(full, 2), (empty, 3), (full, 0), (full, 1)] {
        p.push_sample(Sample {
            thread: t,
            time_ms: 0.0,
            weight,
            stack,
            lines: None,
        });
    }
    assert_eq!(
        collapsed_stacks(&p, Grouping::Merged).unwrap(),
        vec![
            ("[no frames]".to_owned(), 3),
            ("root;a,b;two lines;[unknown]".to_owned(), 3),
        ]
    );
    assert_eq!(
        collapsed_text(&p, Grouping::ByThread),
        "a,thread  (1);[no frames] 3\na,thread  (1);root;a,b;two lines;[unknown] 3\n"
    );
}

/// (name, width in samples) of every frame rectangle in the SVG, and all its text.
fn svg_frames(svg: &str) -> (Vec<(String, u64)>, String) {
    let mut reader = quick_xml::Reader::from_str(svg);
    let mut frames = Vec::new();
    let mut text = String::new();
    let mut in_title = false;
    let mut title = String::new();
    let mut root = None;
    loop {
        match reader.read_event().expect("well-formed XML") {
            Event::Start(e) => {
                let name = String::from_utf8(e.name().as_ref().to_vec()).unwrap();
                root.get_or_insert(name.clone());
                if name == "title" {
                    in_title = true;
                    title.clear();
                }
            }
            Event::End(e) if e.name().as_ref() == b"title" => in_title = false,
            Event::Empty(e) if e.name().as_ref() == b"rect" => {
                if let Some(w) = e.try_get_attribute("fg:w").unwrap() {
                    let w: u64 = std::str::from_utf8(&w.value).unwrap().parse().unwrap();
                    // `name (1,234 samples, 5.00%)`
                    let (name, count) = title.rsplit_once(" (").expect("title with a count");
                    let count: String = count.chars().take_while(|c| *c != ' ').collect();
                    assert_eq!(count.replace(',', "").parse::<u64>().unwrap(), w, "{title}");
                    frames.push((name.to_owned(), w));
                }
            }
            Event::Text(t) => {
                let t = t.decode().unwrap();
                text.push_str(&t);
                if in_title {
                    title.push_str(&t);
                }
            }
            Event::GeneralRef(r) => {
                let c = match &*r.decode().unwrap() {
                    "lt" => '<',
                    "gt" => '>',
                    "amp" => '&',
                    "quot" => '"',
                    "apos" => '\'',
                    other => r
                        .resolve_char_ref()
                        .unwrap()
                        .unwrap_or_else(|| panic!("unknown entity {other}")),
                };
                text.push(c);
                if in_title {
                    title.push(c);
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    assert_eq!(root.as_deref(), Some("svg"));
    (frames, text)
}

/// The call tree of `WORKLOAD` (threads merged): every node's (name, total weight), from
/// the table, sorted.
fn expected_tree(extra: &[(&[&str], u64)]) -> Vec<(String, u64)> {
    let mut nodes: BTreeMap<Vec<String>, u64> = BTreeMap::new();
    let rows = common::WORKLOAD
        .iter()
        .map(|&(_, names, w)| (names, w))
        .chain(extra.iter().copied());
    let mut total = 0;
    for (names, weight) in rows {
        total += weight;
        for depth in 1..=names.len() {
            let path = names[..depth]
                .iter()
                .map(|n| common::display_name(n).to_owned())
                .collect();
            *nodes.entry(path).or_insert(0) += weight;
        }
    }
    let mut out: Vec<(String, u64)> = nodes
        .into_iter()
        .map(|(path, w)| (path.last().unwrap().clone(), w))
        .collect();
    out.push(("all".to_owned(), total));
    out.sort();
    out
}

#[test]
fn svg_frames_have_the_call_trees_widths() {
    let mut p = common::cpu_workload();
    // A generic Rust name: must be escaped in the SVG and come back intact.
    let main = p.intern_frame(Frame::named("main", FrameKind::Native));
    let push = p.intern_frame(Frame::named("Vec<T>::push", FrameKind::Native));
    let stack = p.intern_stack(vec![main, push]);
    p.push_sample(Sample {
        thread: 0,
        time_ms: 30.0,
        weight: 7 * common::PERIOD_NS,
        stack,
        lines: None,
    });

    let mut out = Vec::new();
    write_flamegraph(&p, Grouping::Merged, &mut out).unwrap();
    let svg = String::from_utf8(out).unwrap();
    assert!(svg.contains("<svg"));
    let (mut frames, text) = svg_frames(&svg);
    frames.sort();
    // Widths in µs: the table's 1 ms periods × 1000.
    let in_us: Vec<(String, u64)> = expected_tree(&[(&["main", "Vec<T>::push"], 7)])
        .into_iter()
        .map(|(name, w)| (name, w * 1000))
        .collect();
    assert_eq!(frames, in_us);

    // The title tells the widths (time) from the number of samples (captures).
    let title = flamegraph_title(&p);
    assert_eq!(title, "Workload: CPU time in µs, 11 samples");
    assert!(text.contains(&title), "title not in the SVG");
}

#[test]
fn svg_titles_name_the_unit() {
    for (unit, title) in [
        (SampleUnit::Bytes, "Workload: bytes allocated, 10 samples"),
        (
            SampleUnit::LiveBytes,
            "Workload: bytes still allocated, 10 samples",
        ),
        (SampleUnit::Events, "Workload: events, 10 samples"),
        (
            SampleUnit::HeapBytes,
            "Workload: heap bytes retained, 10 samples",
        ),
        (SampleUnit::CpuTime, "Workload: CPU time in µs, 10 samples"),
        (
            SampleUnit::ThreadTime,
            "Workload: thread time in µs, 10 samples",
        ),
    ] {
        let scale = if unit.is_time() { 1000 } else { 1 };
        let p = common::workload(unit);
        let mut out = Vec::new();
        write_flamegraph(&p, Grouping::ByThread, &mut out).unwrap();
        let (frames, text) = svg_frames(&String::from_utf8(out).unwrap());
        assert!(text.contains(title), "{title}");
        // By thread: the thread frames sit under `all` with each thread's weight.
        for (name, weight) in [("main (7)", 9), ("worker (8)", 6), ("Thread 9", 12)] {
            assert!(
                frames.contains(&(name.to_owned(), weight * scale)),
                "{name}: {frames:?}"
            );
        }
    }
}

#[test]
fn empty_profile_has_no_flame_graph() {
    let p = Profile::new("nothing", SampleUnit::Events);
    let mut out = Vec::new();
    assert!(matches!(
        write_flamegraph(&p, Grouping::Merged, &mut out),
        Err(Error::EmptyProfile(name)) if name == "nothing"
    ));
    assert!(out.is_empty());
    assert_eq!(collapsed_text(&p, Grouping::Merged), "");
}
