/**
 * The layout of docs/architecture.md, checked: which folder may import which, no import cycle,
 * only the published entry points at the root, every docs/ page the code cites exists, and each
 * `bench:<name>` task runs `bench/<name>.ts`.
 * The import graph is read from the source text (static `import`/`export ... from`), so a rule
 * broken anywhere in the tree fails here with the file and the import that breaks it.
 *
 * @module
 */

import assert from "node:assert/strict";
import { dirname, join, normalize, relative } from "node:path";

const ROOT = normalize(join(import.meta.dirname!, ".."));

/** The folders of the package, bottom layer first (docs/architecture.md, "The folders"). */
const FOLDERS = [
  "wire",
  "process",
  "client",
  "store",
  "core",
  "http",
  "alpaca",
  "dashboard",
  "notify",
  "server",
  "cli",
  "fleet",
  "migrate",
  "collect",
  "publish",
] as const;
type Folder = (typeof FOLDERS)[number] | "(root)";

/** The published entry points: the root holds these and nothing else. */
const ENTRY_POINTS = [
  "cli.ts",
  "client.ts",
  "collect.ts",
  "event.ts",
  "forward.ts",
  "history.ts",
  "migrate.ts",
  "mod.ts",
  "publish.ts",
  "server.ts",
];

/** What each folder may import besides itself (docs/architecture.md, "Who may import whom"). */
const MAY_IMPORT: Record<Exclude<Folder, "(root)">, readonly Folder[]> = {
  wire: [],
  process: [],
  client: ["wire"],
  store: ["wire", "process"],
  core: ["wire", "process", "store"],
  http: ["wire", "process", "core", "store"],
  alpaca: ["wire", "process", "core", "store", "http"],
  dashboard: ["wire", "core", "http"],
  notify: ["wire", "process", "core", "store", "http"],
  server: ["wire", "process", "core", "store", "http", "alpaca", "dashboard", "notify"],
  cli: [
    "wire",
    "process",
    "client",
    "core",
    "store",
    "http",
    "alpaca",
    "dashboard",
    "notify",
    "server",
    "fleet",
    "migrate",
    "collect",
    "publish",
    "(root)",
  ],
  fleet: ["wire", "process", "store"],
  migrate: ["wire", "process", "store"],
  collect: ["wire", "process", "client"],
  publish: ["wire", "process", "client"],
};

/** The files of another folder a folder may use beyond its layer, and why. */
const EXCEPTIONS: Record<string, string> = {
  "store -> core/errors.ts":
    "the domain errors (write, storage, unsafe file, site in use) are thrown by the store and mapped by every layer above",
  "migrate -> core/errors.ts":
    "a migration takes the destination's site lock and says who holds it",
  "publish -> collect/inputs/mqtt_socket.ts":
    "the one MQTT connection of the package (MQTT.js on the guarded socket), shared with the collector's mqtt input",
  "publish -> core/freshness.ts":
    "a type's availability on MQTT is judged by the service's own freshness rule, as time passes",
};

async function* sourceFiles(dir: string): AsyncGenerator<string> {
  for await (const entry of Deno.readDir(dir)) {
    const path = join(dir, entry.name);
    if (entry.isDirectory) yield* sourceFiles(path);
    else if (entry.isFile && entry.name.endsWith(".ts")) yield relative(ROOT, path);
  }
}

