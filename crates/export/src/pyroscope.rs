//! Grafana Pyroscope: one period's profile of one process as a request to its push API or
//! its `/ingest` endpoint.
//!
//! * **Push** (`POST {url}/push.v1.PusherService/Push`, the Connect protocol's unary call
//!   with a binary body: `Content-Type: application/proto`): a `push.v1.PushRequest` with
//!   one `RawProfileSeries`, whose labels are `__name__` (the profile type, e.g.
//!   `process_cpu`), `service_name` and the process's own (`pid`, `host`, `runtime`), and
//!   one `RawSample` holding the gzip-compressed pprof. The messages below mirror
//!   `push/v1/push.proto` and `types/v1/types.proto` of grafana/pyroscope field by field.
//! * **Ingest** (`POST {url}/ingest?name=SERVICE{labels}&from=&until=&format=pprof&…`): the
//!   gzip-compressed pprof as the body; the profile type comes from its sample types.
//!
//! What the server accepts, read from grafana/pyroscope's source:
//!
//! * The service name in `/ingest`'s `name` may hold only `[A-Za-z0-9_.\-/]`
//!   (`api/model/labelset/validate.go`, `IsServiceNameRuneAllowed`); anything else is a 400
//!   on every period. [`service_name`] maps a process name into that set, and push uses the
//!   same name, so one service is one service whichever API carries it.
//! * A profile whose time is more than an hour old is refused (`pkg/validation`,
//!   `validation.reject-older-than`, 1 h by default): [`PeriodProfile::request`] gives each
//!   request an expiry, after which the queue drops it unsent.
//! * The server gives every stored profile an ID of its own (`pkg/distributor`,
//!   `series.ID = uuid.NewString()`): the sample ID sent is not a deduplication key, and a
//!   push stored whose answer was lost is stored again if retried. Delivery is at least
//!   once; the agent's queue does not retry a push the server may have stored
//!   ([`crate::delivery::Options::retry_unanswered`]).

use std::hash::{Hash, Hasher};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prost::Message;

use crate::delivery::Request;

/// The messages of Pyroscope's push API, with its field numbers.
pub mod proto {
    /// `types.v1.LabelPair`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LabelPair {
        /// The label's name.
        #[prost(string, tag = "1")]
        pub name: String,
        /// Its value.
        #[prost(string, tag = "2")]
        pub value: String,
    }

    /// `push.v1.RawSample`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RawSample {
        /// The pprof profile (gzip-compressed).
        #[prost(bytes = "vec", tag = "1")]
        pub raw_profile: Vec<u8>,
        /// The sample's UUID.
        #[prost(string, tag = "2")]
        pub id: String,
    }

    /// `push.v1.RawProfileSeries`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RawProfileSeries {
        /// The series' labels.
        #[prost(message, repeated, tag = "1")]
        pub labels: Vec<LabelPair>,
        /// Its profiles.
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<RawSample>,
    }

    /// `push.v1.PushRequest`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PushRequest {
        /// The series pushed.
        #[prost(message, repeated, tag = "1")]
        pub series: Vec<RawProfileSeries>,
    }
}

/// The push API's path below the server's URL.
pub const PUSH_PATH: &str = "/push.v1.PusherService/Push";

/// How old a profile Pyroscope takes by default (`validation.reject-older-than`).
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(3600);

/// `name` as a service name every Pyroscope API accepts: each character outside
/// `[A-Za-z0-9_.\-/]` becomes `_` (`Web Content` → `Web_Content`, `my:svc` → `my_svc`); an
/// empty name is `unknown`.
pub fn service_name(name: &str) -> String {
    let mapped: String = name
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if mapped.is_empty() {
        "unknown".to_owned()
    } else {
        mapped
    }
}

/// Which of Pyroscope's endpoints takes the profiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Api {
    /// `/push.v1.PusherService/Push` (Pyroscope 1.x and Grafana Cloud).
    #[default]
    Push,
    /// `/ingest` (older servers and agents).
    Ingest,
}

