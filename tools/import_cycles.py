#!/usr/bin/env python3
"""Finds import circles between the files of each crate: file A names an item of file B
(`use crate::b::X`, `super::b::X`, `crate::b::f()` in code) and B, directly or through
others, names one of A's. A circle makes two files one unit that reads in neither order.

A module may use what its ancestors define (`super::Shared`: a submodule works inside
its parent's scope, which is what nesting is for), so an edge from a module to one of its
ancestors does not count; every other edge does, sideways (`collect` -> `convert`) and
down into another module's children alike. Re-exports (`pub use error::Error`) lead to the
module that defines the item: a facade is not a dependency. Code in `#[cfg(test)]`
modules does not count (tests may use what they test).

    python3 tools/import_cycles.py            # every crate under crates/
    python3 tools/import_cycles.py crates/client

Exit status 1 when a circle is found, naming its files, unless `tools/import_cycles.known`
lists it (one circle per line, as this script prints it after "import circle in ", with
the reason on the lines starting with `#` above it): a known circle is reported, not
failed, and a listed circle that no longer exists fails, so the list only shrinks.
"""
import os
import re
import sys

PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
GROUP = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^;]*?)\}", re.S)
COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
STRING = re.compile(r'"(?:\\.|[^"\\])*"')
MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;", re.M)
PATH_ATTR = re.compile(r'#\[path\s*=\s*"([^"]+)"\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;')


def module_files(root_file):
    """Maps each module path (tuple of names) to its file, from the crate root down."""
    modules = {(): root_file}
    stack = [((), root_file)]
    while stack:
        path, file = stack.pop()
        text = open(file, encoding="utf-8").read()
        base = os.path.dirname(file)
        name = os.path.basename(file)
        is_dir_owner = name in ("mod.rs", "lib.rs", "main.rs") or path == ()
        child_dir = base if is_dir_owner else os.path.join(base, name[:-3])
        explicit = {m.group(2): os.path.normpath(os.path.join(base, m.group(1)))
                    for m in PATH_ATTR.finditer(text)}
        for m in MOD_DECL.finditer(COMMENT.sub("", text)):
            child = m.group(1)
            if child in explicit:
                target = explicit[child]
            else:
                flat = os.path.join(child_dir, child + ".rs")
                nested = os.path.join(child_dir, child, "mod.rs")
                target = flat if os.path.exists(flat) else nested
            if os.path.exists(target):
                modules[path + (child,)] = target
                stack.append((path + (child,), target))
    return modules


REEXPORTS = {}


def resolve(modules, here, kind, names):
    """The module a `kind::names...` path from module `here` lands in: its deepest module,
    or, for an item that module re-exports (`pub use error::Error`), the module it comes
    from (a facade is not a dependency)."""
    if kind == "crate":
        base = ()
    elif kind == "super":
        base = here[:-1]
    else:
        base = here
    parts = list(names)
    while parts and parts[0] == "super":
        base = base[:-1]
        parts.pop(0)
    best = base
    cur = base
    rest = parts
    for i, p in enumerate(parts):
        cur = cur + (p,)
        if cur in modules:
            best = cur
            rest = parts[i + 1:]
        else:
            break
    seen = set()
    while rest and (best, rest[0]) in REEXPORTS and (best, rest[0]) not in seen:
        seen.add((best, rest[0]))
        best, rest = REEXPORTS[(best, rest[0])], rest[1:]
    return best


USE = re.compile(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);")


def reexports(modules):
    """(module, name) -> the module a `pub use` there takes `name` from."""
    REEXPORTS.clear()
    raw = []
    for path, file in modules.items():
        text = COMMENT.sub("", open(file, encoding="utf-8").read())
        for m in USE.finditer(text):
            tree = m.group(1).strip()
            head, _, group = tree.partition("{")
            head = head.rstrip(":").strip()
            items = group.rstrip("}").split(",") if group else [head.split("::")[-1]]
            prefix = head.split("::") if group else head.split("::")[:-1]
            for item in items:
                item = item.strip()
                if not item or item == "self" or "::" in item:
                    continue
                name, _, alias = item.partition(" as ")
                name, alias = name.strip(), (alias.strip() or name.strip())
                raw.append((path, alias, prefix + [name]))
    for path, alias, full in raw:
        kind = full[0] if full and full[0] in ("crate", "super", "self") else "self"
        names = full[1:] if full and full[0] in ("crate", "super", "self") else full
        target = resolve(modules, path, kind, names)
        if target != path:
            REEXPORTS[(path, alias)] = target


INLINE_MOD = re.compile(r"(#\[cfg\(test\)\]\s*)?(?:pub(?:\([^)]*\))?\s+)?mod\s+[A-Za-z_][A-Za-z0-9_]*\s*\{")


