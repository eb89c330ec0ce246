/**
 * Idempotency keys across restarts and time (docs/storage.md, "Idempotency keys"): a key is kept
 * with the events it answered, so it replays after a SIGTERM restart and after kill -9 right
 * after its answer; a key whose events never reached their file is dropped at start-up; keys
 * are forgotten after 24 hours, and the oldest first past the bound on their number.
 *
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { parseEvents } from "../../core/commands.ts";
import {
  freePort,
  openService,
  readLines,
  readSiteLines,
  siteFiles,
  T0,
  tempDir,
} from "../_shared/util.ts";
import { spawnCliServer } from "../_shared/fault_util.ts";

const DAY_MS = 24 * 60 * 60 * 1000;

async function postKeyed(
  url: string,
  key: string,
  body: string,
): Promise<{ status: number; replayed: string | null; body: string }> {
  const res = await fetch(`${url}/event`, {
    method: "POST",
    headers: { "content-type": "application/json", "idempotency-key": key },
    body,
  });
  return {
    status: res.status,
    replayed: res.headers.get("idempotent-replayed"),
    body: await res.text(),
  };
}

for (const signal of ["SIGTERM", "SIGKILL"] as const) {
  const when = signal === "SIGTERM" ? "a SIGTERM restart" : "kill -9 right after its answer";
  Deno.test(`the service answers an Idempotency-Key again after ${when}, storing nothing`, async () => {
    await using site = await tempDir();
    const port = freePort();
    const body = '{"type":"weather","data":{"wind_mps":3.2}}';
    let first;
    {
      await using server = await spawnCliServer({ siteDir: site.path, port });
      first = await postKeyed(server.url, "across-restart", body);
      assert.equal(first.status, 200, first.body);
      const status = await server.kill(signal);
      if (signal === "SIGKILL") assert.equal(status.signal, "SIGKILL");
    }
    await using server = await spawnCliServer({ siteDir: site.path, port });
    const again = await postKeyed(server.url, "across-restart", body);
    assert.deepEqual(again, { status: 200, replayed: "true", body: first.body }, server.output());
    const other = await postKeyed(server.url, "across-restart", '{"type":"weather","data":{}}');
    assert.equal(other.status, 422, other.body);
    assert.deepEqual(await readSiteLines(site.path), [first.body]);
  });
}

Deno.test("TelemetryService.open() drops a key whose events never reached their file, so a retry of it is stored", async () => {
  await using site = await tempDir();
  const parse = () => parseEvents([{ type: "weather", data: { t: 1 } }], false);
  {
    await using service = await openService(site.path);
    const first = await service.submitOnce({ key: "torn", hash: "h1" }, parse);
    assert.equal(first.replayed, false);
  }
  // What a crash between the group's two writes leaves: the key line, but not the event line.
  const [night] = await siteFiles(site.path);
  await Deno.writeTextFile(join(site.path, night!), "");
  const warnings: string[] = [];
  await using service = await openService(site.path, { onWarning: (m) => warnings.push(m) });
  assert.ok(warnings.some((w) => /Dropped 1 idempotency key line/.test(w)), warnings.join("\n"));
  const retry = await service.submitOnce({ key: "torn", hash: "h1" }, parse);
  assert.equal(retry.replayed, false, "stored, not answered from a key whose events are gone");
  assert.equal((await readSiteLines(site.path)).length, 1);
});

Deno.test("TelemetryService.submitOnce() answers a key again for 24 hours and stores its request again after", async () => {
  await using site = await tempDir();
  const now = { ms: T0 };
  await using service = await openService(site.path, {}, now);
  const parse = () => parseEvents([{ type: "weather", data: { t: 1 } }], false);
  const first = await service.submitOnce({ key: "day", hash: "h" }, parse);
  now.ms += DAY_MS - 1;
  assert.deepEqual(await service.submitOnce({ key: "day", hash: "h" }, parse), {
    lines: first.lines,
    summary: { accepted: 1, first_seq: 1, last_seq: 1 },
    replayed: true,
  });
  now.ms += 2;
  const later = await service.submitOnce({ key: "day", hash: "h" }, parse);
  assert.equal(later.replayed, false);
  assert.equal((await readSiteLines(site.path)).length, 2);
});

Deno.test("TelemetryService.submitOnce() forgets the oldest keys past maxIdempotencyKeys and warns once", async () => {
  await using site = await tempDir();
  const warnings: string[] = [];
  await using service = await openService(site.path, {
    maxIdempotencyKeys: 2,
    onWarning: (m) => warnings.push(m),
  });
  const parse = () => parseEvents([{ type: "weather", data: { t: 1 } }], false);
  for (const key of ["k1", "k2", "k3", "k4"]) await service.submitOnce({ key, hash: "h" }, parse);
  assert.equal((await service.submitOnce({ key: "k4", hash: "h" }, parse)).replayed, true);
  assert.equal((await service.submitOnce({ key: "k3", hash: "h" }, parse)).replayed, true);
  assert.equal((await service.submitOnce({ key: "k1", hash: "h" }, parse)).replayed, false);
  const forgot = warnings.filter((w) => w.includes("Idempotency-Key(s) younger than 24 hours"));
  assert.equal(forgot.length, 1, warnings.join("\n"));
  assert.match(forgot[0]!, /more than 2 keys were answered/);
});

Deno.test("TelemetryService keeps two generations of its key journal, beginning one a day", async () => {
  await using site = await tempDir();
  const now = { ms: T0 };
  await using service = await openService(site.path, {}, now);
  const parse = () => parseEvents([{ type: "weather", data: { t: 1 } }], false);
  const journals = async () =>
    (await Array.fromAsync(Deno.readDir(site.path))).map((e) => e.name).filter((n) =>
      n.startsWith(".idempotency")
    )
      .sort();
  await service.submitOnce({ key: "day-1", hash: "h" }, parse);
  now.ms += DAY_MS;
  await service.submitOnce({ key: "day-2", hash: "h" }, parse);
  assert.deepEqual(await journals(), [".idempotency-1.ndjson", ".idempotency-2.ndjson"]);
  now.ms += DAY_MS / 2;
  await service.submitOnce({ key: "day-2.5", hash: "h" }, parse);
  now.ms += DAY_MS / 2;
  await service.submitOnce({ key: "day-3", hash: "h" }, parse);
  assert.deepEqual(await journals(), [".idempotency-2.ndjson", ".idempotency-3.ndjson"]);
  const lines = await readLines(join(site.path, ".idempotency-3.ndjson"));
  assert.deepEqual(lines.map((l) => JSON.parse(l).key), ["day-3"]);
  assert.equal((await service.submitOnce({ key: "day-2.5", hash: "h" }, parse)).replayed, true);
});

Deno.test("TelemetryService.open() keeps a key answered during a run, whose events went to the run's file", async () => {
  await using site = await tempDir();
  const parse = () =>
    parseEvents([{ type: "focuser", data: { position: 1 } }, { type: "weather", data: {} }], true);
  let first;
  {
    await using service = await openService(site.path);
    await service.startRun({ runId: "night-1" });
    first = await service.submitOnce({ key: "in-run", hash: "h" }, parse);
  }
  await using service = await openService(site.path);
  assert.deepEqual(await service.submitOnce({ key: "in-run", hash: "h" }, parse), {
    lines: first.lines,
    summary: { accepted: 2, first_seq: 1, last_seq: 2 },
    replayed: true,
  });
  assert.equal((await readLines(join(site.path, "night-1", "telemetry.ndjson"))).length, 2);
});
