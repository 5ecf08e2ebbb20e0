#!/usr/bin/env python3
"""Generate crates/nettrace/src/manifest/generated.rs from the runtime's event manifest.

Native .NET runtime events in a nettrace file carry no event name and no field list; the
reader names and decodes them from a table built here out of `ClrEtwAll.man` (dotnet/runtime
src/coreclr/vm/ClrEtwAll.man), plus two small providers the runtime defines in code rather
than in the manifest (see extra_events()).

Usage (from the repository root):

    python3 tools/gen_manifest.py [--manifest PATH] [--out PATH]
    python3 tools/gen_manifest.py --check              # exit 1 if generated.rs is stale
    python3 tools/gen_manifest.py --verify-baselines DIR

Event and field names follow what Microsoft's TraceEvent library prints ("Task/Opcode", or
just "Task"); see "TraceEvent naming rules" below for the rules, overrides and their reasons.

Standard library only (Python 3.11).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MANIFEST = REPO_ROOT.parent / "shared" / "specs" / "ClrEtwAll.man"
DEFAULT_OUT = REPO_ROOT / "crates" / "nettrace" / "src" / "manifest" / "generated.rs"

# ---------------------------------------------------------------------------------------------
# Manifest vocabulary
# ---------------------------------------------------------------------------------------------

# `inType` -> KnownType variant. HexInt32/HexInt64 are output types in this manifest, but some
# manifests use them as input types too; they are plain 32/64-bit unsigned integers on the wire.
IN_TYPES = {
    "win:Int8": "Int8",
    "win:UInt8": "UInt8",
    "win:Int16": "Int16",
    "win:UInt16": "UInt16",
    "win:Int32": "Int32",
    "win:UInt32": "UInt32",
    "win:HexInt32": "UInt32",
    "win:Int64": "Int64",
    "win:UInt64": "UInt64",
    "win:HexInt64": "UInt64",
    "win:Float": "Float",
    "win:Double": "Double",
    "win:Boolean": "Boolean",
    "win:GUID": "Guid",
    "win:Pointer": "Pointer",
    "win:UnicodeString": "UnicodeString",
    "win:AnsiString": "AnsiString",
    "win:FILETIME": "FileTime",
    "win:SYSTEMTIME": "SystemTime",
    "win:Binary": "Binary",
}

# Standard ETW levels.
LEVELS = {
    "win:LogAlways": 0,
    "win:Critical": 1,
    "win:Error": 2,
    "win:Warning": 3,
    "win:Informational": 4,
    "win:Verbose": 5,
}

# Standard ETW opcodes (winmeta.xml): value, and the name TraceEvent prints for them (its
# TraceEventOpcode names, with DC_Start/DC_Stop as "DCStart"/"DCStop" as its CLR parsers spell
# them). Only win:Info, win:Start and win:Stop occur in ClrEtwAll.man today.
STANDARD_OPCODES = {
    "win:Info": (0, ""),
    "win:Start": (1, "Start"),
    "win:Stop": (2, "Stop"),
    "win:DC_Start": (3, "DCStart"),
    "win:DC_Stop": (4, "DCStop"),
    "win:Extension": (5, "Extension"),
    "win:Reply": (6, "Reply"),
    "win:Resume": (7, "Resume"),
    "win:Suspend": (8, "Suspend"),
    "win:Send": (9, "Send"),
    "win:Receive": (240, "Receive"),
}

# ---------------------------------------------------------------------------------------------
# TraceEvent naming rules that the manifest alone does not give
# ---------------------------------------------------------------------------------------------
#
# TraceEvent (microsoft/perfview, src/TraceEvent) names an event `TaskName/OpcodeName`, or just
# `TaskName` when the opcode is Info (0) or has no name (TraceEvent.EventName). Where the two
# names come from depends on whether its *static* CLR parsers (ClrTraceEventParser,
# ClrRundownTraceEventParser, ClrStressTraceEventParser, ClrPrivateTraceEventParser) have a
# template for the event's (provider, event id):
#
# * Known events: task and opcode names are literals in the template, chosen when those parsers
#   were generated from an older manifest and edited by hand since. Resolving the manifest's
#   task/opcode `message` strings reproduces most of them; rule 1 and NAME_OVERRIDES below
#   cover the rest. These names do not depend on the trace: TraceEvent finds the template by
#   event id and ignores the opcode in the event header.
# * Other events are decoded dynamically, with the opcode of the event header. Nettrace V4/V5
#   files carry no opcode for native runtime events (their metadata is empty), so TraceEvent
#   sees opcode 0 (Info) and prints the task name alone: event 200 (IncreaseMemoryPressure)
#   prints as "GC" in the .NET Core 3.0 baseline. TASK_ONLY_EVENTS (rule 3) lists them.
#
# The tables hold names and ids only. They were derived by comparing this generator's output
# with the template constructors of TraceEvent's CLR parsers (perfview commit f3ec1b38); rerun
# that comparison when updating the manifest.

RUNTIME = "Microsoft-Windows-DotNETRuntime"
RUNDOWN = "Microsoft-Windows-DotNETRuntimeRundown"
PRIVATE = "Microsoft-Windows-DotNETRuntimePrivate"

# Rule 1: an opcode name that starts with its task's name, and is longer, loses that prefix:
# opcode message "GCBulkNode" of task "GC" prints as "GC/BulkNode", "MethodILToNativeMap" as
# "Method/ILToNativeMap", "LoaderHeapAllocRequest" as "LoaderHeap/AllocRequest". The
# exceptions TraceEvent makes are in NAME_OVERRIDES.
#
# Rule 2: NAME_OVERRIDES, (provider, event id) -> (task name, opcode name), for the events whose
# TraceEvent name neither the message strings nor rule 1 give. Each entry says why.
NAME_OVERRIDES: dict[tuple[str, int], tuple[str, str]] = {
    # GCDynamicEvent is decoded by TraceEvent's GCDynamicTraceEventParser, which prints it as
    # "GC/DynamicTraceEvent" (and renames some payloads, e.g. "GC/CommittedUsage", by the Name
    # field: that depends on the payload and is not modelled here).
    (RUNTIME, 39): ("GC", "DynamicTraceEvent"),
    # TraceEvent keeps the task prefix here (exception to rule 1).
    (RUNTIME, 72): ("Method", "MethodDetails"),
    # Manifest opcode is win:Info (the event was added in .NET 8 without an opcode of its
    # own); TraceEvent gives it opcode "LockCreated".
    (RUNTIME, 90): ("Contention", "LockCreated"),
    # TraceEvent spells the rundown "DCEnd" opcodes "DCStop" (as the Rundown provider's own
    # messages do, e.g. "Method/DCStopComplete"); the runtime provider's copy says DCEnd.
    (RUNTIME, 136): ("Method", "DCStopCompleteV2"),
    # The manifest reuses opcode MethodLoad ("Load") for these two; TraceEvent names them after
    # the events ("Method/R2RGetEntryPoint" is in the .NET Core 3.0 baseline).
    (RUNTIME, 159): ("Method", "R2RGetEntryPoint"),
    (RUNTIME, 160): ("Method", "R2RGetEntryPointStart"),
    # Ansi-string variants of the JIT tracing events share their opcode with the Unicode
    # variants; TraceEvent tells them apart with an "Ansi" suffix.
    (RUNTIME, 186): ("Method", "InliningFailedAnsi"),
    (RUNTIME, 189): ("Method", "TailCallFailedAnsi"),
    # Opcode GCMarkWithType has message "Mark"; TraceEvent prints "GC/MarkWithType" (baseline).
    (RUNTIME, 202): ("GC", "MarkWithType"),
    # The EventSource event has no task in the manifest; TraceEvent's task is "EventSourceEvent".
    (RUNTIME, 270): ("EventSourceEvent", ""),
    # win:Start/win:Stop of the background JIT; TraceEvent names the opcodes after the events.
    (RUNTIME, 283): ("TieredCompilation", "BackgroundJitStart"),
    (RUNTIME, 284): ("TieredCompilation", "BackgroundJitStop"),
    # Verbose variant of event 297 in the same task; TraceEvent uses a task name of its own.
    (RUNTIME, 298): ("JitInstrumentationDataVerbose", "InstrumentationData"),
    # Rundown IL-to-native maps: TraceEvent puts DCStart/DCStop last (exception to rule 1 too).
    (RUNDOWN, 149): ("Method", "ILToNativeMapDCStart"),
    (RUNDOWN, 150): ("Method", "ILToNativeMapDCStop"),
    # For these rundown tasks TraceEvent prints the task's name, not its message (which is the
    # same as the runtime provider's task); the ExecutionCheckpoint one is in the .NET 6 baseline.
    (RUNDOWN, 280): ("TieredCompilationRundown", "SettingsDCStart"),
    (RUNDOWN, 300): ("ExecutionCheckpointRundown", "ExecutionCheckpointDCEnd"),
    # Opcode message equals the task's: TraceEvent prints the task alone.
    (PRIVATE, 191): ("FailFast", ""),
    # Ansi variant, as above.
    (PRIVATE, 193): ("GC", "CCWRefCountChangeAnsi"),
    # The manifest's opcode message misspells it "DestoryGCHandle".
    (PRIVATE, 195): ("GC", "DestroyGCHandle"),
}


def _ids(spec: str) -> list[int]:
    """Expands "1 5-7" to [1, 5, 6, 7]."""
    out: list[int] = []
    for part in spec.split():
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


# Rule 3: manifest events none of TraceEvent's static CLR parsers has a template for; TraceEvent
# prints their task name alone (see above). Events TraceEvent knows but this manifest lacks
# (e.g. .NET 9's WaitHandleWait, 301/302) are simply not in the table.
TASK_ONLY_EVENTS: set[tuple[str, int]] = {
    *((RUNTIME, i) for i in _ids("40-43 48 49 158 200 201 240-243 299")),
    *((RUNDOWN, i) for i in _ids("160 161")),
    *((PRIVATE, i) for i in _ids("26 189 197")),
}

# Microsoft-DotNETRuntimeMonoProfiler is not covered by rule 3 although TraceEvent has no parser
# for it: Mono does not use ETW, so TraceEvent has no registered manifest to take even the task
# name from, and rule 3 would name all 63 events "MonoProfiler". They keep the manifest's names
# (rule 1 applied), e.g. "MonoProfiler/JitBegin".


# Field names: the manifest's, except where TraceEvent's CLR parsers name the payload field
# differently (their PayloadNames). (provider, event id) -> {manifest name: TraceEvent name}.
FIELD_RENAMES: dict[tuple[str, int], dict[str, str]] = {
    # GCMarkWithType: the byte count is "Promoted" in TraceEvent (.NET Core 3.0 baseline).
    (RUNTIME, 202): {"Bytes": "Promoted"},
    # GCJoin_V2: TraceEvent calls the join id "ID".
    (RUNTIME, 203): {"JoinID": "ID"},
    # EventSource event: "EventName" would clash with the event's own name in TraceEvent.
    (RUNTIME, 270): {"EventName": "Name"},
}

# Templates whose array length the manifest gets wrong: (template, field) -> name of the field
# that holds the real element count. ClrStackWalk declares Stack with count="2" (a placeholder:
# manifests cannot express the real layout at the time), but the stack holds FrameCount
# instruction pointers: Microsoft's CLR ETW documentation of the event says so, and TraceEvent
# reads FrameCount of them.
COUNT_FIXES: dict[tuple[str, str], str] = {
    ("ClrStackWalk", "Stack"): "FrameCount",
}


# ---------------------------------------------------------------------------------------------
# Data model
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    name: str
    ty: str  # KnownType variant name, or "Struct"
    count: tuple  # ("One",) | ("Fixed", n) | ("Field", index)
    struct: tuple["Field", ...] | None = None


@dataclass
class Event:
    provider: str
    event_id: int
    version: int
    task: str
    opcode: str
    name: str
    opcode_value: int
    keywords: int
    level: int
    fields: tuple[Field, ...]
    template: str  # template tid, or a synthetic name for hand-written events
    symbol: str = ""
    origin: str = "manifest"


# ---------------------------------------------------------------------------------------------
# Manifest parsing
# ---------------------------------------------------------------------------------------------


class ManifestError(Exception):
    pass


def _local(tag: str) -> str:
    return tag.split("}", 1)[1] if "}" in tag else tag


def _children(elem: ET.Element, name: str) -> list[ET.Element]:
    return [c for c in elem if _local(c.tag) == name]


def _child(elem: ET.Element, name: str) -> ET.Element | None:
    found = _children(elem, name)
    return found[0] if found else None


def _int(text: str) -> int:
    return int(text, 0)


def parse_manifest(path: Path) -> list[Event]:
    root = ET.parse(path).getroot()

    strings: dict[str, str] = {}
    for elem in root.iter():
        if _local(elem.tag) == "string" and "id" in elem.attrib:
            strings[elem.attrib["id"]] = elem.attrib.get("value", "")

    def message(elem: ET.Element, fallback: str) -> str:
        msg = elem.attrib.get("message")
        if not msg:
            return fallback
        m = re.fullmatch(r"\$\(string\.([^)]+)\)", msg)
        if not m:
            return msg
        if m.group(1) not in strings:
            raise ManifestError(f"unresolved string {msg}")
        return strings[m.group(1)]

    events: list[Event] = []
    providers = [e for e in root.iter() if _local(e.tag) == "provider"]
    if not providers:
        raise ManifestError("no <provider> in manifest")
    for prov in providers:
        pname = prov.attrib["name"]

        keywords: dict[str, int] = {}
        kw_parent = _child(prov, "keywords")
        if kw_parent is not None:
            for kw in _children(kw_parent, "keyword"):
                keywords[kw.attrib["name"]] = _int(kw.attrib["mask"])

        # Tasks, and opcodes scoped to a task or to the whole provider.
        tasks: dict[str, tuple[int, str]] = {}
        task_opcodes: dict[tuple[str, str], tuple[int, str]] = {}
        global_opcodes: dict[str, tuple[int, str]] = {}
        tasks_parent = _child(prov, "tasks")
        if tasks_parent is not None:
            for task in _children(tasks_parent, "task"):
                tname = task.attrib["name"]
                tasks[tname] = (_int(task.attrib["value"]), message(task, tname))
                ops = _child(task, "opcodes")
                if ops is not None:
                    for op in _children(ops, "opcode"):
                        task_opcodes[(tname, op.attrib["name"])] = (
                            _int(op.attrib["value"]),
                            message(op, op.attrib["name"]),
                        )
        ops_parent = _child(prov, "opcodes")
        if ops_parent is not None:
            for op in _children(ops_parent, "opcode"):
                global_opcodes[op.attrib["name"]] = (
                    _int(op.attrib["value"]),
                    message(op, op.attrib["name"]),
                )

        templates: dict[str, tuple[Field, ...]] = {}
        tpl_parent = _child(prov, "templates")
        if tpl_parent is not None:
            for tpl in _children(tpl_parent, "template"):
                templates[tpl.attrib["tid"]] = _parse_fields(tpl, f"{pname}/{tpl.attrib['tid']}")

        events_parent = _child(prov, "events")
        if events_parent is None:
            continue
        for ev in _children(events_parent, "event"):
            eid = _int(ev.attrib["value"])
            version = _int(ev.attrib.get("version", "0"))
            where = f"{pname} event {eid} v{version}"

            task_ref = ev.attrib.get("task")
            if task_ref is None:
                # No task: ETW names such an event by its symbol.
                task_name = ev.attrib.get("symbol", f"EventID({eid})")
            elif task_ref in tasks:
                task_name = tasks[task_ref][1]
            else:
                raise ManifestError(f"{where}: unknown task {task_ref}")

            op_ref = ev.attrib.get("opcode", "win:Info")
            if op_ref in STANDARD_OPCODES:
                op_value, op_name = STANDARD_OPCODES[op_ref]
            elif task_ref is not None and (task_ref, op_ref) in task_opcodes:
                op_value, op_name = task_opcodes[(task_ref, op_ref)]
            elif op_ref in global_opcodes:
                op_value, op_name = global_opcodes[op_ref]
            else:
                raise ManifestError(f"{where}: unknown opcode {op_ref}")

            mask = 0
            for kw in ev.attrib.get("keywords", "").split():
                if kw not in keywords:
                    raise ManifestError(f"{where}: unknown keyword {kw}")
                mask |= keywords[kw]

            level_ref = ev.attrib.get("level", "win:LogAlways")
            if level_ref not in LEVELS:
                raise ManifestError(f"{where}: unknown level {level_ref}")

            tid = ev.attrib.get("template")
            if tid is None:
                fields: tuple[Field, ...] = ()
            elif tid in templates:
                fields = templates[tid]
            else:
                raise ManifestError(f"{where}: unknown template {tid}")

            task_name, op_name = traceevent_names(pname, eid, task_name, op_name)
            fields = apply_field_fixes(pname, eid, tid or "", fields)
            events.append(
                Event(
                    provider=pname,
                    event_id=eid,
                    version=version,
                    task=task_name,
                    opcode=op_name,
                    name=event_name(task_name, op_name),
                    opcode_value=op_value,
                    keywords=mask,
                    level=LEVELS[level_ref],
                    fields=fields,
                    template=tid or "",
                    symbol=ev.attrib.get("symbol", ""),
                )
            )
    return events


def _parse_fields(parent: ET.Element, where: str) -> tuple[Field, ...]:
    fields: list[Field] = []
    index: dict[str, int] = {}

    def count_of(attr: str, value: str) -> tuple:
        value = value.strip()
        if re.fullmatch(r"\d+", value):
            n = int(value)
            # count="1" declares a one-element array, which is a plain value on the wire.
            return ("One",) if n == 1 and attr == "count" else ("Fixed", n)
        if value not in index:
            raise ManifestError(f"{where}: {attr}={value!r} names no earlier field")
        return ("Field", index[value])

    for child in parent:
        kind = _local(child.tag)
        if kind not in ("data", "struct"):
            continue  # <UserData> and comments
        name = child.attrib["name"]
        if kind == "struct":
            inner = _parse_fields(child, f"{where}/{name}")
            count = ("One",)
            if "count" in child.attrib:
                count = count_of("count", child.attrib["count"])
            fields.append(Field(name, "Struct", count, inner))
        else:
            in_type = child.attrib.get("inType")
            if in_type not in IN_TYPES:
                raise ManifestError(f"{where}/{name}: unsupported inType {in_type}")
            count: tuple = ("One",)
            if "count" in child.attrib and "length" in child.attrib:
                raise ManifestError(f"{where}/{name}: both count and length")
            if "count" in child.attrib:
                count = count_of("count", child.attrib["count"])
            elif "length" in child.attrib:
                count = count_of("length", child.attrib["length"])
            fields.append(Field(name, IN_TYPES[in_type], count))
        index[name] = len(fields) - 1
    return tuple(fields)


def apply_field_fixes(
    provider: str, event_id: int, template: str, fields: tuple[Field, ...]
) -> tuple[Field, ...]:
    out = list(fields)
    names = [f.name for f in fields]
    for i, f in enumerate(out):
        fix = COUNT_FIXES.get((template, f.name))
        if fix is not None:
            out[i] = Field(f.name, f.ty, ("Field", names.index(fix)), f.struct)
    renames = FIELD_RENAMES.get((provider, event_id), {})
    for i, f in enumerate(out):
        if f.name in renames:
            out[i] = Field(renames[f.name], f.ty, f.count, f.struct)
    return tuple(out)


def event_name(task: str, opcode: str) -> str:
    return f"{task}/{opcode}" if opcode else task


def traceevent_names(provider: str, event_id: int, task: str, opcode: str) -> tuple[str, str]:
    """Task and opcode names as TraceEvent prints them (see the tables at the top)."""
    if (provider, event_id) in NAME_OVERRIDES:
        return NAME_OVERRIDES[(provider, event_id)]
    if (provider, event_id) in TASK_ONLY_EVENTS:
        return task, ""
    if opcode.startswith(task) and len(opcode) > len(task):
        opcode = opcode[len(task):]
    return task, opcode


# ---------------------------------------------------------------------------------------------
# Providers that are not in the manifest (hand-written; NOT generated from ClrEtwAll.man)
# ---------------------------------------------------------------------------------------------


def extra_events() -> list[Event]:
    """Events of providers the runtime defines in code, not in ClrEtwAll.man."""
    u32 = lambda name: Field(name, "UInt32", ("One",))  # noqa: E731
    ustr = lambda name: Field(name, "UnicodeString", ("One",))  # noqa: E731
    sample = "Microsoft-DotNETCore-SampleProfiler"
    eventpipe = "Microsoft-DotNETCore-EventPipe"
    return [
        # The runtime's sample profiler (src/native/eventpipe/ep-sample-profiler.c): event 0,
        # version 0, no keywords, level Informational, written once per sampled thread with a
        # 4-byte payload: 1 = thread was in native/external code, 2 = in managed code (0 is
        # "Error" in TraceEvent's rendering). TraceEvent names it task "Thread" opcode "Sample"
        # (opcode value 10 in its registration).
        Event(sample, 0, 0, "Thread", "Sample", "Thread/Sample", 10, 0, 4,
              (u32("Type"),), "SampleProfiler_ThreadSample", origin="hand-written"),
        # Event 1 "Thread/StackWalk" (opcode 11): written only by the NetPerf-era runtimes
        # (.NET Core 2.0/2.1); its payload is the raw stack, one pointer per frame, with
        # FrameCount = payload size / pointer size. A payload that is "pointers up to the end"
        # has no KnownCount, so no fields are listed.
        Event(sample, 1, 0, "Thread", "StackWalk", "Thread/StackWalk", 11, 0, 4,
              (), "SampleProfiler_ThreadStackWalk", origin="hand-written"),
        # The runtime's own provider (src/native/eventpipe/ep-event-source.c; before .NET 6
        # src/coreclr/vm/eventpipeeventsource.cpp): event 1 "ProcessInfo", opcode 0, no
        # keywords, level LogAlways. Its metadata declares version 0 with CommandLine only
        # (.NET Core 3.x/5), then version 1 adding OSInformation and ArchInformation (.NET 6+).
        Event(eventpipe, 1, 0, "ProcessInfo", "", "ProcessInfo", 0, 0, 0,
              (ustr("CommandLine"),), "EventPipe_ProcessInfo", origin="hand-written"),
        Event(eventpipe, 1, 1, "ProcessInfo", "", "ProcessInfo", 0, 0, 0,
              (ustr("CommandLine"), ustr("OSInformation"), ustr("ArchInformation")),
              "EventPipe_ProcessInfo_V1", origin="hand-written"),
    ]


# ---------------------------------------------------------------------------------------------
# Rust output
# ---------------------------------------------------------------------------------------------


def sort_key(e: Event) -> tuple:
    return (e.provider.encode("utf-8"), e.event_id, e.version)


def rust_str(s: str) -> str:
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= ord(ch) < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\u{{{ord(ch):x}}}")
    return '"' + "".join(out) + '"'


def static_name(base: str) -> str:
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", base)
    s = re.sub(r"[^A-Za-z0-9]+", "_", s).strip("_").upper()
    return s if not s[:1].isdigit() else "T_" + s


class Emitter:
    """Emits field lists as named statics, sharing identical lists."""

    def __init__(self) -> None:
        self.by_content: dict[tuple[Field, ...], str] = {}
        self.used: set[str] = set()
        self.items: list[str] = []

    def fields(self, fields: tuple[Field, ...], hint: str) -> str:
        if not fields:
            return "&[]"
        if fields in self.by_content:
            return self.by_content[fields]
        # Nested structs first, so each static is defined from its parts.
        lines = []
        for f in fields:
            if f.struct is not None:
                inner = self.fields(f.struct, f"{hint}_{f.name}")
                ty = f"KnownType::Struct({inner})"
            else:
                ty = f"KnownType::{f.ty}"
            lines.append(
                f"    KnownField {{ name: {rust_str(f.name)}, ty: {ty}, "
                f"count: {count_expr(f.count)} }},"
            )
        name = static_name(hint)
        base, n = name, 2
        while name in self.used:
            name, n = f"{base}_{n}", n + 1
        self.used.add(name)
        self.items.append(
            "#[rustfmt::skip]\n"
            f"static {name}: &[KnownField] = &[\n" + "\n".join(lines) + "\n];\n"
        )
        self.by_content[fields] = name
        return name


def count_expr(count: tuple) -> str:
    if count[0] == "One":
        return "KnownCount::One"
    return f"KnownCount::{count[0]}({count[1]})"


HEADER = """\
// @generated by tools/gen_manifest.py from ClrEtwAll.man (dotnet/runtime's event manifest).
// Do not edit by hand: change the generator and rerun `python3 tools/gen_manifest.py`
// (`--check` verifies this file is current).
//
// Providers Microsoft-DotNETCore-SampleProfiler and Microsoft-DotNETCore-EventPipe are not in
// the manifest; their entries are written by hand in the generator (see extra_events()).

