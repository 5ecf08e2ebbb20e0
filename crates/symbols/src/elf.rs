//! Opening a traced ELF binary for symbolization: checking it is the traced one, finding its
//! separate debug file, and saying what a stripped one can name.
//!
//! Where names come from, best first:
//!
//! 1. DWARF in the binary itself.
//! 2. A separate debug file (what `objcopy --only-keep-debug` writes and distributions ship
//!    in `-dbg`/`-dbgsym` packages), found as GDB finds it: by build id at
//!    `<debug root>/.build-id/xx/yyyy.debug`, then by the binary's `.gnu_debuglink` name in
//!    its own directory, in its `.debug/` subdirectory and under `<debug root>/<its
//!    directory>`. A candidate counts only if its build id equals the binary's or, for a
//!    debuglink without build ids, its CRC-32 is the one the link states. `addr2line`'s
//!    `Loader` does no such search (it reads DWARF and symbols from the one file it is
//!    given), so the debug file is what it is given.
//! 3. The binary's symbol table (`.symtab`), else its dynamic symbol table (`.dynsym`,
//!    exported functions only); `Loader` already falls back from one to the other and
//!    honours symbol sizes, so an address past an exported function's end stays unnamed.
//!
//! A stripped binary without a debug file gets a note naming the package that would give
//! names, from `dpkg-query -S` on Debian-like systems (bounded in time).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use object::{Object, ObjectSection, ObjectSegment};

/// Where distributions install separate debug files.
pub(crate) const DEFAULT_DEBUG_ROOT: &str = "/usr/lib/debug";

/// The longest a package query may take before its answer is given up on.
const PACKAGE_QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// A binary ready to name addresses.
pub(crate) struct Binary {
    pub(crate) loader: addr2line::Loader,
    /// Loadable segments of the binary: where each file range is mapped in the file's
    /// virtual addresses.
    segments: Vec<Segment>,
}

impl std::fmt::Debug for Binary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Binary")
            .field("segments", &self.segments)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, Copy)]
struct Segment {
    file_offset: u64,
    file_size: u64,
    address: u64,
}

impl Binary {
    /// The file's virtual address of the byte at `file_offset`, when a loadable segment
    /// maps it.
    pub(crate) fn address_of_file_offset(&self, file_offset: u64) -> Option<u64> {
        self.segments.iter().find_map(|s| {
            let within = file_offset.checked_sub(s.file_offset)?;
            (within < s.file_size).then(|| s.address.wrapping_add(within))
        })
    }
}