/// Where profiles go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// The server's URL (`http://pyroscope:4040`), without a path.
    pub url: String,
    /// The endpoint.
    pub api: Api,
    /// Headers every request carries (`Authorization`, `X-Scope-OrgID`).
    pub headers: Vec<(String, String)>,
    /// How old a profile the server takes (its `validation.reject-older-than`); an older
    /// one is dropped before it is sent. `None`: no limit.
    pub max_age: Option<Duration>,
}

/// One period's profile of one process.
#[derive(Debug, Clone)]
pub struct PeriodProfile {
    /// The profile type (`process_cpu`, `wall`, `memory`): the `__name__` label.
    pub profile_type: String,
    /// The service: the process's name (sent as [`service_name`] maps it).
    pub service_name: String,
    /// Further labels (`pid`, `host`, `runtime`).
    pub labels: Vec<(String, String)>,
    /// The period's start and end, nanoseconds since the Unix epoch.
    pub from_unix_nanos: i128,
    /// The period's end.
    pub until_unix_nanos: i128,
    /// Samples per second (for `/ingest`'s `sampleRate`).
    pub sample_rate: u32,
    /// The gzip-compressed pprof.
    pub pprof_gz: Vec<u8>,
}

/// Whether `name` is a valid label name (`[a-zA-Z_][a-zA-Z0-9_]*`), as Pyroscope (and
/// Prometheus) require.
pub fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl PeriodProfile {
    /// Every label of the series, sorted by name: `__name__`, `service_name`, then the
    /// profile's own (those with invalid names are left out).
    pub fn series_labels(&self) -> Vec<(String, String)> {
        let mut labels: Vec<(String, String)> = vec![
            ("__name__".into(), self.profile_type.clone()),
            ("service_name".into(), service_name(&self.service_name)),
        ];
        labels.extend(
            self.labels
                .iter()
                .filter(|(k, _)| is_label_name(k) && k != "__name__" && k != "service_name")
                .cloned(),
        );
        labels.sort();
        labels.dedup_by(|a, b| a.0 == b.0);
        labels
    }

    /// A UUID (version 4 layout) derived from the series and the period. The server
    /// replaces it with one of its own: it names the sample in the client's logs only.
    pub fn sample_id(&self) -> String {
        let mut bytes = [0u8; 16];
        for (half, seed) in bytes.chunks_mut(8).zip([0x5eed_u64, 0xfeed]) {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            seed.hash(&mut h);
            self.series_labels().hash(&mut h);
            self.from_unix_nanos.hash(&mut h);
            self.until_unix_nanos.hash(&mut h);
            half.copy_from_slice(&h.finish().to_le_bytes());
        }
        bytes[6] = (bytes[6] & 0x0f) | 0x40;
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &hex[..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..]
        )
    }

    /// The push API's message.
    pub fn push_request(&self) -> proto::PushRequest {
        proto::PushRequest {
            series: vec![proto::RawProfileSeries {
                labels: self
                    .series_labels()
                    .into_iter()
                    .map(|(name, value)| proto::LabelPair { name, value })
                    .collect(),
                samples: vec![proto::RawSample {
                    raw_profile: self.pprof_gz.clone(),
                    id: self.sample_id(),
                }],
            }],
        }
    }

    /// `/ingest`'s `name`: `SERVICE{label=value,…}`, the profile type left to the pprof's
    /// sample types.
    pub fn ingest_name(&self) -> String {
        let labels: Vec<String> = self
            .series_labels()
            .into_iter()
            .filter(|(k, _)| k != "__name__" && k != "service_name")
            .map(|(k, v)| format!("{k}={}", v.replace([',', '{', '}', '='], "_")))
            .collect();
        format!(
            "{}{{{}}}",
            service_name(&self.service_name),
            labels.join(",")
        )
    }

    /// When the server stops taking this profile: `max_age` after the period's start (the
    /// profile's time), less a minute for the clocks' difference and the sending.
    pub fn expires_at(&self, max_age: Duration) -> SystemTime {
        let start = u64::try_from(self.from_unix_nanos).unwrap_or(0);
        (UNIX_EPOCH + Duration::from_nanos(start) + max_age)
            .checked_sub(Duration::from_secs(60))
            .unwrap_or(UNIX_EPOCH)
    }

    /// The request for `server`; `what` names it in the log.
    pub fn request(&self, server: &Server) -> Request {
        let base = server.url.trim_end_matches('/');
        let what = format!(
            "{} profile of {} ({} s)",
            self.profile_type,
            self.service_name,
            (self.until_unix_nanos - self.from_unix_nanos) / 1_000_000_000
        );
        let expires = server.max_age.map(|age| self.expires_at(age));
        match server.api {
            Api::Push => Request {
                url: format!("{base}{PUSH_PATH}"),
                content_type: "application/proto".into(),
                headers: with(&server.headers, ("Connect-Protocol-Version", "1")),
                body: self.push_request().encode_to_vec(),
                what,
                expires,
            },
            Api::Ingest => {
                let query = [
                    ("name", self.ingest_name()),
                    ("from", (self.from_unix_nanos / 1_000_000_000).to_string()),
                    ("until", (self.until_unix_nanos / 1_000_000_000).to_string()),
                    ("format", "pprof".into()),
                    ("sampleRate", self.sample_rate.to_string()),
                    ("spyName", "eventpipe-rs".into()),
                ];
                let query: Vec<String> = query
                    .iter()
                    .map(|(k, v)| format!("{k}={}", percent_encode(v)))
                    .collect();
                Request {
                    url: format!("{base}/ingest?{}", query.join("&")),
                    content_type: "application/octet-stream".into(),
                    headers: server.headers.clone(),
                    body: self.pprof_gz.clone(),
                    what,
                    expires,
                }
            }
        }
    }
}

