/**
 * The npm package of the client (docs/operations.md) and the README's client examples from a checkout:
 * `scripts/build_npm.ts` (what `deno task build:npm` runs) builds it, `npm install` puts it into a
 * fresh Node project in a temp dir, the README's `app.js` runs there against a real server, and
 * `tsc --noEmit` type-checks a `.ts` file using it (and rejects one that misuses it). The README's
 * Deno `example.ts` runs under exactly the permissions the README prints.
 * @module
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { tempDir, testServer } from "../_shared/util.ts";

const decoder = new TextDecoder();
const root = new URL("../..", import.meta.url).pathname;
const README = await Deno.readTextFile(join(root, "docs/client.md"));

/** The README code block whose first line is `// <name>`. */
function readmeBlock(name: string): string {
  const block = [...README.matchAll(/```(?:ts|js)[^\n]*\n([\s\S]*?)```/g)]
    .map((m) => m[1]!).find((code) => code.startsWith(`// ${name}\n`));
  assert.ok(block, `README.md has no code block starting with // ${name}`);
  return block;
}

function nodeMissing(): string | undefined {
  try {
    const node = new Deno.Command("node", { args: ["--version"], stdout: "piped", stderr: "null" })
      .outputSync();
    const version = decoder.decode(node.stdout).trim();
    if (!node.success || !(Number(/^v(\d+)\./.exec(version)?.[1]) >= 20)) {
      return `node ${version || "(unknown)"} is older than v20`;
    }
    const npm = new Deno.Command("npm", { args: ["--version"], stdout: "null", stderr: "null" })
      .outputSync();
    return npm.success ? undefined : "npm --version failed";
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return "node or npm is not installed (not on PATH)";
    throw err;
  }
}

async function run(
  cmd: string,
  args: string[],
  options: { cwd?: string; env?: Record<string, string> } = {},
) {
  const out = await new Deno.Command(cmd, {
    args,
    stdout: "piped",
    stderr: "piped",
    ...options,
  }).output();
  return { code: out.code, stdout: decoder.decode(out.stdout), stderr: decoder.decode(out.stderr) };
}

const skip = nodeMissing();
if (skip) {
  // deno-lint-ignore no-console
  console.log(`npm_package_test.ts: skipping the Node package: ${skip}`);
}

