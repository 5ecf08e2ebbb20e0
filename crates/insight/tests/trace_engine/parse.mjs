// Parses a Chrome Trace Event JSON file with the DevTools performance panel's trace engine
// (npm `@paulirish/trace_engine`) and prints, as one JSON object, what the engine rebuilt
// from it, per thread. The converter tests (crates/insight/tests/chrome.rs) compare that
// with what they know the trace holds: the engine is the independent reader.
//
//   node parse.mjs TRACE_ENGINE_DIR FILE.json
//
// TRACE_ENGINE_DIR is the package's directory (node_modules/@paulirish/trace_engine).
// Output:
//   { "generic": bool,            // the engine took the trace for a non-browser one
//     "events": n,                // events handed to the engine
//     "threads": [ { "pid", "tid", "name",
//         "slices": n,            // complete events (X, and B/E pairs) in the thread's tree
//         "instants": n,          // instant events in the tree
//         "dropped": n,           // entries the engine left out of the tree: a slice that
//                                 // overlaps another without nesting in it
//         "max_depth": n,
//         "slice_names": { name: count } } ],
//     "error": "..." }            // only when parsing failed
//
// The engine's renderer handler builds a tree per thread from X, B/E and instant events;
// it sorts entries by start and nests each within the slice around it, and ignores an
// entry that starts inside a slice but ends after it. So `dropped` > 0 means a viewer
// would not draw every slice we wrote where we meant it.

import fs from 'node:fs';
import path from 'node:path';
import {pathToFileURL} from 'node:url';

const [engineDir, file] = process.argv.slice(2);
if (!engineDir || !file) {
  console.error('usage: node parse.mjs TRACE_ENGINE_DIR FILE.json');
  process.exit(2);
}

// The engine measures layout boxes with DOMRect, which Node lacks; nothing here uses it.
globalThis.DOMRect ??= class DOMRect {
  constructor(x = 0, y = 0, width = 0, height = 0) {
    Object.assign(this, {x, y, width, height, top: y, left: x, right: x + width, bottom: y + height});
  }
  static fromRect(r = {}) {
    return new DOMRect(r.x, r.y, r.width, r.height);
  }
};

const Trace = await import(pathToFileURL(path.join(engineDir, 'models/trace/trace.js')).href);

const text = fs.readFileSync(file, 'utf8');
const json = JSON.parse(text);
const traceEvents = Array.isArray(json) ? json : json.traceEvents;

const report = {generic: null, events: traceEvents.length, threads: []};
try {
  const model = Trace.TraceModel.Model.createWithAllHandlers();
  await model.parse(traceEvents);
  const parsed = model.parsedTrace().data;
  report.generic = parsed.Meta.traceIsGeneric;
  for (const [pid, proc] of parsed.Renderer.processes) {
    for (const [tid, thread] of proc.threads) {
      const inTree = new Set();
      let maxDepth = 0;
      const visit = (node) => {
        inTree.add(node.entry);
        maxDepth = Math.max(maxDepth, node.depth + 1);
        for (const child of node.children) visit(child);
      };
      for (const root of thread.tree?.roots ?? []) visit(root);
      let slices = 0;
      let instants = 0;
      const sliceNames = {};
      for (const entry of inTree) {
        if (Trace.Types.Events.isInstant(entry)) {
          instants++;
        } else if (Trace.Types.Events.isComplete(entry) || Trace.Types.Events.isBegin(entry)) {
          slices++;
          sliceNames[entry.name] = (sliceNames[entry.name] ?? 0) + 1;
        }
      }
      report.threads.push({
        pid,
        tid,
        name: thread.name ?? null,
        slices,
        instants,
        dropped: thread.entries.length - inTree.size,
        max_depth: maxDepth,
        slice_names: sliceNames,
      });
    }
  }
  report.threads.sort((a, b) => a.pid - b.pid || a.tid - b.tid);
} catch (e) {
  report.error = String(e?.stack ?? e);
}
process.stdout.write(JSON.stringify(report) + '\n');
