/**
 * Hostile line protocol on the InfluxDB write routes (`http/influx_routes.ts`, docs/http-api.md):
 * a 1 MiB line, 100,000 fields, NUL bytes, a gzip bomb and an endless body are each refused
 * within the body bound, nothing partial is stored, and the service answers normally after.
 * Real servers on loopback (the bomb's in a child process, to read its peak memory), real files.
 *
 * @module
 */

import assert from "node:assert/strict";
import { gzipSync } from "node:zlib";
import { freePort, readSiteLines, slowBody, tempDir, testServer } from "../_shared/util.ts";
import { spawnCliServer } from "../_shared/fault_util.ts";
import { MAX_LINE_FIELDS } from "../../wire/line_protocol.ts";
import { MAX_WRITE_LINES } from "../../http/influx_routes.ts";

const MIB = 1024 * 1024;

/** POSTs line protocol and returns the status and the body's text. */
async function write(
  base: string,
  body: BodyInit,
  headers: Record<string, string> = {},
  path = "/write?db=x",
): Promise<{ status: number; text: string }> {
  const res = await fetch(`${base}${path}`, { method: "POST", headers, body });
  return { status: res.status, text: await res.text() };
}

/** The service still stores a line and answers /health after the hostile request. */
async function assertHealthy(base: string, siteDir: string, storedBefore: number): Promise<void> {
  const health = await fetch(`${base}/health`);
  assert.equal(health.status, 200);
  await health.body?.cancel();
  assert.equal((await write(base, "after ok=t")).status, 204);
  const lines = await readSiteLines(siteDir);
  assert.equal(lines.length, storedBefore + 1);
  assert.equal(JSON.parse(lines.at(-1)!).type, "after");
}

Deno.test("a 1 MiB line is refused 413 by the body bound, declared or streamed, and nothing is stored", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const line = `m f="${"x".repeat(MIB)}"\n`;
  const declared = await write(server.url, line);
  assert.equal(declared.status, 413, declared.text);
  assert.match(JSON.parse(declared.text).error, /^The request body is larger than 1048576 bytes/);
  const streamed = await write(server.url, new Blob([line]).stream(), {});
  assert.equal(streamed.status, 413, streamed.text);
  assert.deepEqual(await readSiteLines(site.path), []);
  await assertHealthy(server.url, site.path, 0);
});

Deno.test("a line of 100,000 fields within the body bound is refused by the field cap, and nothing of it is stored", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const line = `wide ${Array.from({ length: 100_000 }, (_, i) => `f${i}=1`).join(",")}`;
  assert.ok(line.length < MIB, "under the body bound: the cap refuses it, not the bound");
  const answer = await write(server.url, `${line}\nnarrow f=1\n`);
  assert.equal(answer.status, 400);
  assert.match(
    JSON.parse(answer.text).error,
    new RegExp(
      `^partial write: line 1: unable to parse 'wide f0=1,.*': the line has more than ${MAX_LINE_FIELDS} fields \\(1 line stored;`,
    ),
  );
  assert.deepEqual((await readSiteLines(site.path)).map((l) => JSON.parse(l).type), ["narrow"]);
  await assertHealthy(server.url, site.path, 1);
});

Deno.test("lines with NUL bytes are refused whole, the others stored, no NUL stored", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const body = `a f=1\n\0\0\0\nb f="x\0y"\nc\0 f=1\nd,t=\0 f=2\ne f=2\n${"\0".repeat(512 * 1024)}`;
  const answer = await write(server.url, body);
  assert.equal(answer.status, 400);
  const error = JSON.parse(answer.text).error;
  for (const line of [2, 3, 4, 5, 7]) {
    assert.match(error, new RegExp(`line ${line}: unable to parse '.*': the line has a NUL byte`));
  }
  const lines = await readSiteLines(site.path);
  assert.deepEqual(lines.map((l) => JSON.parse(l).type), ["a", "e"]);
  assert.ok(lines.every((l) => !l.includes("\\u0000")));
  await assertHealthy(server.url, site.path, 2);
});

/** The peak resident memory of a process so far, in bytes (Linux). */
async function peakRss(pid: number): Promise<number> {
  const status = await Deno.readTextFile(`/proc/${pid}/status`);
  return Number(/^VmHWM:\s+(\d+) kB/m.exec(status)![1]) * 1024;
}

