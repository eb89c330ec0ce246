/**
 * What the running service tells about access and safety (docs/operations.md, "Logs";
 * docs/http-api.md, "Access"; docs/safety.md): `cli.ts telemetry run` as a real child process,
 * its answers and its log lines.
 *
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { type ChildServer, spawnCliServer } from "../_shared/fault_util.ts";
import { freePort, readSiteLines, tempDir } from "../_shared/util.ts";
import { waitUntil } from "../_shared/fleet_util.ts";
import { permissionFlags } from "../../server.ts";

const TOKEN = "s3cret-token";

/** The lines the service printed that match `pattern`, once there are `count` of them. */
async function logLines(server: ChildServer, pattern: RegExp, count: number): Promise<string[]> {
  const matching = () => server.output().split("\n").filter((line) => pattern.test(line));
  await waitUntil(() => matching().length >= count, 15_000, `${count} lines ${pattern}`);
  return matching();
}

/** GETs `/current` with these headers; returns the status and the problem's `detail`. */
async function current(
  server: ChildServer,
  headers: Record<string, string>,
): Promise<{ status: number; detail: string; text: string }> {
  const res = await fetch(`${server.url}/current`, { headers });
  const text = await res.text();
  return { status: res.status, detail: JSON.parse(text).detail, text };
}

Deno.test("obs-utils telemetry run answers a request without a token 401 saying none was given, and logs it so", async () => {
  await using site = await tempDir();
  await using server = await spawnCliServer({
    siteDir: site.path,
    port: freePort(),
    args: ["--token", TOKEN],
  });
  const answer = await current(server, {});
  assert.equal(answer.status, 401);
  const detail =
    "This server requires a token, and none was given; send it as 'Authorization: Bearer <token>'.";
  assert.equal(answer.detail, detail);
  const [line] = await logLines(server, / warn rejected GET \/current 401 /, 1);
  assert.match(line!, new RegExp(`from 127\\.0\\.0\\.1: ${RegExp.escape(detail)}$`));
});

Deno.test("obs-utils telemetry run answers a wrong token 401 saying the token given is wrong, and neither the answer nor the log holds it", async () => {
  await using site = await tempDir();
  await using server = await spawnCliServer({
    siteDir: site.path,
    port: freePort(),
    args: ["--token", TOKEN],
  });
  const guess = "my-wrong-guess";
  const answer = await current(server, { authorization: `Bearer ${guess}` });
  assert.equal(answer.status, 401);
  const detail =
    "The token given is not this server's; send the token the service was started with (its --token or OBS_TELEMETRY_TOKEN) as 'Authorization: Bearer <token>'.";
  assert.equal(answer.detail, detail);
  const [line] = await logLines(server, / warn rejected GET \/current 401 /, 1);
  assert.match(line!, new RegExp(`from 127\\.0\\.0\\.1: ${RegExp.escape(detail)}$`));
  assert.ok(!answer.text.includes(guess) && !server.output().includes(guess), server.output());
});

/** A types file with one critical type, `weather`, in alarm while it rains. */
async function typesFile(dir: string, staleAfterS: number): Promise<string> {
  const path = join(dir, `types-${staleAfterS}.json`);
  await Deno.writeTextFile(
    path,
    JSON.stringify({
      weather: { critical: true, stale_after_s: staleAfterS, fields: { rain: { alarm_if: true } } },
    }),
  );
  return path;
}

/** Starts the service on `site` with `types`, under the permissions those flags need. */
function serveWithTypes(site: string, types: string, port = freePort()): Promise<ChildServer> {
  return spawnCliServer({
    siteDir: site,
    port,
    args: ["--types", types],
    flags: permissionFlags({ siteDir: site, host: "127.0.0.1", port, readFiles: [types] }),
  });
}

/** Posts one `weather` event. */
async function weather(server: ChildServer, data: unknown, ts?: string): Promise<void> {
  const res = await fetch(`${server.url}/event`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ type: "weather", data, ...(ts ? { ts } : {}) }),
  });
  assert.equal(res.status, 200, await res.text());
}

Deno.test("obs-utils telemetry run logs each change of the safety verdict: warn with the reasons when unsafe, info when safe", async () => {
  await using dir = await tempDir();
  const site = join(dir.path, "site");
  await using server = await serveWithTypes(site, await typesFile(dir.path, 3600));
  const verdict = / (info|warn) safety verdict: /;
  await weather(server, { rain: false });
  await logLines(server, verdict, 1);
  await weather(server, { rain: true });
  await logLines(server, verdict, 2);
  await weather(server, { rain: false });
  const lines = (await logLines(server, verdict, 3)).map((line) => line.replace(/^\S+Z /, ""));
  assert.deepEqual(lines, [
    "info safety verdict: safe (every critical type is fine)",
    "warn safety verdict: UNSAFE: weather: rain is true (alarm if true)",
    "info safety verdict: safe (every critical type is fine)",
  ]);
});

/**
 * A site stopped safe with `weather` measured a minute ago (fresh for the first start's hour),
 * started again with 30 s for it: a change of the verdict found at start-up.
 */
async function restartedStale(dir: string): Promise<{ site: string; server: ChildServer }> {
  const site = join(dir, "site");
  const port = freePort();
  const first = await serveWithTypes(site, await typesFile(dir, 3600), port);
  try {
    await weather(first, { rain: false }, new Date(Date.now() - 60_000).toISOString());
    await logLines(first, / info safety verdict: safe /, 1);
  } finally {
    assert.equal((await first.kill("SIGTERM")).code, 0, first.output());
  }
  return { site, server: await serveWithTypes(site, await typesFile(dir, 30), port) };
}

Deno.test("obs-utils telemetry run logs the verdict's change found at start-up after its ready line", async () => {
  await using dir = await tempDir();
  await using second = (await restartedStale(dir.path)).server;
  const [line] = await logLines(second, / safety verdict: /, 1);
  assert.match(line!, /Z warn safety verdict: UNSAFE: weather: stale/);
  const printed = second.output().split("\n");
  assert.ok(
    printed.findIndex((l) => l.includes("listening on")) < printed.indexOf(line!),
    second.output(),
  );
});

Deno.test("obs-utils telemetry run records the verdict's change found at start-up as a telemetry.safety event, with no warning", async () => {
  await using dir = await tempDir();
  const { site, server } = await restartedStale(dir.path);
  await logLines(server, / safety verdict: UNSAFE/, 1);
  assert.equal((await server.kill("SIGTERM")).code, 0, server.output());
  assert.doesNotMatch(server.output(), /Could not record/, server.output());
  const recorded = (await readSiteLines(site))
    .map((line) => JSON.parse(line))
    .filter((event) => event.type === "telemetry.safety")
    .map((event) => event.data.safe);
  assert.deepEqual(recorded, [true, false]);
});
