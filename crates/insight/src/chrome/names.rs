//! The names the timeline shows: event names by metadata id, field names shared across
//! events, interval names (`GC` from `GC/Start`), short process names.

use super::*;

/// `Provider/EventName` of each metadata row whose begins are held open, made once and
/// shared by them (they are written as instants if they are given up).
#[derive(Default)]
pub(super) struct QualifiedNames(pub(super) HashMap<u32, Rc<str>, FastHash>);

impl QualifiedNames {
    pub(super) fn get(&mut self, md: &EventMetadata) -> Rc<str> {
        // A V6 trace may reuse a metadata id after a flush: a held name is used only while
        // it still reads as this row's.
        let still = |name: &str| {
            name.strip_prefix(md.provider.as_str())
                .and_then(|rest| rest.strip_prefix('/'))
                == Some(md.display_name.as_str())
        };
        match self.0.get(&md.metadata_id) {
            Some(name) if still(name) => Rc::clone(name),
            _ => {
                let name: Rc<str> = Rc::from(md.qualified_name());
                self.0.insert(md.metadata_id, Rc::clone(&name));
                name
            }
        }
    }
}

/// A field name of a payload held past its event (an open begin's, a live span's).
pub(super) type FieldName = Rc<str>;

/// The field names of held payloads, one allocation per distinct name: a begin held
/// thousands of events before it is written does not bring its own copies of the names
/// (each a cache miss when it is written) nor allocate them.
#[derive(Default)]
pub(super) struct FieldNames(pub(super) HashMap<String, FieldName, FastHash>);

impl FieldNames {
    pub(super) fn get(&mut self, name: &str) -> FieldName {
        if let Some(shared) = self.0.get(name) {
            return Rc::clone(shared);
        }
        let shared: FieldName = Rc::from(name);
        self.0.insert(name.to_owned(), Rc::clone(&shared));
        shared
    }
}

/// The (provider, base name) pairs of begins and ends, numbered as first seen, so that
/// the key looked up for every begin and end holds a number instead of two new strings.
#[derive(Default)]
pub(super) struct IntervalNames {
    pub(super) ids: HashMap<String, HashMap<String, u32, FastHash>, FastHash>,
    pub(super) providers: Vec<String>,
}

impl IntervalNames {
    pub(super) fn id(&mut self, provider: &str, base: &str) -> u32 {
        if let Some(&id) = self.ids.get(provider).and_then(|bases| bases.get(base)) {
            return id;
        }
        let id = u32::try_from(self.providers.len()).unwrap_or(u32::MAX);
        self.providers.push(provider.to_owned());
        self.ids
            .entry(provider.to_owned())
            .or_default()
            .insert(base.to_owned(), id);
        id
    }

    pub(super) fn provider(&self, id: u32) -> &str {
        self.providers.get(id as usize).map_or("", String::as_str)
    }
}

/// The program of a command line: its first word (quotes respected), without directory.
pub(super) fn program_name(command_line: &str) -> Option<&str> {
    let line = command_line.trim_start();
    let first = match line.strip_prefix('"') {
        Some(rest) => rest.split('"').next()?,
        None => line.split_whitespace().next()?,
    };
    let name = first.rsplit(['/', '\\']).next()?;
    (!name.is_empty()).then_some(name)
}

/// The poll slices' names: each frame's path without the leading segments that no other
/// frame of the trace needs to tell it apart (`app::server::handle` is `handle`, unless
/// another frame's name ends in `::handle` too: then one of them is `server::handle`).
/// Segments are split at `::` outside `<...>`, so `<app::Conn as Service>::call` is `call`.
#[derive(Default)]
pub(super) struct ShortNames {
    /// Short name → the full name it stands for.
    pub(super) taken: HashMap<String, String>,
}

impl ShortNames {
    pub(super) fn name(&mut self, id: AsyncFrameId, full: &str) -> String {
        let mut depth = 0i32;
        let mut starts = vec![0];
        let bytes = full.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'<' => depth += 1,
                b'>' => depth -= 1,
                b':' if depth == 0 && bytes.get(i + 1) == Some(&b':') => {
                    starts.push(i + 2);
                    i += 1;
                }
                _ => {}
            }
            i += 1;
        }
        for &start in starts.iter().rev() {
            let short = &full[start..];
            if short.is_empty() {
                continue;
            }
            match self.taken.get(short) {
                Some(owner) if owner == full => return short.to_owned(),
                Some(_) => {}
                None => {
                    self.taken.insert(short.to_owned(), full.to_owned());
                    return short.to_owned();
                }
            }
        }
        // Every suffix, the full name too, stands for another frame already.
        let name = format!("{full} ({id})");
        self.taken.insert(name.clone(), full.to_owned());
        name
    }
}