def block_end(text, open_brace):
    """The index after the `}` matching the `{` at `open_brace`."""
    depth = 0
    for i in range(open_brace, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


def own_code(text):
    """The file's code as its module sees it: test modules dropped (tests may use what
    they test), and inline modules' `super::` read as the file's own `self::`."""
    out, pos = [], 0
    for m in INLINE_MOD.finditer(text):
        if m.start() < pos:
            continue
        end = block_end(text, m.end() - 1)
        out.append(text[pos:m.start()])
        if not m.group(1):
            out.append(text[m.start():end].replace("super::", "self::"))
        pos = end
    out.append(text[pos:])
    return "".join(out)


def edges(modules):
    by_file = {}
    for path, file in modules.items():
        text = own_code(STRING.sub('""', COMMENT.sub("", open(file, encoding="utf-8").read())))
        targets = set()
        for m in GROUP.finditer(text):
            prefix = [p for p in m.group(2).split("::") if p]
            for item in re.split(r"[,\s]+", m.group(3)):
                item = item.split("::")[0].strip("{} ")
                if item and item != "self":
                    targets.add(resolve(modules, path, m.group(1), prefix + [item]))
                elif item == "self":
                    targets.add(resolve(modules, path, m.group(1), prefix))
        for m in PATH.finditer(text):
            names = [p for p in m.group(2).split("::") if p]
            targets.add(resolve(modules, path, m.group(1), names))
        # Paths through a child module by its bare name (`http::serve`, `use screen::X`).
        children = {m[-1] for m in modules if m[:-1] == path and len(m) == len(path) + 1}
        for child in children:
            if re.search(r"(?<![A-Za-z0-9_:])" + re.escape(child) + r"::", text):
                targets.add(path + (child,))
        by_file[path] = {
            t for t in targets if t != path and t in modules and path[: len(t)] != t
        }
    return by_file


def cycles(graph):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def crate_roots(crate):
    src = os.path.join(crate, "src")
    roots = [os.path.join(src, f) for f in ("lib.rs", "main.rs") if os.path.exists(os.path.join(src, f))]
    return roots


KNOWN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "import_cycles.known")


def known_circles():
    if not os.path.exists(KNOWN):
        return set()
    with open(KNOWN, encoding="utf-8") as f:
        return {line.strip() for line in f if line.strip() and not line.startswith("#")}


def main(argv):
    crates = argv[1:] or sorted(
        os.path.join("crates", c) for c in os.listdir("crates") if os.path.isdir(os.path.join("crates", c))
    )
    known = known_circles()
    seen = set()
    new = 0
    for crate in crates:
        for root in crate_roots(crate):
            modules = module_files(root)
            reexports(modules)
            graph = edges(modules)
            for comp in cycles(graph):
                files = sorted(modules[m] for m in comp)
                circle = f"{crate}: " + " <-> ".join(files)
                seen.add(circle)
                if circle in known:
                    print(f"known import circle in {circle} (tools/import_cycles.known)")
                else:
                    new += 1
                    print(f"import circle in {circle}")
    gone = sorted(known - seen) if not argv[1:] else []
    for circle in gone:
        print(f"tools/import_cycles.known lists a circle that is gone, remove it: {circle}")
    if new or gone:
        if new:
            print(f"{new} import circle(s): move what both sides need into a module of its own, "
                  "below both", file=sys.stderr)
        return 1
    print(f"no new import circles ({len(crates)} crates, {len(seen)} known)")
    return 0


def self_test():
    """The rules above on a made-up crate: what must and must not count as a circle."""
    import tempfile

    files = {
        "lib.rs": "mod a;\nmod b;\nmod hub;\nmod error;\npub use error::Error;\n",
        # a and b use each other: a circle.
        "a.rs": "use crate::b::B;\npub struct A;\n",
        "b.rs": "pub struct B;\nfn f() -> crate::a::A { crate::a::A }\n",
        # error uses the crate's re-export of itself, lib re-exports it: a facade, no circle.
        "error.rs": "pub struct Error;\nfn g(_: crate::Error) {}\n",
        # hub's child uses what hub defines, and hub calls its child: nesting, no circle.
        "hub/mod.rs": "mod child;\npub struct Shared;\nfn h() { child::run() }\n",
        "hub/child.rs": "use super::Shared;\npub fn run() { let _ = Shared; }\n"
        "mod inner { use super::run; }\n#[cfg(test)]\nmod tests { use crate::a::A; }\n",
    }
    with tempfile.TemporaryDirectory() as root:
        for name, text in files.items():
            path = os.path.join(root, "src", name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        modules = module_files(os.path.join(root, "src", "lib.rs"))
        reexports(modules)
        found = [sorted(c) for c in cycles(edges(modules))]
    assert found == [[("a",), ("b",)]], found
    print("import_cycles.py: self-test passed")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        sys.exit(0)
    sys.exit(main(sys.argv))
