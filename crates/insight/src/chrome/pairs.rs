//! Begin/end pairs made into complete slices: the open intervals per thread, provider and
//! base name, the raw begins held until their end, unmatched starts and stops.

use super::json::{Duration, JsonEvent, Micros, Omit, Payload, SliceArgs};
use super::names::{FieldName, IntervalNames};
use super::*;

/// A begin waiting for its end.
pub(super) struct Open {
    pub(super) ts: i64,
    pub(super) pid: u64,
    pub(super) tid: u64,
    /// `Provider/EventName` of the begin, for when it ends up an instant.
    pub(super) qualified: Rc<str>,
    /// The interval's name.
    pub(super) label: Rc<str>,
    /// Whether `label` is the begin's `Name` field.
    pub(super) named_by_field: bool,
    /// The value of the rule's `same` field, which the end must carry too.
    pub(super) same: Option<Value>,
    /// The `SpanId` of a tracing-layer span the begin enters.
    pub(super) span: Option<u64>,
    pub(super) args: StartArgs,
}

/// An event of `row` with payload `bytes` and nothing else: how a payload held as bytes
/// ([`StartArgs::Raw`]) is decoded.
pub(super) fn held_payload<'a>(
    trace: &'a TraceInfo,
    row: &'a EventMetadata,
    bytes: &'a [u8],
) -> Event<'a> {
    Event {
        header: EventHeader::default(),
        metadata: row,
        payload: bytes,
        stack: None,
        thread: None,
        capture_thread: None,
        labels: None,
        offset: Default::default(),
        trace,
    }
}

/// What every plain instant of a metadata row starts with, `{"name":"Provider/Event"`, and
/// its top-level fields' keys, `"Field":`, in order: written once a row, copied per event.
pub(super) struct RowJson {
    pub(super) head: Vec<u8>,
    pub(super) keys: Vec<Vec<u8>>,
    /// The row's events are begins that nothing in the trace can end ([`Ends`]).
    pub(super) endless_begins: bool,
}

/// The (provider, base name) of every end the trace's metadata rows define: a begin whose
/// pair is not among them can never end, whatever follows it.
pub(super) struct Ends(pub(super) std::collections::HashSet<(String, String)>);

impl Ends {
    pub(super) fn of(rows: &[EventMetadata]) -> Ends {
        let ends = rows.iter().filter_map(|md| {
            let base = match intervals::pair_rule(&md.provider, &md.display_name) {
                Some((rule, false)) => rule.name,
                Some((_, true)) => return None,
                None if intervals::opcode(md) == 2 => intervals::base_name(&md.display_name, 2),
                None => return None,
            };
            Some((md.provider.clone(), base.to_owned()))
        });
        Ends(ends.collect())
    }

    /// Whether the begins of `md`, held as bytes ([`RawBegin`]), can never end.
    pub(super) fn never_end(&self, md: &EventMetadata) -> bool {
        let base = intervals::base_name(&md.display_name, 1);
        !self.0.contains(&(md.provider.clone(), base.to_owned()))
    }
}

impl RowJson {
    pub(super) fn of(md: &EventMetadata) -> RowJson {
        let mut head = b"{\"name\":".to_vec();
        json::qualified_name(&mut head, md);
        let keys = md
            .fields
            .iter()
            .map(|f| {
                let mut key = Vec::with_capacity(f.name.len() + 3);
                json::string(&mut key, &f.name);
                key.push(b':');
                key
            })
            .collect();
        RowJson {
            head,
            keys,
            endless_begins: false,
        }
    }
}

/// A held begin's payload: decoded, or (a begin of a [`RawBegin`] row) its bytes, decoded
/// only if an end comes. Most begins that never end are of such rows, and a trace can hold
/// millions of them: each is written as an instant straight from its bytes.
pub(super) enum StartArgs {
    Decoded(Payload<FieldName>),
    Raw {
        row: Arc<EventMetadata>,
        bytes: Box<[u8]>,
    },
}

impl StartArgs {
    /// The field `name`. A raw begin's row has no field the converter looks up by name
    /// (`Name`, `SpanId`, `ParentSpanId`: [`RawBegin::of`]), so it has none to give.
    pub(super) fn field(&self, name: &str) -> Option<&Value> {
        match self {
            StartArgs::Decoded(payload) => payload.field(name),
            StartArgs::Raw { .. } => None,
        }
    }
}

/// A metadata row whose begins are held as bytes ([`StartArgs::Raw`]): a begin by its
/// opcode (no pair rule) of a row with no `Name`, `SpanId` or `ParentSpanId` field, none
/// of the rows that name threads or processes, and not the async profiler's. Every begin
/// of such a row has the same role, made once: its label is its base name, it carries no
/// value an end must match, and it enters no span.
pub(super) struct RawBegin {
    /// The base name's number ([`IntervalNames`]).
    pub(super) name: u32,
    pub(super) label: Rc<str>,
    pub(super) qualified: Rc<str>,
}

impl RawBegin {
    pub(super) fn of(md: &EventMetadata, names: &mut IntervalNames) -> Option<RawBegin> {
        let looked_up = md
            .fields
            .iter()
            .any(|f| matches!(f.name.as_str(), "Name" | "SpanId" | "ParentSpanId"));
        let special = matches!(
            md.provider.as_str(),
            RUNDOWN_PROVIDER
                | "Microsoft-DotNETCore-EventPipe"
                | "Universal.System"
                | crate::async_trace::PROVIDER
        );
        if looked_up
            || special
            || intervals::opcode(md) != 1
            || intervals::pair_rule(&md.provider, &md.display_name).is_some()
        {
            return None;
        }
        let base = intervals::base_name(&md.display_name, 1);
        Some(RawBegin {
            name: names.id(&md.provider, base),
            label: Rc::from(base),
            qualified: Rc::from(md.qualified_name()),
        })
    }
}

