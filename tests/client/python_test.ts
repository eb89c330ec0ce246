/**
 * `--wrap-current` and `?wrap=` (docs/operations.md): the older Python client, played by a Python 3
 * script doing exactly what it does on the wire, against a real server; the project's own client
 * and CLI against the same server; the query parameter's bad values.
 * @module
 */
import assert from "node:assert/strict";
import { TelemetryClient } from "../../client.ts";
import { spawnServer } from "../../server.ts";
import { CLI, readSiteLines, tempDir, testServer } from "../_shared/util.ts";

const decoder = new TextDecoder();
const SCRIPT = new URL("../_shared/python/older_client.py", import.meta.url).pathname;

function pythonMissing(): string | undefined {
  try {
    const out = new Deno.Command("python3", { args: ["--version"], stdout: "null", stderr: "null" })
      .outputSync();
    return out.success ? undefined : "python3 --version failed";
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      return "python3 is not installed (apt-get install python3)";
    }
    throw err;
  }
}
const skip = pythonMissing();
if (skip) {
  // deno-lint-ignore no-console
  console.log(`python_client_test.ts: skipping the Python client: ${skip}`);
}

Deno.test({
  name:
    "with --wrap-current the older Python client reads response.json()['current'] and posts its six fields, and our client and CLI still read the plain map",
  ignore: skip !== undefined,
  async fn() {
    await using site = await tempDir();
    await using server = await spawnServer({
      siteDir: site.path,
      host: "127.0.0.1",
      port: 0,
      timeZone: "UTC",
      wrapCurrent: true,
      output: "null",
    });
    const out = await new Deno.Command("python3", {
      args: [SCRIPT, server.url],
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(out.code, 0, decoder.decode(out.stderr));
    const seen = JSON.parse(decoder.decode(out.stdout));
    // deno-lint-ignore no-console
    console.log(`python_client_test.ts: the Python client used ${seen.library}`);
    assert.deepEqual(seen.current_types, ["mount", "weather"]);
    assert.deepEqual(seen.weather.data, { wind_mps: 3.5, safe: true });
    assert.deepEqual(seen.weather.meta, { source: "pocs" });
    assert.equal(seen.observations, null); // make_current: false
    const [weather, mount, legacy] = seen.posted;
    assert.deepEqual([weather.seq, mount.seq, legacy.seq], [1, 2, 3]);
    assert.equal(legacy.ts, "2026-05-10T11:00:00.000Z");
    // store_permanently: false was not written; the two others were, in order.
    const lines = (await readSiteLines(site.path)).map((l) => JSON.parse(l));
    assert.deepEqual(lines.map((e) => e.type), ["weather", "observations"]);

    // The project's own client and CLI read the same server.
    const client = new TelemetryClient({ baseUrl: server.url });
    const current = await client.current();
    assert.deepEqual(Object.keys(current).toSorted(), ["mount", "weather"]);
    assert.equal(current.weather?.seq, 1);
    const port = new URL(server.url).port;
    const cli = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--allow-net",
        "--allow-env",
        CLI,
        "telemetry",
        "current",
        "--json",
        "--host",
        "127.0.0.1",
        "--port",
        port,
      ],
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(cli.code, 0, decoder.decode(cli.stderr));
    assert.deepEqual(Object.keys(JSON.parse(decoder.decode(cli.stdout))).toSorted(), [
      "mount",
      "weather",
    ]);
    const table = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--allow-net",
        "--allow-env",
        CLI,
        "telemetry",
        "current",
        "--host",
        "127.0.0.1",
        "--port",
        port,
      ],
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(table.code, 0, decoder.decode(table.stderr));
    assert.match(decoder.decode(table.stdout), /^weather\s+site:1\s/m);

    // ?wrap=false gives the plain map in this mode.
    const plain = await (await fetch(`${server.url}/current?wrap=false`)).json();
    assert.deepEqual(Object.keys(plain).toSorted(), ["mount", "weather"]);
  },
});

Deno.test("?wrap=true wraps and ?wrap=false does not, in either mode, for an empty and a large snapshot", async () => {
  for (const wrapCurrent of [false, true]) {
    await using site = await tempDir();
    await using server = await testServer({ siteDir: site.path, wrapCurrent });
    const get = async (query: string) => {
      const res = await fetch(`${server.url}/current${query}`);
      assert.equal(res.status, 200);
      assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
      return await res.json();
    };
    assert.deepEqual(await get(""), wrapCurrent ? { current: {} } : {});
    assert.deepEqual(await get("?wrap=true"), { current: {} });
    assert.deepEqual(await get("?wrap=false"), {});
    // Enough types that the body comes in many chunks.
    const client = new TelemetryClient({ baseUrl: server.url });
    for (let i = 0; i < 300; i++) {
      await client.postEvent(`type_${i}`, { i, text: "x".repeat(200) }, {
        storePermanently: false,
      });
    }
    const plain = await get("?wrap=false");
    assert.equal(Object.keys(plain).length, 300);
    assert.deepEqual(await get("?wrap=true"), { current: plain });
    assert.deepEqual(await get(""), wrapCurrent ? { current: plain } : plain);
    // HEAD of the wrapped body has no body and the same status.
    const head = await fetch(`${server.url}/current?wrap=true`, { method: "HEAD" });
    assert.equal(head.status, 200);
    assert.equal(await head.text(), "");
  }
});

Deno.test("?wrap= other than true or false, or given twice, is a 400 that says what to send", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path, wrapCurrent: true });
  for (const query of ["?wrap=yes", "?wrap=", "?wrap=TRUE", "?wrap=true&wrap=false", "?wrap=1"]) {
    const res = await fetch(`${server.url}/current${query}`);
    assert.equal(res.status, 400, query);
    assert.match(res.headers.get("content-type") ?? "", /^application\/problem\+json/);
    const { detail } = await res.json();
    assert.match(
      detail,
      /^The query parameter wrap must be given once as true or false, not ".*"; use \?wrap=false/,
    );
  }
  // Other parameters are ignored, as before.
  const res = await fetch(`${server.url}/current?type=x`);
  assert.deepEqual(await res.json(), { current: {} });
});
