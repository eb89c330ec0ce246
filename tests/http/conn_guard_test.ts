/**
 * The connection guard's own path (docs/operations.md, "Connections"): it hands each accepted
 * connection to Deno's HTTP server, so a connection costs one descriptor, HTTPS is served over
 * HTTP/1.1 and HTTP/2 with the TLS handshake inside the head timeout, a shutdown closes the idle
 * connections at once, and without that server (another Deno) the service does not start. Real
 * servers on 127.0.0.1, real sockets, a certificate made by `openssl`.
 */

import assert from "node:assert/strict";
import { opensslMissing, selfSignedCert } from "../_shared/net.ts";
import { tempDir, testServer, waitUntil } from "../_shared/util.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const noOpenssl = opensslMissing();

/** The descriptors this process holds now (Linux). */
function openDescriptors(): number {
  return [...Deno.readDirSync("/proc/self/fd")].length;
}

/** One `GET /health` on `conn`, kept alive: the answer's status line. */
async function health(conn: Deno.Conn): Promise<string> {
  await conn.write(encoder.encode("GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  const buf = new Uint8Array(4096);
  const n = await conn.read(buf);
  return decoder.decode(buf.subarray(0, n ?? 0)).split("\r\n")[0]!;
}

Deno.test({
  name: "startServer() behind the connection guard holds one descriptor per connection, not three",
  ignore: Deno.build.os !== "linux",
  async fn() {
    await using tmp = await tempDir();
    await using server = await testServer({ siteDir: tmp.path, connectionGuard: true });
    const before = openDescriptors();
    const n = 30;
    const conns: Deno.Conn[] = [];
    try {
      for (let i = 0; i < n; i++) {
        const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.addr.port });
        conns.push(conn);
        // Answered: the connection is accepted and served by now.
        assert.equal(await health(conn), "HTTP/1.1 200 OK");
      }
      // This process holds both ends: the client's, and the server's one per connection, 2n in
      // all (an internal hop to a second server would add two more each: 4n). A descriptor of
      // the service's own start may have closed meanwhile.
      const added = openDescriptors() - before;
      assert.ok(added >= n && added < 3 * n, `${added} descriptors for ${n} connections`);
    } finally {
      for (const conn of conns) conn.close();
    }
  },
});

Deno.test({
  name:
    "startServer() over HTTPS behind the guard answers HTTP/1.1 and HTTP/2, and closes a connection that never begins its TLS handshake after the head timeout",
  ignore: noOpenssl !== undefined,
  async fn() {
    await using dir = await tempDir();
    await using tmp = await tempDir();
    const { cert, key } = await selfSignedCert(dir.path);
    await using server = await testServer({
      siteDir: tmp.path,
      tlsCert: cert,
      tlsKey: key,
      connectionGuard: true,
      connectionLimits: { headTimeoutMs: 300 },
    });
    const caCerts = [await Deno.readTextFile(cert)];
    for (const http2 of [false, true]) {
      // A client that speaks only the one version: the request fails unless it is served.
      using client = Deno.createHttpClient({ caCerts, http1: !http2, http2 });
      const res = await fetch(`https://localhost:${server.addr.port}/health`, { client });
      assert.deepEqual(await res.json(), { ok: true }, `HTTP/${http2 ? 2 : 1.1}`);
    }
    const silent = await Deno.connect({ hostname: "127.0.0.1", port: server.addr.port });
    try {
      const t0 = performance.now();
      const end = await Promise.race([
        silent.read(new Uint8Array(16)).catch(() => null),
        new Promise<"open">((r) => setTimeout(() => r("open"), 10_000)),
      ]);
      assert.equal(end, null, "the silent connection stayed open 10 s");
      const ms = performance.now() - t0;
      assert.ok(ms >= 250, `closed after ${ms} ms, before the head timeout`);
    } finally {
      silent.close();
    }
  },
});

Deno.test("startServer() behind the guard closes an idle kept-alive connection at shutdown without waiting for the grace period", async () => {
  await using tmp = await tempDir();
  const server = await testServer({
    siteDir: tmp.path,
    connectionGuard: true,
    shutdownGraceMs: 20_000,
  });
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.addr.port });
  try {
    assert.equal(await health(conn), "HTTP/1.1 200 OK");
    let closed = false;
    const reading = conn.read(new Uint8Array(16)).catch(() => null).then(() => closed = true);
    const t0 = performance.now();
    await server.shutdown();
    const ms = performance.now() - t0;
    // Far under the grace period: the shutdown did not wait for the idle connection to go.
    assert.ok(ms < 10_000, `the shutdown took ${ms} ms`);
    await waitUntil(() => closed, 5000, "the idle connection to be closed");
    await reading;
  } finally {
    conn.close();
  }
});

Deno.test("startServer() refuses to serve plain HTTP behind the guard, naming Deno 2.9, when Deno has no per-connection HTTP server, and frees the site directory", async () => {
  await using tmp = await tempDir();
  // Another Deno, as the guard would find it: the runtime's internals without the function.
  const deno = Deno as unknown as { internal: symbol } & Record<symbol, Record<string, unknown>>;
  const internals = deno[deno.internal]!;
  const serveHttpOnConnection = internals.serveHttpOnConnection;
  delete internals.serveHttpOnConnection;
  try {
    await assert.rejects(
      testServer({ siteDir: tmp.path, connectionGuard: true }),
      /has no per-connection HTTP server \(serveHttpOnConnection\).*run the service with Deno 2\.9/,
    );
  } finally {
    internals.serveHttpOnConnection = serveHttpOnConnection;
  }
  // The refused start closed what it opened: the site directory can be served at once.
  await using server = await testServer({ siteDir: tmp.path, connectionGuard: true });
  const res = await fetch(`${server.url}/health`);
  assert.deepEqual(await res.json(), { ok: true });
});
