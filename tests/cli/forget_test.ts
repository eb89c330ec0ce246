/**
 * Tests of forgetting a type (docs/http-api.md): `DELETE /current/{type}`, the client's `forget`,
 * and that a forgotten type stays gone across clean restarts and kill -9 until a new event of it
 * arrives. Real servers on 127.0.0.1, real temp dirs, real child processes for the crashes.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { TelemetryClient, TelemetryHttpError } from "../../client.ts";
import { freePort, getJson, postJson, tempDir, testServer } from "../_shared/util.ts";
import { assertProblem, Rng, seedFromEnv, send, spawnCliServer } from "../_shared/fault_util.ts";

async function current(url: string): Promise<Record<string, { data: unknown }>> {
  const { status, body } = await getJson(`${url}/current`);
  assert.equal(status, 200);
  return body as Record<string, { data: unknown }>;
}

function del(url: string, type: string, headers: Record<string, string> = {}) {
  return send(`${url}/current/${encodeURIComponent(type)}`, { method: "DELETE", headers });
}

Deno.test("DELETE /current/{type} answers 204 and the type leaves /current, /current/{type} and telemetry_value", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 2.1 } });
  await postJson(`${server.url}/event`, { type: "dome", data: { open: 1 } });
  const before = await (await fetch(`${server.url}/metrics`)).text();
  assert.match(before, /telemetry_value\{type="weather",field="wind_mps"\} 2\.1/);
  const answer = await del(server.url, "weather");
  assert.equal(answer.status, 204);
  assert.equal(answer.text, "");
  assert.deepEqual(Object.keys(await current(server.url)), ["dome"]);
  assert.equal((await getJson(`${server.url}/current/weather`)).status, 404);
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  assert.doesNotMatch(metrics, /telemetry_value\{type="weather"/);
  assert.match(metrics, /telemetry_value\{type="dome",field="open"\} 1/);
  // The stream file keeps the event: forgetting is about the snapshot only.
  const files = [...Deno.readDirSync(dir.path)].filter((e) => e.name.startsWith("site_"));
  const text = await Deno.readTextFile(join(dir.path, files[0]!.name));
  assert.match(text, /"type":"weather"/);
});

Deno.test("DELETE /current/{type} of a type the snapshot lacks is a 404 problem that says what to do", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const answer = await del(server.url, "no such/type");
  const body = assertProblem(404, answer.contentType, answer.text, "DELETE absent");
  assert.match(body.detail, /no event of type "no such\/type".*GET \/current lists/);
  // Twice in a row: the second finds nothing.
  await postJson(`${server.url}/event`, { type: "a", data: {} });
  assert.equal((await del(server.url, "a")).status, 204);
  assert.equal((await del(server.url, "a")).status, 404);
});

Deno.test("DELETE /current/{type} needs the token like POST does, and forgets nothing without it", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, token: "s3cret" });
  const auth = { authorization: "Bearer s3cret" };
  await postJson(`${server.url}/event`, { type: "a", data: {} }, auth);
  const refused = await del(server.url, "a");
  assertProblem(401, refused.contentType, refused.text, "DELETE without token");
  assert.equal((await getJson(`${server.url}/current/a`, auth)).status, 200);
  assert.equal((await del(server.url, "a", auth)).status, 204);
});

Deno.test("DELETE /current/{type} with an Origin that is not loopback is refused (403)", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  await postJson(`${server.url}/event`, { type: "a", data: {} });
  const refused = await del(server.url, "a", { origin: "https://evil.example" });
  assertProblem(403, refused.contentType, refused.text, "DELETE cross-origin");
  assert.equal((await getJson(`${server.url}/current/a`)).status, 200);
});

Deno.test("TelemetryClient.forget() answers true when removed and false when the type was absent", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const client = new TelemetryClient({ baseUrl: server.url });
  await client.postEvent("weather", { wind_mps: 1 });
  assert.equal(await client.forget("weather"), true);
  assert.equal(await client.forget("weather"), false);
  assert.equal(await client.getCurrent("weather"), null);
  await assert.rejects(() => client.forget(""), TypeError);
  // clearCurrent stays the documented no-op: it does not forget.
  await client.postEvent("weather", { wind_mps: 2 });
  await client.clearCurrent("weather");
  assert.equal((await client.getCurrent("weather"))?.data.wind_mps, 2);
});

Deno.test("TelemetryClient.forget() reports a 401 as a TelemetryHttpError", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, token: "t" });
  const err = await new TelemetryClient({ baseUrl: server.url }).forget("a").catch((e) => e);
  assert.ok(err instanceof TelemetryHttpError);
  assert.equal(err.status, 401);
});

Deno.test("A forgotten type stays gone across a clean restart until a new event of it arrives", async () => {
  await using dir = await tempDir();
  {
    await using server = await testServer({ siteDir: dir.path });
    await postJson(`${server.url}/event`, { type: "a", data: { v: 1 } });
    await postJson(`${server.url}/event`, { type: "b", data: { v: 1 } });
    assert.equal((await del(server.url, "a")).status, 204);
  }
  {
    await using server = await testServer({ siteDir: dir.path });
    assert.deepEqual(Object.keys(await current(server.url)), ["b"]);
    await postJson(`${server.url}/event`, { type: "a", data: { v: 2 } });
  }
  await using server = await testServer({ siteDir: dir.path });
  assert.deepEqual((await current(server.url)).a?.data, { v: 2 });
});

Deno.test("A failed forget (the checkpoint cannot be written) is a 500 and the type stays", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path, onWarning: () => {} });
  await postJson(`${server.url}/event`, { type: "a", data: {} });
  // The first commit of a night takes a checkpoint of its own; wait for it to land first.
  const saved = join(dir.path, ".snapshot.json");
  const checkpointHasA = async () => "a" in JSON.parse(await Deno.readTextFile(saved)).current;
  for (let i = 0; i < 100 && !await checkpointHasA(); i++) {
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.ok(await checkpointHasA(), "the first commit's checkpoint never landed");

  // A non-empty directory where the checkpoint goes: its rename fails.
  await Deno.remove(saved);
  await Deno.mkdir(join(dir.path, ".snapshot.json", "x"), { recursive: true });
  const answer = await del(server.url, "a");
  assertProblem(500, answer.contentType, answer.text, "DELETE with a broken checkpoint");
  assert.equal((await getJson(`${server.url}/current/a`)).status, 200);
  await Deno.remove(join(dir.path, ".snapshot.json"), { recursive: true });
  assert.equal((await del(server.url, "a")).status, 204);
});

Deno.test("Forgotten types stay gone across kill -9 until a new event of them arrives (seeded)", async () => {
  const seed = seedFromEnv(0x5eed14);
  const rng = new Rng(seed);
  await using dir = await tempDir();
  const types = ["weather", "dome", "focus", "camera", "guider"];
  // What GET /current must hold: type -> the latest data value acknowledged.
  const model = new Map<string, number>();
  let value = 0;
  for (let round = 0; round < 3; round++) {
    const port = freePort();
    await using server = await spawnCliServer({ siteDir: dir.path, port });
    const context = `seed ${seed} round ${round}`;
    assert.deepEqual(
      Object.fromEntries(
        Object.entries(await current(server.url)).map(([t, e]) => [t, (e.data as { v: number }).v]),
      ),
      Object.fromEntries([...model].sort()),
      context,
    );
    for (let step = 0; step < 12; step++) {
      const type = rng.pick(types);
      if (rng.chance(0.35)) {
        const answer = await del(server.url, type);
        assert.equal(answer.status, model.has(type) ? 204 : 404, `${context}: ${answer.text}`);
        model.delete(type);
      } else {
        const { status } = await postJson(`${server.url}/event`, { type, data: { v: ++value } });
        assert.equal(status, 200, context);
        model.set(type, value);
      }
    }
    await server.kill("SIGKILL");
  }
});

Deno.test("DELETE /current/{type} decodes the type like GET does and refuses bad percent-encoding", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const type = "dome/shutter ünï 🔭";
  await postJson(`${server.url}/event`, { type, data: {} });
  const bad = await send(`${server.url}/current/%ZZ`, { method: "DELETE" });
  const body = assertProblem(400, bad.contentType, bad.text, "DELETE %ZZ");
  assert.match(body.detail, /percent-encoding/);
  assert.equal((await del(server.url, type)).status, 204);
  assert.deepEqual(await current(server.url), {});
});

Deno.test("A forget cut by kill -9 before its answer is all or nothing, and an answered one holds (seeded)", async () => {
  const seed = seedFromEnv(0xf0e9);
  const rng = new Rng(seed);
  await using dir = await tempDir();
  const port = freePort();
  let server = await spawnCliServer({ siteDir: dir.path, port });
  try {
    for (let round = 0; round < 6; round++) {
      const context = `seed ${seed} round ${round}`;
      await postJson(`${server.url}/event`, { type: "keep", data: { v: round } });
      await postJson(`${server.url}/event`, { type: "victim", data: { v: round } });
      const answered = del(server.url, "victim").then((r) => r.status, () => 0);
      await new Promise((r) => setTimeout(r, rng.int(0, 8)));
      await server.kill("SIGKILL");
      const status = await answered;
      server = await spawnCliServer({ siteDir: dir.path, port });
      const now = await current(server.url);
      assert.deepEqual(now.keep?.data, { v: round }, context);
      if (status === 204) assert.equal(now.victim, undefined, context);
      else if (now.victim) assert.deepEqual(now.victim.data, { v: round }, context);
    }
  } finally {
    await server.kill("SIGKILL");
  }
});

Deno.test("a client following /stream hears a forget, and one following other types does not", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 2 } });
  const client = new TelemetryClient({ baseUrl: server.url });
  const stop = new AbortController();
  const all: string[] = [];
  const domeOnly: string[] = [];
  const follow = (into: string[], types?: string[]) =>
    (async () => {
      for await (const m of client.follow({ signal: stop.signal, ...(types ? { types } : {}) })) {
        into.push(m.kind === "forget" ? `forget ${m.type}` : m.kind);
        if (m.kind === "snapshot") into.push(`has ${Object.keys(m.current).join(",")}`);
      }
    })();
  const following = [follow(all), follow(domeOnly, ["dome"])];
  while (all.length < 2 || domeOnly.length < 2) await new Promise((r) => setTimeout(r, 10));
  assert.equal((await del(server.url, "weather")).status, 204);
  await postJson(`${server.url}/event`, { type: "dome", data: { open: 1 } });
  while (!all.includes("telemetry") || !domeOnly.includes("telemetry")) {
    await new Promise((r) => setTimeout(r, 10));
  }
  stop.abort();
  await Promise.all(following);
  assert.deepEqual(all, ["snapshot", "has weather", "forget weather", "telemetry"]);
  assert.deepEqual(domeOnly, ["snapshot", "has ", "telemetry"]);
});
