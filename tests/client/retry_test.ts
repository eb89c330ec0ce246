/**
 * The client's safe retries (docs/client.md, "Retries"): every post carries an `Idempotency-Key`,
 * the same on each try, so a post whose answer was lost on the way back is sent again and
 * answered from the key, stored once. The network that loses the answer is a real proxy on
 * loopback in front of a real service.
 *
 * @module
 */

import assert from "node:assert/strict";
import { TelemetryClient, TelemetryConnectionError } from "../../client.ts";
import { answerDroppingProxy } from "../_shared/net.ts";
import { readSiteLines, tempDir, testServer } from "../_shared/util.ts";

Deno.test("TelemetryClient.postEvent() sends a post again with its key after the answer was lost, and it is stored once", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  await using proxy = answerDroppingProxy(server.addr.port, 1);
  const client = new TelemetryClient({ baseUrl: proxy.url, timeoutMs: 5000 });
  const event = await client.postEvent("weather", { wind_mps: 2.1 });
  assert.equal(proxy.dropped(), 1, "the first answer was lost");
  assert.equal(proxy.connections(), 2, "and the post sent again");
  assert.deepEqual(await readSiteLines(site.path), [JSON.stringify(event)]);
});

Deno.test("TelemetryClient.postEvents() sends a batch again with its key after the answer was lost, and it is stored once", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  await using proxy = answerDroppingProxy(server.addr.port, 1);
  const client = new TelemetryClient({ baseUrl: proxy.url, timeoutMs: 5000 });
  const events = await client.postEvents([
    { type: "weather", data: { t: 1 } },
    { type: "weather", data: { t: 2 } },
  ]);
  assert.equal(proxy.dropped(), 1);
  assert.deepEqual(await readSiteLines(site.path), events.map((e) => JSON.stringify(e)));
});

Deno.test("TelemetryClient.postEvent() with the caller's idempotencyKey is answered from the key when the caller retries", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  await using proxy = answerDroppingProxy(server.addr.port, 1);
  const lossy = new TelemetryClient({ baseUrl: proxy.url, timeoutMs: 5000, retries: 0 });
  const idempotencyKey = "caller-key-1";
  await assert.rejects(
    lossy.postEvent("weather", { t: 1 }, { idempotencyKey }),
    TelemetryConnectionError,
  );
  // The caller's own retry, later, through another route to the service.
  const client = new TelemetryClient({ baseUrl: server.url });
  const event = await client.postEvent("weather", { t: 1 }, { idempotencyKey });
  assert.deepEqual(await readSiteLines(site.path), [JSON.stringify(event)]);
});

Deno.test("TelemetryClient refuses a bad idempotencyKey or retries with an error naming it, before any request", async () => {
  let calls = 0;
  const client = new TelemetryClient({
    baseUrl: "http://127.0.0.1:9",
    fetch: () => {
      calls++;
      return Promise.resolve(new Response("{}"));
    },
  });
  for (const idempotencyKey of ["", "x".repeat(201), "caf\u00e9", 7 as unknown as string]) {
    await assert.rejects(
      client.postEvent("weather", {}, { idempotencyKey }),
      (err: Error) =>
        err instanceof TypeError && /"idempotencyKey" must be 1 to 200/.test(err.message),
    );
  }
  await assert.rejects(
    client.postEvents([], { retries: 11 }),
    (err: Error) =>
      err instanceof RangeError && /"retries" must be a whole number/.test(err.message),
  );
  assert.throws(() => new TelemetryClient({ retries: -1 }), RangeError);
  assert.equal(calls, 0);
});
