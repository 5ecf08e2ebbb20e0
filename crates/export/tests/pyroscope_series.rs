//! What Grafana Pyroscope makes of the agent's profiles, by the server's own rules restated
//! here from grafana/pyroscope's source (named at each rule), applied to the profiles
//! made from a real .NET trace (`../shared/traces`, skipped when absent):
//!
//! * which series a push becomes: every string sample label joins the series' labels
//!   (`pkg/model/pprofsplit/pprof_split.go`, `addSampleLabelsToLabelsBuilder`: labels
//!   whose `str` is 0 — numeric ones — are skipped);
//! * the profile type of each sample type: `__name__:type:unit:period_type:period_unit`
//!   (`pkg/phlaredb/labels/labels.go`, `CreateProfileLabels`), where over `/ingest`
//!   `__name__` is the server's choice from the sample types (`pkg/og/convert/pprof/
//!   profile.go`, `metricName`).

use std::collections::BTreeSet;
use std::io::Read;
use std::path::PathBuf;

use eventpipe_export::continuous::{period_profiles, Period};
use eventpipe_export::pyroscope::{proto::PushRequest, Api, PeriodProfile, Server};
use eventpipe_insight::pprof::proto::Profile;
use eventpipe_insight::ThreadLabels;
use eventpipe_symbols::BinaryCache;
use prost::Message;

fn shared_trace(name: &str) -> Option<Vec<u8>> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/traces")
        .join(name);
    match std::fs::read(&path) {
        Ok(bytes) => Some(bytes),
        Err(_) => {
            eprintln!(
                "skipping: {} not found (../shared is absent)",
                path.display()
            );
            None
        }
    }
}

/// The .NET trace's one period profile (thread time), with `thread_labels`.
fn dotnet_profile(trace: &[u8], thread_labels: ThreadLabels) -> PeriodProfile {
    let period = Period {
        service_name: "Sample App".into(),
        labels: vec![("pid".into(), "4242".into())],
        from_unix_nanos: 1_700_000_000_000_000_000,
        until_unix_nanos: 1_700_000_010_000_000_000,
        sample_rate: 1000,
        dotnet: true,
        thread_labels,
    };
    let (mut profiles, _) = period_profiles(trace, &period, &mut BinaryCache::default()).unwrap();
    assert_eq!(profiles.len(), 1, "one thread-time profile");
    profiles.remove(0)
}

fn gunzip(bytes: &[u8]) -> Profile {
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut raw)
        .unwrap();
    Profile::decode(raw.as_slice()).unwrap()
}

fn server(api: Api) -> Server {
    Server {
        url: "http://pyroscope:4040".into(),
        api,
        headers: Vec::new(),
        max_age: None,
    }
}

/// The push as the server reads it: the series' labels and its profile.
fn pushed(p: &PeriodProfile) -> (Vec<(String, String)>, Profile) {
    let request = p.request(&server(Api::Push));
    let push = PushRequest::decode(request.body.as_slice()).unwrap();
    let series = &push.series[0];
    let labels = series
        .labels
        .iter()
        .map(|l| (l.name.clone(), l.value.clone()))
        .collect();
    (labels, gunzip(&series.samples[0].raw_profile))
}

