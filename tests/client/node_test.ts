/**
 * Node proof for the runtime-neutral client (docs/architecture.md, docs/client.md): bundle `client.ts` for the browser
 * platform, then drive it from Node >= 20 against a real server started here.
 * @module
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { readLines, readSiteLines, tempDir, testServer } from "../_shared/util.ts";

/** Why the Node test cannot run here, or `undefined` when it can. */
function nodeUnavailable(): string | undefined {
  if (Deno.permissions.querySync({ name: "run" }).state !== "granted") {
    return "no --allow-run, so node cannot be started";
  }
  try {
    const out = new Deno.Command("node", { args: ["--version"], stdout: "piped", stderr: "null" })
      .outputSync();
    const version = new TextDecoder().decode(out.stdout).trim();
    const major = Number(/^v(\d+)\./.exec(version)?.[1]);
    if (!out.success || !(major >= 20)) return `node ${version || "(unknown)"} is older than v20`;
    return undefined;
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return "node is not installed (not on PATH)";
    throw err;
  }
}

const skip = nodeUnavailable();
if (skip !== undefined) {
  // deno-lint-ignore no-console
  console.log(`node_client_test.ts: skipping the Node run: ${skip}`);
}

async function run(cmd: string, args: string[], env: Record<string, string> = {}): Promise<string> {
  const { code, stdout, stderr } = await new Deno.Command(cmd, {
    args,
    env,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const out = new TextDecoder().decode(stdout);
  assert.equal(
    code,
    0,
    `${cmd} ${args.join(" ")} failed:\n${out}\n${new TextDecoder().decode(stderr)}`,
  );
  return out;
}

function closedPort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = listener.addr.port;
  listener.close();
  return port;
}

Deno.test({
  name: "TelemetryClient bundled for the browser platform works on Node against a real server",
  ignore: skip !== undefined,
  async fn() {
    await using build = await tempDir("obs-telemetry-bundle-");
    await using site = await tempDir();
    const bundle = join(build.path, "client.mjs");
    const root = new URL("../..", import.meta.url);
    await run(Deno.execPath(), [
      "bundle",
      "--quiet",
      "--platform=browser",
      "--config",
      new URL("deno.json", root).pathname,
      new URL("client.ts", root).pathname,
      "-o",
      bundle,
    ]);
    await using server = await testServer({ siteDir: site.path });
    const out = await run(
      "node",
      [
        new URL("../_shared/node/client_smoke.mjs", import.meta.url).pathname,
        bundle,
        server.url,
        String(closedPort()),
      ],
      { OBS_TELEMETRY_HOST: "127.0.0.1", OBS_TELEMETRY_PORT: String(server.addr.port) },
    );
    const results = JSON.parse(out.trim().split("\n").at(-1)!);
    assert.match(results.runtime, /^node v\d+/);
    // What Node received is what the server wrote to disk.
    const siteLines = await readSiteLines(site.path);
    assert.equal(siteLines[0], results.posted);
    assert.deepEqual(await readLines(join(site.path, "node-run", "telemetry.ndjson")), [
      results.runEvent,
    ]);
    assert.deepEqual(results.httpError, { name: "TelemetryHttpError", status: 400 });
    assert.equal(results.connectionError.name, "TelemetryConnectionError");
    assert.match(results.connectionError.message, /ECONNREFUSED|refused/i);
    assert.deepEqual(results.followKinds, ["snapshot", "telemetry"]);
  },
});
