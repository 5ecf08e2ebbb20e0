//! Stripped binaries: names from a separate debug file (by build id, by `.gnu_debuglink`),
//! from the dynamic symbol table without one, and a note saying what would give names. The
//! binaries are built here from C source with gcc and binutils; the expected addresses
//! come from `nm` on the unstripped build.

use std::path::{Path, PathBuf};
use std::process::Command;

use eventpipe_symbols::{FrameKind, Module, Symbolizer};

const SOURCE: &str = r#"
__attribute__((noinline)) static int hidden_helper(int x) {
    return x * 3 + 1;
}

int exported_entry(int x) {
    return hidden_helper(x) + 2;
}
"#;

/// Where the library is mapped in the pretend process.
const BASE: u64 = 0x7000_0000;

fn run(program: &str, args: &[&dyn AsRef<std::ffi::OsStr>]) -> Option<String> {
    let out = Command::new(program)
        .args(args.iter().map(|a| a.as_ref()))
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

struct Built {
    dir: PathBuf,
    /// Unstripped, with DWARF.
    full: PathBuf,
    /// (address, size) of a function, from `nm -S` on the unstripped library.
    hidden: u64,
    exported: u64,
}

/// This test's own empty directory `name` under cargo's scratch space.
fn empty_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Builds the library, or `None` (with a notice) without gcc and binutils.
fn build(name: &str) -> Option<Built> {
    let dir = empty_dir(name);
    let source = dir.join("demo.c");
    std::fs::write(&source, SOURCE).unwrap();
    let full = dir.join("full.so");
    let built = run(
        "gcc",
        &[
            &"-shared",
            &"-fPIC",
            &"-g",
            &"-O1",
            &"-Wl,--build-id",
            &"-o",
            &full,
            &source,
        ],
    );
    if built.is_none() {
        eprintln!("skipping: {name} (gcc cannot build a shared library here)");
        return None;
    }
    let Some(symbols) = run("nm", &[&"-S", &full]) else {
        eprintln!("skipping: {name} (binutils' nm is not available)");
        return None;
    };
    let address_of = |wanted: &str| {
        symbols.lines().find_map(|l| {
            let parts: Vec<&str> = l.split_whitespace().collect();
            (parts.len() == 4 && parts[3] == wanted)
                .then(|| u64::from_str_radix(parts[0], 16).unwrap())
        })
    };
    Some(Built {
        hidden: address_of("hidden_helper").expect("nm lists hidden_helper"),
        exported: address_of("exported_entry").expect("nm lists exported_entry"),
        dir,
        full,
    })
}

/// A stripped copy of the library at `path` (symbol table and DWARF removed, the dynamic
/// symbols kept, as distributions ship libraries).
fn strip(built: &Built, path: &Path) -> bool {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    run("strip", &[&"--strip-all", &"-o", &path, &built.full]).is_some()
}

fn only_debug(built: &Built, path: &Path) -> bool {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    run("objcopy", &[&"--only-keep-debug", &built.full, &path]).is_some()
}

fn build_id(path: &Path) -> String {
    let out = run("readelf", &[&"-n", &path]).expect("readelf");
    out.lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .expect("a build id")
        .trim()
        .to_owned()
}

fn symbolizer_for(path: &Path, debug_root: &Path) -> Symbolizer {
    let mut s = Symbolizer::new();
    s.set_debug_root(debug_root);
    s.add_module(Module {
        path: path.to_string_lossy().into_owned(),
        base_address: BASE,
        size: 0x10_0000,
        load_bias: BASE,
        build_id: String::new(),
    });
    s
}

#[test]
fn a_debug_file_found_by_debuglink_names_private_functions_with_lines() {
    let Some(built) = build("debuglink") else {
        return;
    };
    let lib = built.dir.join("app/libdemo.so");
    let debug = built.dir.join("app/.debug/libdemo.so.debug");
    if !(strip(&built, &lib) && only_debug(&built, &debug)) {
        eprintln!("skipping: debuglink (strip/objcopy failed)");
        return;
    }
    let linked = run(
        "objcopy",
        &[&format!("--add-gnu-debuglink={}", debug.display()), &lib],
    );
    assert!(linked.is_some(), "objcopy --add-gnu-debuglink");
    let empty_root = built.dir.join("no-debug-root");
    let mut s = symbolizer_for(&lib, &empty_root);
    let frames = s.resolve(BASE + built.hidden, false).to_vec();
    assert_eq!(frames[0].function, "hidden_helper", "{frames:?}");
    assert_eq!(frames[0].kind, FrameKind::Native);
    assert!(
        frames[0]
            .file
            .as_deref()
            .is_some_and(|f| f.ends_with("demo.c")),
        "{frames:?}"
    );
    assert!(frames[0].line.is_some());
    assert!(s.notes().is_empty(), "{:?}", s.notes());
}

#[test]
fn a_debug_file_found_by_build_id_names_private_functions() {
    let Some(built) = build("buildid") else {
        return;
    };
    let lib = built.dir.join("app/libdemo.so");
    let root = built.dir.join("debug");
    let id = build_id(&built.full);
    let debug = root
        .join(".build-id")
        .join(&id[..2])
        .join(format!("{}.debug", &id[2..]));
    if !(strip(&built, &lib) && only_debug(&built, &debug)) {
        eprintln!("skipping: buildid (strip/objcopy failed)");
        return;
    }
    let mut s = symbolizer_for(&lib, &root);
    let frames = s.resolve(BASE + built.hidden, false).to_vec();
    assert_eq!(frames[0].function, "hidden_helper", "{frames:?}");
    assert!(s.notes().is_empty(), "{:?}", s.notes());
    // A debug file of another build (unoptimized: other code, another build id) under
    // that name is not taken for it.
    let other_build = built.dir.join("other.so");
    let source = built.dir.join("demo.c");
    let compiled = run(
        "gcc",
        &[
            &"-shared",
            &"-fPIC",
            &"-g",
            &"-O0",
            &"-Wl,--build-id",
            &"-o",
            &other_build,
            &source,
        ],
    );
    assert!(compiled.is_some());
    assert_ne!(build_id(&other_build), id);
    std::fs::remove_file(&debug).unwrap();
    assert!(run("objcopy", &[&"--only-keep-debug", &other_build, &debug]).is_some());
    let mut other = symbolizer_for(&lib, &root);
    assert_eq!(
        other.resolve(BASE + built.hidden, false)[0].kind,
        FrameKind::ModuleOffset
    );
}

#[test]
fn without_a_debug_file_exported_functions_are_named_from_dynsym_and_the_note_says_why() {
    let Some(built) = build("dynsym") else {
        return;
    };
    let lib = built.dir.join("app/libdemo.so");
    if !strip(&built, &lib) {
        eprintln!("skipping: dynsym (strip failed)");
        return;
    }
    let empty_root = built.dir.join("no-debug-root");
    let mut s = symbolizer_for(&lib, &empty_root);
    let exported = s.resolve(BASE + built.exported, false).to_vec();
    assert_eq!(exported[0].function, "exported_entry", "{exported:?}");
    assert_eq!(exported[0].kind, FrameKind::Native);
    let hidden = s.resolve(BASE + built.hidden, false).to_vec();
    assert_eq!(hidden[0].kind, FrameKind::ModuleOffset, "{hidden:?}");
    assert_eq!(
        hidden[0].function,
        format!("libdemo.so+0x{:x}", built.hidden)
    );
    let notes = s.notes().join("\n");
    let id = build_id(&built.full);
    assert!(
        notes.contains(&format!(
            "{}: stripped, and no separate debug file (looked for {}): only exported \
             functions are named (from .dynsym), other frames are shown as module+offset; \
             installing the distribution's debug symbols for it",
            lib.display(),
            empty_root
                .join(".build-id")
                .join(&id[..2])
                .join(format!("{}.debug", &id[2..]))
                .display()
        )),
        "{notes}"
    );
}

#[test]
fn a_stripped_system_library_note_names_its_debug_package() {
    let libc = Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6");
    // Who ships libc, asked of dpkg directly (merged /usr: packages list /lib paths).
    let Some(owner) = run("dpkg-query", &[&"-S", &"/lib/x86_64-linux-gnu/libc.so.6"]) else {
        eprintln!("skipping: no dpkg-owned libc at /lib/x86_64-linux-gnu/libc.so.6");
        return;
    };
    let package = owner.split([':', ',']).next().unwrap().trim().to_owned();
    let dir = empty_dir("libc-hint");
    // An empty debug root: as on a machine without the debug package.
    let mut s = symbolizer_for(libc, &dir);
    s.resolve(BASE + 0x1000, false);
    let notes = s.notes().join("\n");
    let dbg = format!("installing {package}-dbg (debug symbols of {package}, which ships it)");
    let dbgsym =
        format!("installing {package}-dbgsym (debug symbols of {package}, which ships it)");
    assert!(notes.contains(&dbg) || notes.contains(&dbgsym), "{notes}");
}