Deno.test({
  name:
    "the npm build installs into a fresh Node project, where the README's app.js runs against a real server and tsc type-checks its use",
  ignore: skip !== undefined,
  async fn() {
    await using build = await tempDir("obs-telemetry-npm-");
    await using project = await tempDir("obs-telemetry-node-project-");
    await using site = await tempDir();
    const pkgDir = join(build.path, "npm");
    const built = await run(Deno.execPath(), [
      "run",
      "--allow-read",
      `--allow-write=${build.path}`,
      "--allow-env",
      "--allow-sys",
      join(root, "scripts/build_npm.ts"),
      pkgDir,
    ]);
    assert.equal(built.code, 0, built.stderr);
    assert.match(
      built.stdout,
      /^build:npm: wrote .*: \d+ files \(\d+ modules\) for @obs-utils\/telemetry@/m,
    );
    const pkg = JSON.parse(await Deno.readTextFile(join(pkgDir, "package.json")));
    assert.equal(pkg.type, "module");
    assert.deepEqual(Object.keys(pkg.exports).toSorted(), [".", "./client", "./event"]);
    for (const target of Object.values(pkg.exports) as { types: string; import: string }[]) {
      await Deno.stat(join(pkgDir, target.types));
      await Deno.stat(join(pkgDir, target.import));
    }
    // Nothing Deno-only or TypeScript-only reached the JavaScript.
    for await (const entry of Deno.readDir(pkgDir)) {
      if (!entry.name.endsWith(".js")) continue;
      const js = await Deno.readTextFile(join(pkgDir, entry.name));
      assert.doesNotMatch(
        js,
        /^(?:import|export)\b.*from "(?:[^"]+\.ts|(?:node|npm|jsr):[^"]*)"/m,
        entry.name,
      );
    }

    await Deno.writeTextFile(
      join(project.path, "package.json"),
      JSON.stringify({ name: "observatory-app", private: true, type: "module" }),
    );
    const npmFlags = ["--no-audit", "--no-fund", "--loglevel=error"];
    const installed = await run("npm", ["install", ...npmFlags, "--install-links", pkgDir], {
      cwd: project.path,
    });
    if (installed.code !== 0) {
      // deno-lint-ignore no-console
      console.log(`npm_package_test.ts: skipping: npm cannot install here: ${installed.stderr}`);
      return;
    }

    await using server = await testServer({ siteDir: site.path });
    await Deno.writeTextFile(join(project.path, "app.js"), readmeBlock("app.js"));
    const env = { OBS_TELEMETRY_HOST: "127.0.0.1", OBS_TELEMETRY_PORT: String(server.addr.port) };
    const app = await run("node", ["app.js"], { cwd: project.path, env });
    assert.equal(app.code, 0, app.stderr);
    assert.equal(app.stdout, "true 1 weather\n[ 'weather' ]\n");
    // The same script against nothing: the error class it imports tells the failure apart.
    const closed = await run("node", ["app.js"], {
      cwd: project.path,
      env: { ...env, OBS_TELEMETRY_PORT: "1" },
    });
    assert.equal(closed.code, 0, closed.stderr);
    assert.equal(closed.stderr, "service is not running\n");

    // TypeScript: a correct use checks, a misuse is reported at its line.
    const typescript = await run("npm", [
      "install",
      ...npmFlags,
      "--prefer-offline",
      "--no-save",
      "typescript@5.9.3",
    ], {
      cwd: project.path,
    });
    if (typescript.code !== 0) {
      // deno-lint-ignore no-console
      console.log(
        `npm_package_test.ts: skipping tsc: npm cannot install typescript: ${typescript.stderr}`,
      );
      return;
    }
    await Deno.writeTextFile(
      join(project.path, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          module: "nodenext",
          moduleResolution: "nodenext",
          target: "es2022",
          lib: ["es2023", "dom"],
          strict: true,
          exactOptionalPropertyTypes: true,
          noEmit: true,
          skipLibCheck: false,
        },
        files: ["check.ts"],
      }),
    );
    const good =
      `import { TelemetryClient, TelemetryHttpError, TelemetryEvent } from "@obs-utils/telemetry/client";
import type { ClientOptions, JsonObject, RunRecord } from "@obs-utils/telemetry";
import { TelemetryEvent as SameEvent } from "@obs-utils/telemetry/event";

const options: ClientOptions = { baseUrl: "http://127.0.0.1:6562", timeoutMs: 2000 };
const client = new TelemetryClient(options);
export async function main(): Promise<number> {
  const event: TelemetryEvent = await client.postEvent("weather", { wind_mps: 2.1 }, { storePermanently: false });
  const data: JsonObject = event.data;
  const run: RunRecord | null = await client.getRun();
  const same: boolean = event instanceof SameEvent;
  try {
    await client.currentEvent("nothing");
  } catch (err) {
    if (err instanceof TelemetryHttpError) return err.status;
  }
  return Object.keys(data).length + (run ? 1 : 0) + (same ? 1 : 0) + event.seq;
}
`;
    await Deno.writeTextFile(join(project.path, "check.ts"), good);
    const tsc = join(project.path, "node_modules/typescript/bin/tsc");
    const ok = await run("node", [tsc, "-p", "."], { cwd: project.path });
    assert.equal(ok.code, 0, ok.stdout + ok.stderr);
    await Deno.writeTextFile(
      join(project.path, "check.ts"),
      good.replace(
        'client.postEvent("weather", { wind_mps: 2.1 }',
        'client.postEvent(42, "not an object"',
      ),
    );
    const bad = await run("node", [tsc, "-p", "."], { cwd: project.path });
    assert.notEqual(bad.code, 0);
    assert.match(bad.stdout, /check\.ts\(8,\d+\): error TS2345/);
  },
});

Deno.test("the README's Deno example.ts runs from a checkout under the permissions the README prints, and warns once without --allow-env", async () => {
  await using dir = await tempDir();
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const code = readmeBlock("example.ts");
  // The one change: the example sits in the checkout; here it sits in a temp dir.
  const file = join(dir.path, "example.ts");
  await Deno.writeTextFile(
    file,
    code.replace('"./client.ts"', JSON.stringify(join(root, "client.ts"))),
  );
  const printed = /deno run (--allow-net=\S+) (--allow-env=\S+) example\.ts/.exec(README);
  assert.ok(printed, "README prints the deno run line of example.ts");
  const port = String(server.addr.port);
  const env = { NO_COLOR: "1", OBS_TELEMETRY_HOST: "127.0.0.1", OBS_TELEMETRY_PORT: port };
  const allowNet = printed[1]!.replace("localhost:6562", `127.0.0.1:${port}`);
  const ran = await run(Deno.execPath(), ["run", "--no-prompt", allowNet, printed[2]!, file], {
    env,
  });
  assert.equal(ran.code, 0, ran.stderr);
  assert.equal(ran.stdout, '1 weather [ "weather" ]\n');
  assert.equal(ran.stderr, "");

  // Without --allow-env the variables cannot be read: one warning, then the default address.
  // Without --allow-net too, its request to localhost:6562 is refused in the process: a service
  // there on this machine is someone else's (another copy of the suite), not this test's.
  const blind = await run(Deno.execPath(), ["run", "--no-prompt", file], { env });
  const warnings = blind.stderr.split("\n").filter((l) => l.includes("Deno may not read"));
  assert.equal(warnings.length, 1, blind.stderr);
  assert.match(
    warnings[0]!,
    /OBS_TELEMETRY_HOST; if it is set, it is ignored .* --allow-env=OBS_TELEMETRY_HOST,OBS_TELEMETRY_PORT,OBS_TELEMETRY_TOKEN/,
  );
});