/** Every package source file (not tests, benchmarks or scripts) and what it imports. */
async function importGraph(): Promise<Map<string, string[]>> {
  const files: string[] = ENTRY_POINTS.slice();
  for (const folder of FOLDERS) {
    for await (const file of sourceFiles(join(ROOT, folder))) files.push(file);
  }
  const graph = new Map<string, string[]>();
  const pattern = /^(?:import|export)\s[^;]*?\sfrom\s+"(\.[^"]+)"|^import\s+"(\.[^"]+)"/gms;
  for (const file of files) {
    const text = (await Deno.readTextFile(join(ROOT, file))).replace(/\/\*[\s\S]*?\*\//g, "");
    const targets = [...text.matchAll(pattern)]
      .map((m) => normalize(join(dirname(file), m[1] ?? m[2]!)))
      .filter((target) => target.endsWith(".ts"));
    graph.set(file, targets);
  }
  return graph;
}

function folderOf(file: string): Folder {
  const i = file.indexOf("/");
  return i < 0 ? "(root)" : file.slice(0, i) as Folder;
}

Deno.test("the root holds only the published entry points, and deno.json exports each of them", async () => {
  const rootFiles: string[] = [];
  for await (const entry of Deno.readDir(ROOT)) {
    if (entry.isFile && entry.name.endsWith(".ts")) rootFiles.push(entry.name);
  }
  assert.deepEqual(rootFiles.toSorted(), ENTRY_POINTS);
  const config = JSON.parse(await Deno.readTextFile(join(ROOT, "deno.json")));
  const exported = Object.values(config.exports as Record<string, string>)
    .map((path) => path.replace(/^\.\//, ""));
  assert.deepEqual(exported.toSorted(), ENTRY_POINTS);
});

Deno.test("each folder imports only the folders below it (docs/architecture.md)", async () => {
  const broken: string[] = [];
  for (const [file, targets] of await importGraph()) {
    const from = folderOf(file);
    if (from === "(root)") continue;
    for (const target of targets) {
      const to = folderOf(target);
      if (to === from || MAY_IMPORT[from].includes(to)) continue;
      if (`${from} -> ${target}` in EXCEPTIONS) continue;
      broken.push(`${file} imports ${target}`);
    }
  }
  assert.deepEqual(broken, []);
});

Deno.test("no two modules import each other, directly or through others", async () => {
  const graph = await importGraph();
  const cycles: string[] = [];
  const state = new Map<string, "open" | "done">();
  const path: string[] = [];
  function visit(file: string): void {
    state.set(file, "open");
    path.push(file);
    for (const target of graph.get(file) ?? []) {
      if (state.get(target) === "open") {
        cycles.push([...path.slice(path.indexOf(target)), target].join(" -> "));
      } else if (!state.has(target)) visit(target);
    }
    path.pop();
    state.set(file, "done");
  }
  for (const file of graph.keys()) if (!state.has(file)) visit(file);
  assert.deepEqual(cycles, []);
});

Deno.test("internal modules never import a root entry point", async () => {
  const broken: string[] = [];
  for (const [file, targets] of await importGraph()) {
    if (folderOf(file) === "(root)") continue;
    for (const target of targets) {
      if (folderOf(target) === "(root)") broken.push(`${file} imports ${target}`);
    }
  }
  assert.deepEqual(broken, []);
});

Deno.test("every docs/ page the code cites exists in the repository", async () => {
  const missing = new Set<string>();
  const files = [...ENTRY_POINTS];
  for (const folder of [...FOLDERS, "tests", "bench", "scripts"]) {
    for await (const file of sourceFiles(join(ROOT, folder))) files.push(file);
  }
  for (const file of files) {
    const text = await Deno.readTextFile(join(ROOT, file));
    for (const [, page] of text.matchAll(/\bdocs\/([a-z0-9_-]+\.(?:md|png))/g)) {
      try {
        await Deno.stat(join(ROOT, "docs", page!));
      } catch (err) {
        if (!(err instanceof Deno.errors.NotFound)) throw err;
        missing.add(`docs/${page} (cited in ${file})`);
      }
    }
  }
  assert.deepEqual([...missing], []);
});

Deno.test("no source cites a document outside the repository", async () => {
  const outside: string[] = [];
  const files = [...ENTRY_POINTS];
  for (const folder of FOLDERS) {
    for await (const file of sourceFiles(join(ROOT, folder))) files.push(file);
  }
  for (const file of files) {
    const text = await Deno.readTextFile(join(ROOT, file));
    if (/\bCONTRACT\b|\bSPEC \d|shared\/spec|DESIGN\.md|STYLE\.md/.test(text)) outside.push(file);
  }
  assert.deepEqual(outside, []);
});

Deno.test("tests are found by folder: each source folder's tests in tests/<folder>/, helpers in tests/_shared/, at most 15 flat", async () => {
  const flat: string[] = [];
  const misplaced: string[] = [];
  const folders = new Set<string>(FOLDERS);
  for await (const entry of Deno.readDir(join(ROOT, "tests"))) {
    if (entry.isFile && entry.name.endsWith("_test.ts")) flat.push(entry.name);
    else if (entry.isFile && entry.name.endsWith(".ts")) misplaced.push(`tests/${entry.name}`);
    else if (entry.isDirectory && !["_shared", "fixtures", "artifacts"].includes(entry.name)) {
      if (!folders.has(entry.name)) misplaced.push(`tests/${entry.name}/ names no source folder`);
    }
  }
  for await (const file of sourceFiles(join(ROOT, "tests", "_shared"))) {
    if (file.endsWith("_test.ts")) misplaced.push(`${file} is a test among the helpers`);
  }
  assert.deepEqual(misplaced, []);
  assert.ok(flat.length <= 15, `${flat.length} test files flat in tests/: ${flat.join(", ")}`);
});

Deno.test("every bench:<name> task runs bench/<name>.ts", async () => {
  const config = JSON.parse(await Deno.readTextFile(join(ROOT, "deno.json")));
  const wrong: string[] = [];
  for (const [task, command] of Object.entries(config.tasks as Record<string, string>)) {
    const name = /^bench:(.+)$/.exec(task)?.[1];
    if (name === undefined) continue;
    const file = `bench/${name.replaceAll("-", "_")}.ts`;
    const runs = [...command.matchAll(/\bbench\/[\w.-]+\.ts\b/g)].map((m) => m[0]);
    if (runs.length !== 1 || runs[0] !== file) wrong.push(`${task} runs ${runs.join(", ")}`);
    else if (!(await Deno.stat(join(ROOT, file)).catch(() => undefined))?.isFile) {
      wrong.push(`${task}: ${file} is missing`);
    }
  }
  assert.deepEqual(wrong, []);
});
