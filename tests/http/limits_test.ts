/**
 * The connection guard (docs/operations.md, "Connections"): unfinished request heads and idle
 * keep-alive connections are closed, one peer holds a bounded number of connections, and a
 * live `GET /stream` is never idle. Real sockets on 127.0.0.1; the lock-out test runs the
 * service as a child process with a small descriptor limit (`prlimit`).
 */

import assert from "node:assert/strict";
import { startServer } from "../../server/serve.ts";
import type { ConnectionLimits } from "../../http/conn_guard.ts";
import { CLI, freePort, tempDir } from "../_shared/util.ts";

const encoder = new TextEncoder();
const PARTIAL_HEAD = encoder.encode("POST /event HTTP/1.1\r\nHost: localhost\r\n");

/**
 * Reads `conn` until the peer closes it: the milliseconds that took and the text read, or
 * `undefined` milliseconds when it was still open after `limitMs`.
 */
async function readToClose(
  conn: Deno.Conn,
  limitMs: number,
): Promise<{ ms: number | undefined; text: string }> {
  const t0 = performance.now();
  const buf = new Uint8Array(4096);
  let text = "";
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<"timeout">((r) => timer = setTimeout(() => r("timeout"), limitMs));
  try {
    for (;;) {
      const n = await Promise.race([conn.read(buf).catch(() => null), timeout]);
      if (n === "timeout") return { ms: undefined, text };
      if (n === null) return { ms: performance.now() - t0, text };
      text += new TextDecoder().decode(buf.subarray(0, n));
    }
  } finally {
    clearTimeout(timer);
  }
}

async function closedWithin(conn: Deno.Conn, limitMs: number): Promise<number | undefined> {
  return (await readToClose(conn, limitMs)).ms;
}

async function guarded(siteDir: string, limits: ConnectionLimits) {
  return await startServer({
    siteDir,
    hostname: "127.0.0.1",
    port: 0,
    timeZone: "UTC",
    connectionGuard: true,
    connectionLimits: limits,
  });
}

async function postEvent(url: string): Promise<number> {
  const res = await fetch(`${url}/event`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: '{"type":"probe","data":{"v":1}}',
    signal: AbortSignal.timeout(5000),
  });
  await res.body?.cancel();
  return res.status;
}

Deno.test("an unfinished request head is closed after the head timeout", async () => {
  await using tmp = await tempDir();
  await using server = await guarded(tmp.path, { headTimeoutMs: 300, idleTimeoutMs: 60_000 });
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.addr.port });
  try {
    await conn.write(PARTIAL_HEAD);
    const ms = await closedWithin(conn, 10_000);
    assert.ok(ms !== undefined, "the connection stayed open 10 s");
    assert.ok(ms >= 250, `closed after ${ms} ms, before the head timeout`);
  } finally {
    conn.close();
  }
});

Deno.test("an idle keep-alive connection is closed after the idle timeout", async () => {
  await using tmp = await tempDir();
  await using server = await guarded(tmp.path, { headTimeoutMs: 60_000, idleTimeoutMs: 400 });
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.addr.port });
  try {
    await conn.write(encoder.encode("GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n"));
    const buf = new Uint8Array(4096);
    const n = await conn.read(buf);
    assert.match(new TextDecoder().decode(buf.subarray(0, n ?? 0)), /^HTTP\/1\.1 200 /);
    const ms = await closedWithin(conn, 10_000);
    assert.ok(ms !== undefined, "the idle connection stayed open 10 s");
    assert.ok(ms >= 300, `closed after ${ms} ms, before the idle timeout`);
  } finally {
    conn.close();
  }
});