/// Opens the binary at `path` that a trace says was mapped, with the build id the trace
/// states (if any). Returns it with a note when it can name only part of its code, or why
/// it cannot be used.
pub(crate) fn open_binary(
    path: &str,
    traced_build_id: Option<&str>,
    debug_root: &Path,
    debug_files: bool,
) -> Result<(Binary, Option<String>), String> {
    let pseudo = path.is_empty()
        || path.starts_with('[')
        || path.starts_with("linux-vdso")
        || path.starts_with("//anon");
    if pseudo {
        return Err(
            "not a file on disk (kernel-provided or anonymous memory); shown as module+offset"
                .into(),
        );
    }
    let file_path = Path::new(path);
    // Read through a cache of the parts parsed, not whole: a binary with debug info is
    // tens of megabytes, and only its headers, build id and section table are needed
    // here (the loader below maps the file itself).
    let data = object::ReadCache::new(std::fs::File::open(file_path).map_err(|e| {
        format!("cannot read the binary ({e}); its frames are shown as module+offset")
    })?);
    let file = object::File::parse(&data).map_err(|e| {
        format!("not a binary this symbolizer reads ({e}); its frames are shown as module+offset")
    })?;
    let on_disk_build_id = file.build_id().ok().flatten().map(hex);
    if let Some(traced) = traced_build_id.filter(|id| !id.is_empty()) {
        if on_disk_build_id.as_deref() != Some(traced) {
            return Err(format!(
                "the file on disk is not the traced binary (build id {} , traced {traced}); \
                 its frames are shown as module+offset",
                on_disk_build_id.as_deref().unwrap_or("none"),
            ));
        }
    }
    let segments = file
        .segments()
        .filter_map(|s| {
            let (file_offset, file_size) = s.file_range();
            (file_size > 0).then(|| Segment {
                file_offset,
                file_size,
                address: s.address(),
            })
        })
        .collect();
    let has_debug_info = has_dwarf(&file);
    let has_symtab = file.symbol_table().is_some();
    let debuglink = file
        .gnu_debuglink()
        .ok()
        .flatten()
        .map(|(name, crc)| (String::from_utf8_lossy(name).into_owned(), crc));
    drop(file);
    drop(data);

    let load = |p: &Path| {
        addr2line::Loader::new(p)
            .map_err(|e| format!("cannot load its symbols ({e}); shown as module+offset"))
    };
    if has_debug_info {
        let binary = Binary {
            loader: load(file_path)?,
            segments,
        };
        return Ok((binary, None));
    }
    let searched = if debug_files {
        debug_file_candidates(
            file_path,
            on_disk_build_id.as_deref(),
            debuglink.as_ref().map(|(n, _)| n.as_str()),
            debug_root,
        )
    } else {
        Vec::new()
    };
    let wanted_crc = debuglink.as_ref().map(|&(_, crc)| crc);
    for candidate in &searched {
        if is_debug_file_of(candidate, on_disk_build_id.as_deref(), wanted_crc) {
            if let Ok(loader) = addr2line::Loader::new(candidate) {
                return Ok((Binary { loader, segments }, None));
            }
        }
    }
    let binary = Binary {
        loader: load(file_path)?,
        segments,
    };
    let looked_in = if !debug_files {
        "separate debug files are not read here".to_owned()
    } else if searched.is_empty() {
        "it has no build id or debug link to look one up by".to_owned()
    } else {
        let list: Vec<String> = searched.iter().map(|p| p.display().to_string()).collect();
        format!("looked for {}", list.join(", "))
    };
    let note = if has_symtab {
        format!(
            "no debug info and no separate debug file ({looked_in}): functions are named, \
             without file and line"
        )
    } else {
        format!(
            "stripped, and no separate debug file ({looked_in}): only exported functions are \
             named (from .dynsym), other frames are shown as module+offset; {}",
            debug_package_hint(file_path)
        )
    };
    Ok((binary, Some(note)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn has_dwarf<'a, R: object::ReadRef<'a>>(file: &object::File<'a, R>) -> bool {
    file.section_by_name(".debug_info")
        .is_some_and(|s| s.size() > 0 && s.kind() != object::SectionKind::UninitializedData)
}

/// Where a separate debug file of `binary` may be, in GDB's order.
fn debug_file_candidates(
    binary: &Path,
    build_id: Option<&str>,
    debuglink: Option<&str>,
    debug_root: &Path,
) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(id) = build_id.filter(|id| id.len() > 2) {
        out.push(
            debug_root
                .join(".build-id")
                .join(&id[..2])
                .join(format!("{}.debug", &id[2..])),
        );
    }
    // A link is a bare file name; one with a directory part is not followed.
    if let Some(name) = debuglink.filter(|n| !n.is_empty() && !n.contains('/')) {
        if let Some(dir) = binary.parent() {
            out.push(dir.join(name));
            out.push(dir.join(".debug").join(name));
            let relative = dir.strip_prefix("/").unwrap_or(dir);
            out.push(debug_root.join(relative).join(name));
        }
    }
    out.retain(|p| p != binary);
    out
}

/// Whether `candidate` is the debug file of a binary with `build_id`, or (without build
/// ids on both sides) of a binary whose debug link states `crc`.
fn is_debug_file_of(candidate: &Path, build_id: Option<&str>, crc: Option<u32>) -> bool {
    let Ok(opened) = std::fs::File::open(candidate) else {
        return false;
    };
    let cache = object::ReadCache::new(opened);
    let Ok(file) = object::File::parse(&cache) else {
        return false;
    };
    if !has_dwarf(&file) && file.symbol_table().is_none() {
        return false;
    }
    let candidate_id = file.build_id().ok().flatten().map(hex);
    match (build_id, candidate_id) {
        (Some(want), Some(have)) => want == have,
        _ => crc.is_some_and(|crc| {
            // Only without build ids: the link's CRC is of the whole file.
            let Ok(data) = std::fs::read(candidate) else {
                return false;
            };
            let mut hasher = flate2::Crc::new();
            hasher.update(&data);
            hasher.sum() == crc
        }),
    }
}

/// What to install for names of a stripped binary: its package's debug package on
/// Debian-like systems, else a generic hint.
fn debug_package_hint(binary: &Path) -> String {
    match owning_package(binary) {
        Some(package) => {
            let debug = debug_package_of(&package);
            format!(
                "installing {debug} (debug symbols of {package}, which ships it) would give names"
            )
        }
        None => "installing the distribution's debug symbols for it (its -dbg, -dbgsym or \
                 -debuginfo package, or through debuginfod) would give names"
            .to_owned(),
    }
}

/// The Debian package that installed `binary`, asking `dpkg-query` about the path, its
/// canonical form and its other spelling on a merged-/usr system (packages list
/// `/lib/...` files that are found at `/usr/lib/...`).
fn owning_package(binary: &Path) -> Option<String> {
    let mut candidates = vec![binary.to_path_buf()];
    if let Ok(real) = binary.canonicalize() {
        candidates.push(real);
    }
    for path in candidates.clone() {
        if let Ok(rest) = path.strip_prefix("/usr") {
            candidates.push(Path::new("/").join(rest));
        } else if ["/lib", "/lib64", "/bin", "/sbin"]
            .iter()
            .any(|d| path.starts_with(d))
        {
            candidates.push(Path::new("/usr").join(path.strip_prefix("/").ok()?));
        }
    }
    candidates.dedup();
    candidates.into_iter().find_map(|path| {
        let out = run_bounded(Command::new("dpkg-query").arg("-S").arg(&path))?;
        package_from_dpkg_search(&out)
    })
}

/// The first package of `dpkg-query -S` output (`libc6:amd64: /lib/x86_64-linux-gnu/libc.so.6`,
/// or `pkg1, pkg2: path` for a path several packages share), without its architecture.
fn package_from_dpkg_search(output: &str) -> Option<String> {
    let line = output.lines().find(|l| !l.starts_with("diversion "))?;
    let (packages, _path) = line.split_once(": ")?;
    let first = packages.split(',').next()?.trim();
    let name = first.split(':').next()?.trim();
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+-.".contains(&b));
    valid.then(|| name.to_owned())
}

/// The package with `package`'s debug symbols: Debian's hand-made `-dbg` package when the
/// package index has one (`libc6-dbg`), else the automatic `-dbgsym` one (from the
/// `debian-debug` archive).
fn debug_package_of(package: &str) -> String {
    let dbg = format!("{package}-dbg");
    let known = run_bounded(
        Command::new("apt-cache")
            .arg("show")
            .arg("--no-all-versions")
            .arg(&dbg),
    )
    .is_some_and(|out| out.lines().any(|l| l == format!("Package: {dbg}")));
    if known {
        dbg
    } else {
        format!("{package}-dbgsym")
    }
}

/// The standard output of `command` when it succeeds within [`PACKAGE_QUERY_TIMEOUT`];
/// `None` when it fails, is missing or takes longer (it is then killed).
fn run_bounded(command: &mut Command) -> Option<String> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let deadline = Instant::now() + PACKAGE_QUERY_TIMEOUT;
    // The output of these queries is small; reading it after exit cannot block on a full
    // pipe. A query that writes more than a pipe holds is given up on at the deadline.
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    };
    if !status.success() {
        return None;
    }
    let mut out = String::new();
    child.stdout.take()?.read_to_string(&mut out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dpkg_search_output_names_the_package() {
        assert_eq!(
            package_from_dpkg_search("libc6:amd64: /lib/x86_64-linux-gnu/libc.so.6\n").as_deref(),
            Some("libc6")
        );
        assert_eq!(
            package_from_dpkg_search("libfoo1, libfoo-common: /usr/lib/x/libfoo.so.1\n").as_deref(),
            Some("libfoo1")
        );
        assert_eq!(
            package_from_dpkg_search("diversion by dash from: /bin/sh\nbash: /usr/lib/x/libq.so\n")
                .as_deref(),
            Some("bash")
        );
        assert_eq!(package_from_dpkg_search("garbage"), None);
    }

    #[test]
    fn debug_files_are_looked_for_by_build_id_then_debuglink() {
        let found = debug_file_candidates(
            Path::new("/usr/lib/x/libz.so.1"),
            Some("93ac61ec"),
            Some("ac61ec.debug"),
            Path::new("/usr/lib/debug"),
        );
        let found: Vec<String> = found.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(
            found,
            [
                "/usr/lib/debug/.build-id/93/ac61ec.debug",
                "/usr/lib/x/ac61ec.debug",
                "/usr/lib/x/.debug/ac61ec.debug",
                "/usr/lib/debug/usr/lib/x/ac61ec.debug",
            ]
        );
        // A link that names another directory is not followed.
        assert!(
            debug_file_candidates(Path::new("/a/b"), None, Some("../etc/x"), Path::new("/d"))
                .is_empty()
        );
    }

    #[test]
    fn a_slow_query_is_given_up_on() {
        let start = Instant::now();
        assert_eq!(run_bounded(Command::new("sleep").arg("30")), None);
        assert!(start.elapsed() < Duration::from_secs(10));
    }
}