/// The slice of a tracing-layer span entered once so far, ended, held until the span
/// closes: only then is it known whether anything written refers to its `SpanId`.
pub(super) struct Ended {
    pub(super) open: Open,
    pub(super) end: i64,
    pub(super) stop: Payload<FieldName>,
    /// `ParentSpanId` is left out: the parent's slice lies around this one.
    pub(super) omit_parent: bool,
}

/// The open intervals of one thread, provider and base name ([`IntervalNames`] numbers
/// the provider and base name).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Key {
    pub(super) pid: u64,
    pub(super) tid: u64,
    pub(super) name: u32,
}

/// The role of `event`, whose decoded payload is `payload`.
pub(super) fn role<'a, N: AsRef<str>>(event: &'a Event<'_>, payload: &Payload<N>) -> Role<'a> {
    intervals::role(event.metadata, |name| payload.field(name))
}

pub(super) fn lifecycle<N: AsRef<str>>(
    event: &Event<'_>,
    payload: &Payload<N>,
) -> Option<Lifecycle> {
    intervals::lifecycle(event.metadata, |name| payload.field(name))
}

impl<W: Write> Converter<W> {
    /// A begin and its end as one complete event.
    pub(super) fn slice<N: AsRef<str>>(
        &mut self,
        start: &Open,
        end: i64,
        cat: &str,
        stop: &Payload<N>,
        omit: Omit,
    ) -> Result<()> {
        self.summary.complete += 1;
        let decoded;
        let start_args = match &start.args {
            StartArgs::Decoded(args) => args,
            StartArgs::Raw { row, bytes } => {
                decoded = self.decode_raw(row, bytes);
                &decoded
            }
        };
        self.w.event(&JsonEvent {
            name: &start.label,
            cat: Some(cat),
            ph: "X",
            ts: Some(Micros(start.ts)),
            dur: Some(Duration {
                start: start.ts,
                end,
            }),
            pid: start.pid,
            tid: start.tid,
            args: SliceArgs {
                start: start_args,
                stop,
                named_by: start.named_by_field.then_some(&*start.label),
                omit,
            },
        })
    }

    /// A held span slice, with its `SpanId` unless `unnamed`.
    pub(super) fn write_ended(&mut self, ended: &Ended, cat: &str, unnamed: bool) -> Result<()> {
        let omit = Omit {
            span_id: unnamed,
            parent: ended.omit_parent,
        };
        self.slice(&ended.open, ended.end, cat, &ended.stop, omit)
    }

    /// A Start that will never be closed.
    pub(super) fn give_up(&mut self, o: &Open, cat: &str) -> Result<()> {
        self.summary.unmatched_starts += 1;
        match &o.args {
            StartArgs::Decoded(args) => self.instant(&o.qualified, cat, o.ts, o.pid, o.tid, args),
            StartArgs::Raw { row, bytes } => {
                self.raw_instant(&o.qualified, o.ts, o.pid, o.tid, row, bytes)
            }
        }
    }

    /// An instant of a payload held as bytes ([`StartArgs::Raw`]): what [`Converter::instant`]
    /// writes for it decoded, written as [`Converter::plain_event`] writes, from the bytes.
    pub(super) fn raw_instant(
        &mut self,
        name: &str,
        ts: i64,
        pid: u64,
        tid: u64,
        row: &EventMetadata,
        bytes: &[u8],
    ) -> Result<()> {
        self.summary.instants += 1;
        let event = held_payload(&self.trace, row, bytes);
        let w = &mut self.w;
        w.separator();
        let buf = &mut w.buf;
        buf.extend_from_slice(b"{\"name\":");
        json::string(buf, name);
        json::instant_times(buf, ts, pid, tid);
        let mut args = json::Args::begin(buf);
        let decoded = event.for_each_field(|desc, value| args.field(buf, desc, value));
        args.end(buf, decoded);
        buf.push(b'}');
        w.written()
    }

    /// A held payload's bytes, decoded.
    pub(super) fn decode_raw(&mut self, row: &EventMetadata, bytes: &[u8]) -> Payload<FieldName> {
        let event = held_payload(&self.trace, row, bytes);
        let payload = match event.decode_payload() {
            Ok(fields) => Payload::Fields(fields),
            Err(e) => Payload::Error(e.to_string()),
        };
        payload.into_owned(&mut self.field_names)
    }

    /// Holds `open` until its end comes; the oldest of its key's begins is given up when
    /// there are too many.
    pub(super) fn open_begin(&mut self, key: Key, open: Open, cat: &str) -> Result<()> {
        let stack = self.open.entry(key).or_default();
        stack.push_back(open);
        if stack.len() > MAX_OPEN_PER_KEY {
            if let Some(oldest) = stack.pop_front() {
                self.give_up(&oldest, cat)?;
            }
        }
        Ok(())
    }

    /// Row `row`'s [`RawBegin`], if its begins are held as bytes; decided once a row.
    pub(super) fn raw_begin(&mut self, row: &Arc<EventMetadata>) -> Option<&RawBegin> {
        // Keyed by the shared row's address: [`HeldInOrder`] keeps every row it shares
        // for the whole conversion, so no other row can take the address.
        let key = Arc::as_ptr(row) as usize;
        let names = &mut self.interval_names;
        self.raw_begins
            .entry(key)
            .or_insert_with(|| RawBegin::of(row, names))
            .as_ref()
    }
}
