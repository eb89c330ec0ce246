/**
 * `deno task build:npm`: writes `dist/npm/`, an npm package of the runtime-neutral client
 * (docs/operations.md): ES module JavaScript, `.d.ts` declarations and a `package.json` with
 * `exports`, so that `npm install <checkout>/dist/npm` gives a Node >= 20 project the same
 * `@obs-utils/telemetry/client` import a Deno user has.
 *
 * It compiles with the TypeScript compiler API of the npm `typescript` package, pinned: one
 * program over the client's modules, JavaScript and declarations emitted together, `.ts`
 * import specifiers rewritten to `.js` (`rewriteRelativeImportExtensions`). A bundler would
 * give one JavaScript file but no declarations; this keeps one `.js` and one `.d.ts` per module,
 * readable and with the JSDoc intact. The build fails on any type error.
 *
 * Usage: deno run --allow-read --allow-write --allow-env --allow-sys scripts/build_npm.ts [OUT_DIR]
 *
 * @module
 */
import ts from "npm:typescript@5.9.3";
import { dirname, join, relative, resolve } from "node:path";
import denoJson from "../deno.json" with { type: "json" };

const root = resolve(dirname(new URL(import.meta.url).pathname), "..");
const outDir = resolve(Deno.args[0] ?? join(root, "dist", "npm"));

/** The entry points of the package, as in `deno.json`'s exports; they must stay runtime-neutral. */
const ENTRIES = { "./client": "client.ts", "./event": "event.ts" } as const;
/** The folders those entry points may import from: the runtime-neutral ones (docs/architecture.md). */
const NEUTRAL_FOLDERS = ["wire", "client"] as const;

function fail(message: string): never {
  // deno-lint-ignore no-console
  console.error(`build:npm: ${message}`);
  Deno.exit(1);
}

await Deno.remove(outDir, { recursive: true }).catch((err) => {
  if (!(err instanceof Deno.errors.NotFound)) throw err;
});

const options: ts.CompilerOptions = {
  target: ts.ScriptTarget.ES2022,
  module: ts.ModuleKind.ESNext,
  moduleResolution: ts.ModuleResolutionKind.Bundler,
  lib: ["lib.es2024.d.ts", "lib.dom.d.ts", "lib.dom.iterable.d.ts"],
  strict: true,
  noUncheckedIndexedAccess: true,
  exactOptionalPropertyTypes: true,
  declaration: true,
  allowImportingTsExtensions: true,
  rewriteRelativeImportExtensions: true,
  resolveJsonModule: false,
  skipLibCheck: true,
  outDir,
  rootDir: root,
  newLine: ts.NewLineKind.LineFeed,
};
const program = ts.createProgram(Object.values(ENTRIES).map((f) => join(root, f)), options);
function check(diagnostics: readonly ts.Diagnostic[]): void {
  if (diagnostics.length === 0) return;
  fail(ts.formatDiagnostics(diagnostics, {
    getCanonicalFileName: (f) => f,
    getCurrentDirectory: () => root,
    getNewLine: () => "\n",
  }));
}
// Nothing is written unless the whole client type-checks.
check(ts.getPreEmitDiagnostics(program));
check(program.emit().diagnostics);
// Only the client's own modules may be in the package: a Deno-only import would break Node.
for (const file of program.getSourceFiles()) {
  if (file.isDeclarationFile) continue;
  const rel = relative(root, file.fileName);
  const folder = rel.includes("/") ? rel.slice(0, rel.indexOf("/")) : undefined;
  const neutral = folder === undefined || (NEUTRAL_FOLDERS as readonly string[]).includes(folder);
  if (rel.startsWith("..") || !neutral || rel.split("/").length > 2 || !rel.endsWith(".ts")) {
    fail(`${rel} is imported by the client but is not in ${NEUTRAL_FOLDERS.join("/ or ")}/`);
  }
  // Deno.* would already fail the type check (no Deno types here); imports are checked by name.
  for (const statement of file.statements) {
    if (!ts.isImportDeclaration(statement) && !ts.isExportDeclaration(statement)) continue;
    const spec = statement.moduleSpecifier;
    if (spec && ts.isStringLiteral(spec) && !/^\.\.?\//.test(spec.text)) {
      fail(`${rel} imports ${spec.text}: the client may import only its own modules`);
    }
  }
}
const exportsMap: Record<string, { types: string; import: string }> = {};
for (const [path, file] of Object.entries(ENTRIES)) {
  const base = `./${file.replace(/\.ts$/, "")}`;
  exportsMap[path] = { types: `${base}.d.ts`, import: `${base}.js` };
}
exportsMap["."] = exportsMap["./client"]!;

const pkg = {
  name: denoJson.name,
  version: denoJson.version,
  description:
    "Client for the observatory telemetry service: post events, runs, the current snapshot and the live stream (fetch-based; Node >= 20, Deno, browsers).",
  license: denoJson.license,
  type: "module",
  engines: { node: ">=20" },
  sideEffects: false,
  exports: Object.fromEntries(
    Object.entries(exportsMap).toSorted(([a], [b]) => a.localeCompare(b)),
  ),
  types: exportsMap["."]!.types,
  files: ["*.js", "*.d.ts", ...NEUTRAL_FOLDERS.map((f) => `${f}/`), "README.md", "LICENSE"],
};
await Deno.writeTextFile(join(outDir, "package.json"), JSON.stringify(pkg, null, 2) + "\n");
await Deno.copyFile(join(root, "LICENSE"), join(outDir, "LICENSE"));
await Deno.writeTextFile(
  join(outDir, "README.md"),
  `# ${denoJson.name} (client, npm build)\n\nBuilt from a checkout with \`deno task build:npm\`; see the checkout's docs/client.md ("From a checkout, in Node").\n\n\`\`\`js\nimport { TelemetryClient } from "${denoJson.name}/client";\nconst client = new TelemetryClient({ baseUrl: "http://localhost:6562" });\nawait client.postEvent("weather", { wind_mps: 2.1 });\n\`\`\`\n`,
);
const files = [...Deno.readDirSync(outDir)].flatMap((e) =>
  e.isDirectory
    ? [...Deno.readDirSync(join(outDir, e.name))].map((f) => `${e.name}/${f.name}`)
    : [e.name]
).toSorted();
// deno-lint-ignore no-console
console.log(
  `build:npm: wrote ${relative(Deno.cwd(), outDir) || "."}: ${files.length} files (${
    files.filter((f) => f.endsWith(".js")).length
  } modules) for ${pkg.name}@${pkg.version}`,
);
