/**
 * The body timeout (docs/operations.md, "Connections"): a request body that does not arrive in
 * full within `--body-timeout` of its head is answered 408 problem+json, on a guarded listener
 * and on a loopback one alike, and behind the guard its connection is closed after the answer.
 * Real servers on 127.0.0.1, real sockets sending a byte at a time.
 */

import assert from "node:assert/strict";
import type { ServerHandle } from "../../server/serve.ts";
import { slowBody, type SlowBodyResult, tempDir, testServer } from "../_shared/util.ts";
import { BodyDeadlines } from "../../http/body.ts";
import { BodyTimeoutError } from "../../http/problems.ts";

/** The timeout these tests set, small so each waits for it at most a few times. */
const TIMEOUT_MS = 400;
/** How long a test waits for what it expects before giving up. */
const LIMIT_MS = 8000;

const SLOW_EVENT = "POST /event HTTP/1.1\r\nHost: localhost\r\n" +
  "Content-Type: application/json\r\nContent-Length: 12000\r\n\r\n{";

function assertTimedOut(result: SlowBodyResult): void {
  assert.equal(result.status, 408, result.text);
  assert.match(result.text, /content-type: application\/problem\+json/);
  assert.match(result.text, /"status":408/);
  assert.match(result.text, /--body-timeout/);
  assert.ok(result.answeredMs !== undefined, result.text);
  // Not before the timeout: the body's bytes kept coming all along.
  assert.ok(result.answeredMs >= TIMEOUT_MS * 0.8, `answered after ${result.answeredMs} ms`);
}

async function server(siteDir: string, guarded: boolean): Promise<ServerHandle> {
  return await testServer({ siteDir, connectionGuard: guarded, bodyTimeoutMs: TIMEOUT_MS });
}

Deno.test("startServer() answers 408 to a body a byte every 100 ms behind the guard, and closes its connection", async () => {
  await using tmp = await tempDir();
  await using srv = await server(tmp.path, true);
  const result = await slowBody(srv.addr.port, SLOW_EVENT, { everyMs: 100, limitMs: LIMIT_MS });
  assertTimedOut(result);
  assert.ok(result.closedMs !== undefined, `still open after ${LIMIT_MS} ms`);
});

Deno.test("startServer() on loopback, without the guard, answers 408 to a body a byte every 100 ms", async () => {
  await using tmp = await tempDir();
  await using srv = await server(tmp.path, false);
  const result = await slowBody(srv.addr.port, SLOW_EVENT, {
    everyMs: 100,
    limitMs: LIMIT_MS,
    untilAnswered: true,
  });
  assertTimedOut(result);
});

Deno.test("startServer() answers 408 to a chunked body that stalls, behind the guard", async () => {
  await using tmp = await tempDir();
  await using srv = await server(tmp.path, true);
  const head = "POST /events HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n" +
    "Transfer-Encoding: chunked\r\n\r\n1\r\n[\r\n";
  // One byte of a chunk size every 200 ms: the chunk never completes.
  const result = await slowBody(srv.addr.port, head, {
    everyMs: 200,
    limitMs: LIMIT_MS,
    byte: "1",
  });
  assertTimedOut(result);
  assert.ok(result.closedMs !== undefined, `still open after ${LIMIT_MS} ms`);
});

Deno.test("BodyDeadlines ends a read at its own deadline, not at that of an earlier read that ended", async () => {
  const deadlines = new BodyDeadlines(200);
  await deadlines.race(Promise.resolve()); // arms the timer for 200 ms from now, and ends
  await new Promise((resolve) => setTimeout(resolve, 120));
  let timer: ReturnType<typeof setTimeout> | undefined;
  const never = new Promise((resolve) => timer = setTimeout(resolve, 5000));
  const started = Date.now();
  await assert.rejects(deadlines.race(never), BodyTimeoutError);
  clearTimeout(timer);
  const waited = Date.now() - started;
  assert.ok(waited >= 190, `ended after ${waited} ms, before its 200 ms`);
  deadlines.close();
});

Deno.test("startServer() gives a slow body its whole --body-timeout after a quick request left the deadline timer armed", async () => {
  await using tmp = await tempDir();
  await using srv = await server(tmp.path, false);
  // A body read in full arms the shared timer for its own deadline and leaves it armed.
  const res = await fetch(`http://127.0.0.1:${srv.addr.port}/event`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ type: "weather", data: { wind_mps: 2.1 } }),
  });
  assert.equal(res.status, 200, await res.text());
  // The slow body starts well before that deadline: the timer firing then must not end it.
  await new Promise((resolve) => setTimeout(resolve, TIMEOUT_MS * 0.6));
  const result = await slowBody(srv.addr.port, SLOW_EVENT, {
    everyMs: 100,
    limitMs: LIMIT_MS,
    untilAnswered: true,
  });
  assertTimedOut(result);
});