Deno.test("a gzip bomb is refused 413 after inflating about the bound, and nothing is stored", async () => {
  await using site = await tempDir();
  await using server = await spawnCliServer({ siteDir: site.path, port: freePort() });
  // 256 MiB of zeros in 255 KB: under the body bound compressed, 256 times over it inflated.
  const bomb = new Uint8Array(gzipSync(new Uint8Array(256 * MIB)));
  assert.ok(bomb.length < MIB);
  await write(server.url, "warm f=1"); // the route's code loaded and run once
  const before = await peakRss(server.child.pid);
  const answer = await write(server.url, bomb, { "content-encoding": "gzip" });
  assert.equal(answer.status, 413, answer.text);
  assert.equal(
    JSON.parse(answer.text).error,
    "The request body inflates to more than 1048576 bytes; split it into smaller batches (or have the operator raise --max-body).",
  );
  const grown = (await peakRss(server.child.pid)) - before;
  assert.ok(grown < 64 * MIB, `the peak memory grew by ${(grown / MIB).toFixed(1)} MiB`);
  assert.deepEqual((await readSiteLines(site.path)).map((l) => JSON.parse(l).type), ["warm"]);
  await assertHealthy(server.url, site.path, 1);
});

/**
 * Sends a chunked body that never ends, as fast as the server takes it, until an answer comes (or
 * `limitBytes` were sent); returns the answer's status line and how much was sent.
 */
async function endlessBody(
  port: number,
  limitBytes: number,
): Promise<{ status: number; sent: number }> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  const encoder = new TextEncoder();
  let answer = "";
  let answered = false;
  const reading = (async () => {
    const buf = new Uint8Array(4096);
    try {
      while (!/\r\n\r\n/.test(answer)) {
        const n = await conn.read(buf);
        if (n === null) break;
        answer += new TextDecoder().decode(buf.subarray(0, n));
      }
    } catch {
      // reset by the server after its answer
    }
    answered = true;
  })();
  let sent = 0;
  try {
    await conn.write(encoder.encode(
      "POST /write?db=x HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n",
    ));
    const piece = `${"a f=1\n".repeat(10_000)}`;
    const chunk = encoder.encode(`${piece.length.toString(16)}\r\n${piece}\r\n`);
    while (!answered && sent < limitBytes) {
      await conn.write(chunk);
      sent += piece.length;
    }
  } catch {
    // the server closed the connection after its answer
  }
  await reading;
  try {
    conn.close();
  } catch {
    // already closed
  }
  return { status: Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1] ?? 0), sent };
}

Deno.test("an endless body is refused 413 once past the bound, and nothing of it is stored", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const { status, sent } = await endlessBody(server.addr.port, 256 * MIB);
  assert.equal(status, 413);
  assert.ok(sent < 64 * MIB, `the server took ${(sent / MIB).toFixed(1)} MiB before it answered`);
  assert.deepEqual(await readSiteLines(site.path), []);
  await assertHealthy(server.url, site.path, 0);
});

Deno.test("an endless slow body is refused 408 at the body timeout, and nothing of it is stored", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path, bodyTimeoutMs: 400 });
  const head =
    "POST /api/v2/write?bucket=b HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100000\r\n\r\na f=1\n";
  const result = await slowBody(server.addr.port, head, {
    everyMs: 50,
    limitMs: 8000,
    byte: "\n",
    untilAnswered: true,
  });
  assert.equal(result.status, 408, result.text);
  assert.match(
    result.text,
    /\{"error":"The request body did not arrive in full within 0.4 s of its head;/,
  );
  assert.deepEqual(await readSiteLines(site.path), []);
  await assertHealthy(server.url, site.path, 0);
});

Deno.test("a write of more lines than MAX_WRITE_LINES within the body bound is refused 413 whole, and nothing of it is stored", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  // The shortest lines line protocol allows: five times more than JSON events in the same bytes.
  const body = "m f=1\n".repeat(MAX_WRITE_LINES + 1);
  assert.ok(body.length < MIB, "under the body bound: the line cap refuses it, not the bound");
  const answer = await write(server.url, body);
  assert.equal(answer.status, 413, answer.text);
  assert.match(JSON.parse(answer.text).error, new RegExp(`more than ${MAX_WRITE_LINES} lines`));
  assert.deepEqual(await readSiteLines(site.path), []);
  await assertHealthy(server.url, site.path, 0);
});

Deno.test("a write of exactly MAX_WRITE_LINES lines is stored whole", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const answer = await write(server.url, "m f=1\n".repeat(MAX_WRITE_LINES));
  assert.equal(answer.status, 204, answer.text);
  assert.equal((await readSiteLines(site.path)).length, MAX_WRITE_LINES);
});
