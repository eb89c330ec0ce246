// Node smoke run of the bundled client (docs/architecture.md: client.ts is runtime-neutral).
// Usage: node client_smoke.mjs <bundle.mjs> <baseUrl> <closedPort>
// OBS_TELEMETRY_HOST/PORT in the environment point at the same server as <baseUrl>.
// Checks with node:assert and prints one JSON object of results for the Deno side to verify.
import assert from "node:assert/strict";
import { pathToFileURL } from "node:url";

const [bundle, baseUrl, closedPort] = process.argv.slice(2);
const { TelemetryClient, TelemetryConnectionError, TelemetryHttpError } = await import(
  pathToFileURL(bundle).href
);

const client = new TelemetryClient({ baseUrl });
const results = { runtime: `node ${process.version}` };

// postEvent and the legacy aliases
const event = await client.postEvent("weather", { wind_mps: 2.1 }, { meta: { via: "node" } });
results.posted = JSON.stringify(event);
assert.equal(event._id, String(event.seq));
assert.equal(event["_id"], String(event.seq));
assert.equal(event.date, event.ts);
assert.ok("_id" in event && "date" in event);
assert.equal(event.get("date"), event.ts);
assert.ok(Object.isFrozen(event) && Object.isFrozen(event.data));
assert.throws(() => {
  event.data.wind_mps = 3;
}, TypeError);

// current, getCurrent (hit and null on 404)
const current = await client.current();
assert.equal(JSON.stringify(current.weather), results.posted);
assert.equal(JSON.stringify(await client.getCurrent("weather")), results.posted);
assert.equal(await client.getCurrent("never-posted"), null);

// startRun / stopRun
const run = await client.startRun({ runId: "node-run" });
assert.equal(run.run_id, "node-run");
const inRun = await client.postEvent("status", { dome: "open" });
assert.equal(inRun.meta.run_id, "node-run");
results.runEvent = JSON.stringify(inRun);
const stopped = await client.stopRun();
assert.equal(stopped.events, 1);
assert.equal(typeof stopped.stopped_at, "string");

// TelemetryHttpError on a 400
const bad = await client.postEvent("status", {}, { ts: "yesterday" }).catch((e) => e);
assert.ok(bad instanceof TelemetryHttpError, String(bad));
assert.equal(bad.status, 400);
assert.match(bad.detail, /yesterday/);
results.httpError = { name: bad.name, status: bad.status };

// TelemetryConnectionError on a closed port
const refused = await new TelemetryClient({ host: "127.0.0.1", port: Number(closedPort) })
  .health().catch((e) => e);
assert.ok(refused instanceof TelemetryConnectionError, String(refused));
results.connectionError = { name: refused.name, message: refused.message };

// Defaults from process.env
const fromEnv = new TelemetryClient();
assert.equal(fromEnv.baseUrl, baseUrl);
assert.deepEqual(await fromEnv.health(), { ok: true });

// follow(): snapshot, then one live event, then a clean stop on abort
const controller = new AbortController();
const kinds = [];
for await (const message of client.follow({ signal: controller.signal })) {
  kinds.push(message.kind);
  if (message.kind === "snapshot") await client.postEvent("environment", { humidity: 40 });
  if (message.kind === "telemetry") controller.abort();
}
assert.deepEqual(kinds, ["snapshot", "telemetry"]);
results.followKinds = kinds;

// deno-lint-ignore no-console
console.log(JSON.stringify(results));