/// `labels.go`: one profile type per sample type.
fn profile_types(name: &str, p: &Profile) -> BTreeSet<String> {
    let s = |i: i64| p.string_table[i as usize].clone();
    let (period_type, period_unit) = p
        .period_type
        .as_ref()
        .map_or((String::new(), String::new()), |t| (s(t.r#type), s(t.unit)));
    p.sample_type
        .iter()
        .map(|t| {
            format!(
                "{name}:{}:{}:{period_type}:{period_unit}",
                s(t.r#type),
                s(t.unit)
            )
        })
        .collect()
}

/// `profile.go`, `metricName`, with the default sample-type mapping (no display names for
/// these types): `wall` first, then the first type naming cpu, alloc/inuse, mutex, block
/// or goroutines, else the last type.
fn ingest_metric_name(p: &Profile) -> String {
    let types: Vec<&str> = p
        .sample_type
        .iter()
        .map(|t| p.string_table[t.r#type as usize].as_str())
        .collect();
    if types.contains(&"wall") {
        return "wall".into();
    }
    for st in &types {
        let name = if st.contains("cpu") {
            "process_cpu"
        } else if st.contains("alloc_")
            || st.contains("inuse_")
            || *st == "space"
            || *st == "objects"
        {
            "memory"
        } else if st.contains("mutex_") {
            "mutex"
        } else if st.contains("block_") {
            "block"
        } else if st.contains("goroutines") {
            "goroutines"
        } else {
            continue;
        };
        return name.into();
    }
    types.last().map_or_else(String::new, |t| (*t).to_owned())
}

/// `pprof_split.go`: the distinct sets of string sample labels, each one series.
fn series_label_sets(p: &Profile) -> BTreeSet<Vec<(String, String)>> {
    p.sample
        .iter()
        .map(|sample| {
            let mut set: Vec<(String, String)> = sample
                .label
                .iter()
                .filter(|l| l.str > 0)
                .map(|l| {
                    (
                        p.string_table[l.key as usize].clone(),
                        p.string_table[l.str as usize].clone(),
                    )
                })
                .collect();
            set.sort();
            set
        })
        .collect()
}

#[test]
fn a_dotnet_profile_is_the_standard_wall_type_over_push_and_ingest() {
    let Some(trace) = shared_trace("only_managed_samples.nettrace") else {
        return;
    };
    let profile = dotnet_profile(&trace, ThreadLabels::None);
    // Pyroscope's own .NET profiler: `wall`, sample type wall/nanoseconds, period type
    // cpu/nanoseconds (grafana/pyroscope-dotnet, SampleValueTypeProvider.cpp and
    // PprofBuilder.cpp; PyroscopePprofSink.cpp names it `wall`).
    const DOTNET_WALL: &str = "wall:wall:nanoseconds:cpu:nanoseconds";

    let (labels, pprof) = pushed(&profile);
    let name = labels
        .iter()
        .find(|(k, _)| k == "__name__")
        .map(|(_, v)| v.clone())
        .unwrap();
    let over_push = profile_types(&name, &pprof);
    assert!(over_push.contains(DOTNET_WALL), "{over_push:?}");

    let ingest = profile.request(&server(Api::Ingest));
    let body = gunzip(&ingest.body);
    let over_ingest = profile_types(&ingest_metric_name(&body), &body);
    assert_eq!(
        over_push, over_ingest,
        "one profile, one type, whichever API"
    );
    // The thread time itself is unchanged: every sample's time value is positive.
    let wall = body
        .sample_type
        .iter()
        .position(|t| body.string_table[t.r#type as usize] == "wall")
        .unwrap();
    assert!(body.sample.iter().all(|s| s.value[wall] > 0));
}

#[test]
fn no_series_label_grows_with_thread_ids() {
    let Some(trace) = shared_trace("eventpipe-dotnetcore3.0-win-x64-objver4.nettrace") else {
        return;
    };
    // The whole label (a file's default) makes one series per thread: the trouble.
    let (_, whole) = pushed(&dotnet_profile(&trace, ThreadLabels::NameAndId));
    let threads: BTreeSet<i64> = whole
        .sample
        .iter()
        .flat_map(|s| s.label.iter())
        .filter(|l| whole.string_table[l.key as usize] == "thread_id")
        .map(|l| l.num)
        .collect();
    assert!(threads.len() > 1, "the trace has several threads");
    assert_eq!(series_label_sets(&whole).len(), threads.len());

    // The agent's default: one series, the numeric thread id still in every sample.
    let (_, bare) = pushed(&dotnet_profile(&trace, ThreadLabels::None));
    assert_eq!(series_label_sets(&bare).len(), 1);
    assert!(bare.sample.iter().all(|s| s
        .label
        .iter()
        .any(|l| bare.string_table[l.key as usize] == "thread_id" && l.num > 0)));

    // Names alone: no value carries an id, at most one series per distinct name.
    let (_, named) = pushed(&dotnet_profile(&trace, ThreadLabels::NameOnly));
    let sets = series_label_sets(&named);
    for set in &sets {
        for (_, value) in set {
            assert!(
                !threads.iter().any(|t| value.contains(&t.to_string())),
                "{value} names a thread id"
            );
        }
    }
    assert!(sets.len() <= threads.len());
}