use super::{KnownCount, KnownEvent, KnownField, KnownType};
"""


def render(events: list[Event]) -> str:
    events = sorted(events, key=sort_key)
    for a, b in zip(events, events[1:]):
        if sort_key(a) == sort_key(b):
            raise ManifestError(f"duplicate event {a.provider} {a.event_id} v{a.version}")
    em = Emitter()
    rows = []
    for e in events:
        hint = e.template or f"{e.provider}_{e.event_id}_V{e.version}"
        fields = em.fields(e.fields, hint)
        marker = "    // Hand-written in tools/gen_manifest.py, not from ClrEtwAll.man.\n"
        rows.append(
            (marker if e.origin != "manifest" else "")
            + "    KnownEvent {\n"
            f"        provider: {rust_str(e.provider)},\n"
            f"        event_id: {e.event_id},\n"
            f"        version: {e.version},\n"
            f"        task: {rust_str(e.task)},\n"
            f"        opcode: {rust_str(e.opcode)},\n"
            f"        name: {rust_str(e.name)},\n"
            f"        opcode_value: {e.opcode_value},\n"
            f"        keywords: {e.keywords:#x},\n"
            f"        level: {e.level},\n"
            f"        fields: {fields},\n"
            "    },"
        )
    out = [HEADER]
    out.append(
        "#[rustfmt::skip]\n"
        "pub(super) static KNOWN_EVENTS: &[KnownEvent] = &[\n" + "\n".join(rows) + "\n];\n"
    )
    out.extend(em.items)
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# Baseline verification
# ---------------------------------------------------------------------------------------------
#
# A TraceEvent baseline line is `Provider/EventName, COUNT, <Event ... field="value" .../>`: the
# first event of that name rendered by TraceEvent's ToXml. The attributes after EventName are
# the payload fields as TraceEvent *renders* them, which is not exactly the wire layout this
# table describes. The differences, applied before comparing:
#
# * Order: TraceEvent's hand-written classes print some fields in their own order (GC/Start
#   prints Reason before Depth). The table keeps wire order, so an order-only difference is
#   accepted and reported as a note.
# * Struct arrays (KnownType::Struct) print as child elements, not attributes; the children's
#   attributes are checked against the struct's fields when the element is named after it.
# * Padding fields (Reserved*, Unused*) are never printed.
# * BASELINE_RENDERING below: fields TraceEvent computes (not in the payload) or leaves out.

BASELINE_PROVIDERS = (
    "Microsoft-Windows-DotNETRuntime",  # also -Rundown, -Private, -Stress
    "Microsoft-DotNETCore-SampleProfiler",
    "Microsoft-DotNETCore-EventPipe",
)

# Attributes of TraceEvent's XML rendering that are not payload fields.
BASELINE_HEADER_ATTRS = {
    "MSec", "PID", "PName", "TID", "EventName", "ProviderName", "FormattedMessage",
}

# Event name -> (fields TraceEvent adds, fields TraceEvent does not print).
BASELINE_RENDERING: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    # Sums over the generations and the GC's depth, computed by TraceEvent.
    "GC/HeapStats": (frozenset({"TotalHeapSize", "TotalPromoted", "Depth"}), frozenset()),
    # Decoded by TraceEvent from bits of MethodFlags.
    "Method/LoadVerbose": (frozenset({"OptimizationTier"}), frozenset()),
    # TraceEvent's module events do not print ClrInstanceID.
    "Loader/ModuleLoad": (frozenset(), frozenset({"ClrInstanceID"})),
    "Loader/ModuleDCStop": (frozenset(), frozenset({"ClrInstanceID"})),
    # TraceEvent prints the version 0/1 fields (plus Count/Times from version 4) only.
    "GC/GlobalHeapHistory": (
        frozenset(),
        frozenset({"PauseMode", "MemoryPressure", "CondemnReasons0", "CondemnReasons1"}),
    ),
}

_ATTR = re.compile(r'([\w.:-]+)=\s*"[^"]*"')


def parse_baseline_line(
    line: str,
) -> tuple[str, str, list[str], list[tuple[str, list[str]]]] | None:
    """(provider, event name, attribute names, [(child element, attribute names)])."""
    line = line.lstrip("\ufeff").rstrip("\r\n")
    m = re.match(r"([^,]+), (\d+), (<Event .*)$", line)
    if not m:
        return None
    key, xml = m.group(1), m.group(3)
    provider, _, name = key.partition("/")
    head = re.match(r'<Event((?:\s+[\w.:-]+=\s*"[^"]*")*)\s*/?>', xml)
    if not head:
        return None
    attrs = [a for a in _ATTR.findall(head.group(1)) if a not in BASELINE_HEADER_ATTRS]
    children = [
        (c.group(1), _ATTR.findall(c.group(2)))
        for c in re.finditer(r'<(\w+)((?:\s+[\w.:-]+=\s*"[^"]*")*)\s*/>', xml[head.end():])
    ]
    return provider, name, attrs, children


def rendered_fields(event: Event) -> list[str]:
    """The field names TraceEvent would print as attributes for `event`, in wire order."""
    added, dropped = BASELINE_RENDERING.get(event.name, (frozenset(), frozenset()))
    names = [
        f.name
        for f in event.fields
        if f.ty != "Struct"
        and not f.name.startswith(("Reserved", "Unused"))
        and f.name not in dropped
    ]
    return names + sorted(added)


def verify_baselines(events: list[Event], directory: Path) -> int:
    files = sorted(directory.glob("*.baseline.txt"))
    if not files:
        print(f"no *.baseline.txt in {directory}", file=sys.stderr)
        return 2
    misses = checked = 0
    notes = []
    for path in files:
        for line in path.read_text(encoding="utf-8-sig").splitlines():
            parsed = parse_baseline_line(line)
            if parsed is None:
                continue
            provider, name, fields, children = parsed
            if not provider.startswith(BASELINE_PROVIDERS):
                continue
            checked += 1
            named = [e for e in events if e.provider == provider and e.name == name]
            if not named:
                print(f"MISSING NAME   {path.name}: {provider}/{name}")
                misses += 1
                continue
            exact = [e for e in named if rendered_fields(e) == fields]
            same = [e for e in named if sorted(rendered_fields(e)) == sorted(fields)]
            if not exact and not same:
                print(f"FIELD MISMATCH {path.name}: {provider}/{name}")
                print(f"    baseline: {', '.join(fields)}")
                for e in named:
                    print(f"    v{e.version:<8} {', '.join(rendered_fields(e))}")
                misses += 1
                continue
            match = (exact or same)[-1]
            if not exact:
                notes.append(f"{provider}/{name}: same fields as v{match.version}, "
                             "TraceEvent prints them in another order")
            if BASELINE_RENDERING.get(name) or any(
                f.ty != "Struct" and f.name.startswith(("Reserved", "Unused")) for f in match.fields
            ):
                notes.append(f"{provider}/{name}: matched v{match.version} after removing "
                             "TraceEvent rendering differences")
            # Struct arrays: check child elements named after the struct field.
            for f in match.fields:
                if f.ty != "Struct":
                    continue
                kids = [attrs for (tag, attrs) in children if tag.endswith(f.name)]
                if not kids:
                    continue
                want = [g.name for g in f.struct or ()]
                bad = [attrs for attrs in kids if attrs != want]
                if bad:
                    print(f"FIELD MISMATCH {path.name}: {provider}/{name} struct {f.name}")
                    print(f"    baseline: {', '.join(bad[0])}")
                    print(f"    table:    {', '.join(want)}")
                    misses += 1
                else:
                    notes.append(f"{provider}/{name}: struct {f.name} matches "
                                 f"{len(kids)} child element(s)")
    for note in notes:
        print(f"note: {note}")
    print(f"{checked} baseline events checked, {misses} not reproduced")
    return 1 if misses else 0


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def build(manifest: Path) -> list[Event]:
    events = parse_manifest(manifest) + extra_events()
    return sorted(events, key=sort_key)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST,
                    help="ClrEtwAll.man to read (default: ../shared/specs/ClrEtwAll.man "
                         "relative to the repository root)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT,
                    help="Rust file to write (default: "
                         "crates/nettrace/src/manifest/generated.rs in the repository)")
    ap.add_argument("--check", action="store_true",
                    help="do not write; exit 1 if --out differs from what would be generated")
    ap.add_argument("--verify-baselines", type=Path, metavar="DIR",
                    help="check names and fields against TraceEvent *.baseline.txt files in DIR")
    args = ap.parse_args(argv)

    try:
        events = build(args.manifest)
        text = render(events)
    except (ManifestError, ET.ParseError, OSError) as err:
        print(f"gen_manifest: {err}", file=sys.stderr)
        return 2

    status = 0
    if args.verify_baselines is not None:
        status = verify_baselines(events, args.verify_baselines)
        if not args.check:
            return status

    if args.check:
        try:
            current = args.out.read_text(encoding="utf-8")
        except FileNotFoundError:
            current = ""
        if current != text:
            diff = difflib.unified_diff(
                current.splitlines(keepends=True), text.splitlines(keepends=True),
                fromfile=str(args.out), tofile="generated", n=1)
            sys.stdout.writelines(list(diff)[:40])
            print(f"gen_manifest: {args.out} is out of date; run python3 tools/gen_manifest.py",
                  file=sys.stderr)
            return 1
        return status

    args.out.parent.mkdir(parents=True, exist_ok=True)
    if not args.out.exists() or args.out.read_text(encoding="utf-8") != text:
        args.out.write_text(text, encoding="utf-8", newline="\n")
    print(f"wrote {args.out} ({len(events)} events)")
    return status


if __name__ == "__main__":
    sys.exit(main())
