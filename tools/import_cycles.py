#!/usr/bin/env python3
"""Finds import circles between the files of each crate: file A names an item of file B
(`use crate::b::X`, `super::b::X`, `crate::b::f()` in code) and B, directly or through
others, names one of A's. A circle makes two files one unit that reads in neither order.

A module's file and the files of its own submodules are told apart: `mod.rs` using its
child `screen.rs` while `screen.rs` uses an item of `mod.rs` is a circle too.

    python3 tools/import_cycles.py            # every crate under crates/
    python3 tools/import_cycles.py crates/client

Exit status 1 when a circle is found, naming its files.
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
        by_file[path] = {t for t in targets if t != path and t in modules}
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


def main(argv):
    crates = argv[1:] or sorted(
        os.path.join("crates", c) for c in os.listdir("crates") if os.path.isdir(os.path.join("crates", c))
    )
    found = 0
    for crate in crates:
        for root in crate_roots(crate):
            modules = module_files(root)
            reexports(modules)
            graph = edges(modules)
            for comp in cycles(graph):
                found += 1
                files = sorted(modules[m] for m in comp)
                print(f"import circle in {crate}: " + " <-> ".join(files))
    if found:
        print(f"{found} import circle(s): move what both sides need into a module of its own, "
              "below both", file=sys.stderr)
        return 1
    print(f"no import circles ({len(crates)} crates)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
