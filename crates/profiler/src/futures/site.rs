//! Frames: the instrumented sites (an `#[profiled]` async fn, a `.profiled("name")` call)
//! and their ids.
//!
//! A site gets its id the first time a future of it is recorded, from one process-wide
//! counter, and joins the list of known sites; a session learns every known site's name when
//! it enables the provider, and a site that appears later is announced when it gets its id.
//! Both happen under the `SITES` lock, so no session misses a name: either the site was in the
//! list when the session's announcement ran, or the session was enabled when it was added.

use crate::sync::{AtomicU32, Ordering};
use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::Location;
use std::sync::{Mutex, OnceLock};

/// One instrumented site. Declared as a `static` by the attribute macro; built and leaked once
/// per (name, call site) by [`FutureExt::profiled`](super::FutureExt::profiled).
#[derive(Debug)]
pub struct Site {
    name: &'static str,
    /// For `#[profiled]`: the type name of a marker item declared in the instrumented fn,
    /// whose path is the fn's own, impl type included; the name is made from it once.
    path_of: Option<fn() -> &'static str>,
    resolved: OnceLock<&'static str>,
    file: &'static str,
    line: u32,
    /// 0 until the site is first recorded.
    id: AtomicU32,
}

static SITES: Mutex<Vec<&'static Site>> = Mutex::new(Vec::new());

impl Site {
    /// A site called `name`, defined at `file`:`line`.
    pub const fn new(name: &'static str, file: &'static str, line: u32) -> Site {
        Site {
            name,
            path_of: None,
            resolved: OnceLock::new(),
            file,
            line,
            id: AtomicU32::new(0),
        }
    }

    /// The site of the fn that declares the item whose type name `path_of` returns
    /// (`#[profiled]` declares one in each fn it instruments): named by that fn's path, as
    /// the symbolizer names it (`crate::module::Type::method`,
    /// `<crate::Type as crate::Trait>::method`).
    #[doc(hidden)]
    pub const fn of_fn(path_of: fn() -> &'static str, file: &'static str, line: u32) -> Site {
        Site {
            name: "",
            path_of: Some(path_of),
            resolved: OnceLock::new(),
            file,
            line,
            id: AtomicU32::new(0),
        }
    }

    /// The site's name.
    pub fn name(&self) -> &'static str {
        match self.path_of {
            None => self.name,
            Some(path_of) => self.resolved.get_or_init(|| fn_path(path_of())),
        }
    }

    /// The site's frame id, assigned on first use.
    #[inline]
    pub(crate) fn id(&'static self) -> u32 {
        // Relaxed: the id is a plain number; the announcement that must precede its use in a
        // session is ordered by the SITES lock, not by this load.
        match self.id.load(Ordering::Relaxed) {
            0 => self.assign_id(),
            id => id,
        }
    }

    #[cold]
    fn assign_id(&'static self) -> u32 {
        let mut sites = SITES.lock().unwrap_or_else(|p| p.into_inner());
        let id = self.id.load(Ordering::Relaxed);
        if id != 0 {
            return id;
        }
        let id = u32::try_from(sites.len() + 1).unwrap_or(u32::MAX);
        sites.push(self);
        self.id.store(id, Ordering::Relaxed);
        super::announce_frame(id, self);
        id
    }

    pub(crate) fn file(&self) -> &'static str {
        self.file
    }

    pub(crate) fn line(&self) -> u32 {
        self.line
    }
}

/// The path of the fn a marker item is declared in, from the marker's type name: the
/// marker's own name dropped, and the `{{closure}}` an async fn's body adds. Made once per
/// site, so kept for good.
fn fn_path(marker_type_name: &str) -> &'static str {
    let path = marker_type_name
        .rsplit_once("::")
        .map_or(marker_type_name, |(fn_path, _marker)| fn_path);
    let path = path.replace("::{{closure}}", "");
    Box::leak(path.into_boxed_str())
}

/// Calls `f` with every known site and its id, under the lock that orders announcements.
pub(crate) fn for_each_known(mut f: impl FnMut(u32, &'static Site)) {
    let sites = SITES.lock().unwrap_or_else(|p| p.into_inner());
    for (i, site) in sites.iter().enumerate() {
        f(i as u32 + 1, site);
    }
}

type SiteKey = (usize, usize, usize);

static NAMED: Mutex<Option<HashMap<SiteKey, &'static Site>>> = Mutex::new(None);

thread_local! {
    /// This thread's view of `NAMED`, so a hot call site takes no lock.
    static NAMED_CACHE: RefCell<HashMap<SiteKey, &'static Site>> = RefCell::new(HashMap::new());
}

/// The site of `name` at `caller`: one per distinct (name, source location), leaked once.
pub(crate) fn named(name: &'static str, caller: &'static Location<'static>) -> &'static Site {
    let key = (
        name.as_ptr() as usize,
        name.len(),
        caller as *const Location<'static> as usize,
    );
    let cached = NAMED_CACHE
        .try_with(|cache| cache.borrow().get(&key).copied())
        .ok()
        .flatten();
    if let Some(site) = cached {
        return site;
    }
    let site = {
        let mut named = NAMED.lock().unwrap_or_else(|p| p.into_inner());
        *named
            .get_or_insert_with(HashMap::new)
            .entry(key)
            .or_insert_with(|| Box::leak(Box::new(Site::new(name, caller.file(), caller.line()))))
    };
    let _ = NAMED_CACHE.try_with(|cache| cache.borrow_mut().insert(key, site));
    site
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn here(name: &'static str) -> &'static Site {
        named(name, Location::caller())
    }

    #[test]
    fn one_site_per_name_and_call_site() {
        let sites: Vec<&'static Site> = (0..3).map(|_| here("loop")).collect();
        assert!(std::ptr::eq(sites[0], sites[1]) && std::ptr::eq(sites[1], sites[2]));
        let other_line = here("loop");
        assert!(!std::ptr::eq(sites[0], other_line));
        let from_another_thread = std::thread::spawn(|| {
            (0..1).map(|_| here("loop")).next().unwrap() as *const Site as usize
        })
        .join()
        .unwrap();
        // A different call site (the closure's line), so a different site.
        assert_ne!(from_another_thread, sites[0] as *const Site as usize);
        assert_eq!(sites[0].name(), "loop");
        assert!(sites[0].file().ends_with("site.rs"));
        let id = sites[0].id();
        assert!(id > 0);
        assert_eq!(sites[0].id(), id);
        assert_ne!(other_line.id(), id);
    }

    #[test]
    fn a_fn_site_is_named_by_the_fn_path_without_closures() {
        assert_eq!(
            fn_path("app::server::Handler::run::{{closure}}::__EventpipeProfiledFn"),
            "app::server::Handler::run"
        );
        assert_eq!(
            fn_path("<app::Handler as app::Run>::go::{{closure}}::M"),
            "<app::Handler as app::Run>::go"
        );
        assert_eq!(fn_path("app::run::M"), "app::run");
    }
}