fn with(headers: &[(String, String)], extra: (&str, &str)) -> Vec<(String, String)> {
    let mut all = headers.to_vec();
    if !all.iter().any(|(k, _)| k.eq_ignore_ascii_case(extra.0)) {
        all.push((extra.0.to_owned(), extra.1.to_owned()));
    }
    all
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn period() -> PeriodProfile {
        PeriodProfile {
            profile_type: "process_cpu".into(),
            service_name: "app".into(),
            labels: vec![
                ("pid".into(), "42".into()),
                ("host".into(), "box".into()),
                ("bad-name".into(), "x".into()),
                ("service_name".into(), "other".into()),
            ],
            from_unix_nanos: 1_700_000_000_000_000_000,
            until_unix_nanos: 1_700_000_010_000_000_000,
            sample_rate: 100,
            pprof_gz: vec![0x1f, 0x8b, 1, 2],
        }
    }

    #[test]
    fn labels_are_valid_sorted_and_named_once() {
        let labels = period().series_labels();
        let names: Vec<&str> = labels.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["__name__", "host", "pid", "service_name"]);
        assert!(labels.contains(&("service_name".into(), "app".into())));
        assert!(!is_label_name("1x") && !is_label_name("") && is_label_name("_a1"));
    }

    #[test]
    fn the_sample_id_is_a_uuid_fixed_by_series_and_period() {
        let a = period();
        let id = a.sample_id();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert_eq!(id, period().sample_id());
        let mut later = period();
        later.from_unix_nanos += 10_000_000_000;
        assert_ne!(id, later.sample_id());
    }

    #[test]
    fn push_and_ingest_requests() {
        let server = Server {
            url: "http://p:4040/".into(),
            api: Api::Push,
            headers: vec![("X-Scope-OrgID".into(), "t1".into())],
            max_age: Some(DEFAULT_MAX_AGE),
        };
        let push = period().request(&server);
        assert_eq!(push.url, "http://p:4040/push.v1.PusherService/Push");
        assert_eq!(push.content_type, "application/proto");
        assert!(push
            .headers
            .contains(&("X-Scope-OrgID".into(), "t1".into())));
        let decoded = proto::PushRequest::decode(&push.body[..]).unwrap();
        assert_eq!(decoded.series[0].samples[0].raw_profile, period().pprof_gz);

        let ingest = period().request(&Server {
            api: Api::Ingest,
            ..server
        });
        assert_eq!(
            ingest.url,
            "http://p:4040/ingest?name=app%7Bhost%3Dbox%2Cpid%3D42%7D&from=1700000000\
             &until=1700000010&format=pprof&sampleRate=100&spyName=eventpipe-rs"
        );
        assert_eq!(ingest.body, period().pprof_gz);
        // Both expire a minute before the server's hour is up.
        let expected = UNIX_EPOCH + Duration::from_secs(1_700_000_000 + 3600 - 60);
        assert_eq!(
            (push.expires, ingest.expires),
            (Some(expected), Some(expected))
        );
    }

    /// `/ingest`'s `name`, parsed and validated as grafana/pyroscope parses it
    /// (`api/model/labelset/labelset.go`, `Parse`; `validate.go`,
    /// `IsServiceNameRuneAllowed` and `IsLabelNameRuneAllowed`), restated: the service name
    /// up to `{` (trimmed) of `[A-Za-z0-9_.\-/]`; then `key=value` pairs, a key (trimmed) of
    /// `[A-Za-z0-9_.]`, a value running to `,` or `}`.
    fn server_parses_ingest_name(name: &str) -> Result<(String, Vec<(String, String)>), String> {
        let label_rune = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.';
        let service_rune = |c: char| c == '-' || c == '.' || c == '/' || label_rune(c);
        let (service, rest) = name.split_once('{').unwrap_or((name, ""));
        let service = service.trim();
        if service.is_empty() {
            return Err("service name is required".into());
        }
        if let Some(c) = service.chars().find(|&c| !service_rune(c)) {
            return Err(format!("invalid service name: {service}: {c:?}"));
        }
        let mut labels = Vec::new();
        let mut rest = rest;
        while let Some((key, tail)) = rest.split_once('=') {
            let end = tail.find([',', '}']).unwrap_or(tail.len());
            let key = key.trim();
            if let Some(c) = key.chars().find(|&c| !label_rune(c)) {
                return Err(format!("invalid label name: {key}: {c:?}"));
            }
            labels.push((key.to_owned(), tail[..end].to_owned()));
            if tail[end..].starts_with('}') || end == tail.len() {
                break;
            }
            rest = &tail[end + 1..];
        }
        Ok((service.to_owned(), labels))
    }

    #[test]
    fn every_process_name_is_a_service_name_both_apis_accept_alike() {
        for (process, service) in [
            ("Web Content", "Web_Content"),
            ("my:svc", "my_svc"),
            ("worker (7)", "worker__7_"),
            ("dotnet", "dotnet"),
            ("a.b-c/d_e", "a.b-c/d_e"),
            ("ünïcode", "_n_code"),
            ("  ", "unknown"),
            ("x{y}=z,w", "x_y__z_w"),
        ] {
            let mut p = period();
            p.service_name = process.into();
            p.labels.push(("comm".into(), "a,b}c{d=e".into()));
            let (parsed, labels) = server_parses_ingest_name(&p.ingest_name())
                .unwrap_or_else(|e| panic!("{process:?}: the server refuses it: {e}"));
            assert_eq!(parsed, service, "{process:?}");
            assert!(labels.contains(&("pid".into(), "42".into())), "{labels:?}");
            assert!(
                labels.contains(&("comm".into(), "a_b_c_d_e".into())),
                "{labels:?}"
            );
            let push = p.push_request();
            let pushed = push.series[0]
                .labels
                .iter()
                .find(|l| l.name == "service_name")
                .map(|l| l.value.clone());
            assert_eq!(pushed.as_deref(), Some(service), "the same name over push");
        }
        // The restated parser refuses what the server refuses.
        assert!(server_parses_ingest_name("Web Content{}").is_err());
        assert!(server_parses_ingest_name("my:svc{}").is_err());
        assert!(server_parses_ingest_name("ok{bad-key=1}").is_err());
    }
}