Deno.test("a live /stream is not cut by the idle timeout", async () => {
  await using tmp = await tempDir();
  const idleMs = 200;
  await using server = await guarded(tmp.path, { headTimeoutMs: idleMs, idleTimeoutMs: idleMs });
  const res = await fetch(`${server.url}/stream`);
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  try {
    let text = "";
    while (!text.includes("event: snapshot")) text += (await reader.read()).value ?? "";
    // The property under test is time itself: no byte flows on the stream for ten idle timeouts.
    await new Promise((r) => setTimeout(r, idleMs * 10));
    assert.equal(await postEvent(server.url), 200);
    const deadline = Date.now() + 5000;
    while (!text.includes('"type":"probe"') && Date.now() < deadline) {
      const { value, done } = await reader.read();
      if (done) break;
      text += value;
    }
    assert.match(text, /event: telemetry\ndata: \{"seq":1,[^\n]*"type":"probe"/);
  } finally {
    await reader.cancel();
  }
});

Deno.test("over the per-peer bound with every connection busy, a new one gets a 503 problem", async () => {
  await using tmp = await tempDir();
  const warnings: string[] = [];
  await using server = await startServer({
    siteDir: tmp.path,
    hostname: "127.0.0.1",
    port: 0,
    timeZone: "UTC",
    connectionGuard: true,
    connectionLimits: { maxPerPeer: 2 },
    onWarning: (m) => warnings.push(m),
  });
  const streams = await Promise.all([0, 1].map(() => fetch(`${server.url}/stream`)));
  try {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.addr.port });
    try {
      await conn.write(encoder.encode("GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n"));
      const { ms, text } = await readToClose(conn, 5000);
      assert.ok(ms !== undefined, `still open after 5 s, having read ${JSON.stringify(text)}`);
      assert.match(text, /^HTTP\/1\.1 503 /);
      assert.match(text, /content-type: application\/problem\+json/);
      assert.match(text, /--max-conns-per-peer/);
    } finally {
      conn.close();
    }
    assert.equal(warnings.filter((w) => w.includes("--max-conns-per-peer 2")).length, 1);
  } finally {
    for (const s of streams) await s.body?.cancel();
  }
});

Deno.test({
  name: "a slowloris of 400 unfinished heads from one peer does not lock out a normal client",
  ignore: Deno.build.os !== "linux",
  async fn() {
    await using tmp = await tempDir();
    const port = freePort();
    // 320 descriptors: the 400 heads would take them all without the guard.
    const child = new Deno.Command("prlimit", {
      args: [
        "--nofile=320:320",
        Deno.execPath(),
        "run",
        "--allow-all",
        CLI,
        "telemetry",
        "run",
        "--site-dir",
        tmp.path,
        // Bound to the network, the guard stands in front (docs/operations.md); the peer is 127.0.0.1.
        "--host",
        "0.0.0.0",
        "--insecure",
        "--port",
        String(port),
        "--tz",
        "UTC",
      ],
      stdout: "null",
      stderr: "null",
    }).spawn();
    const url = `http://127.0.0.1:${port}`;
    const heads: Deno.Conn[] = [];
    try {
      const ready = Date.now() + 20_000;
      while (Date.now() < ready) {
        const ok = await fetch(`${url}/ready`).then(async (r) => {
          await r.body?.cancel();
          return r.ok;
        }, () => false);
        if (ok) break;
        await new Promise((r) => setTimeout(r, 50));
      }
      for (let i = 0; i < 400; i++) {
        // A refused attacker is no failure; the normal client below is what must get through.
        const conn = await Deno.connect({ hostname: "127.0.0.1", port }).catch(() => undefined);
        if (conn === undefined) continue;
        heads.push(conn);
        await conn.write(PARTIAL_HEAD).catch(() => {});
      }
      const t0 = performance.now();
      assert.equal(await postEvent(url).catch((err) => String(err)), 200);
      const ms = performance.now() - t0;
      // Under the 10 s head timeout: the client got through while the attackers still hold on.
      assert.ok(ms < 8000, `the POST took ${ms} ms`);
    } finally {
      for (const conn of heads) conn.close();
      child.kill("SIGTERM");
      await child.status;
    }
  },
});
