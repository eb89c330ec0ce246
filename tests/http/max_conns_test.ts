/**
 * The bound of all connections together (`--max-conns`, docs/operations.md, "Connections"):
 * behind the connection guard, the main port and the Alpaca port share it; beyond it the oldest
 * connection without a request in flight is closed, or, with every one busy, the new one is
 * answered 503. Peers are many loopback source addresses (127.0.x.y), real sockets.
 */

import assert from "node:assert/strict";
import { connectFrom, type PeerConn } from "../_shared/net.ts";
import { freePort, Rng, seedFromEnv, spawnCliServer } from "../_shared/fault_util.ts";
import { tempDir, testServer, waitUntil } from "../_shared/util.ts";

const SEED = seedFromEnv(0x3a7c_0c01);

Deno.test("startServer() keeps at most --max-conns silent connections of many addresses open, on both ports together", async () => {
  const rng = new Rng(SEED);
  // deno-lint-ignore no-console
  console.log(`seed ${SEED}`);
  await using tmp = await tempDir();
  const maxConns = 40;
  await using server = await testServer({
    siteDir: tmp.path,
    connectionGuard: true,
    connectionLimits: { maxConns },
    alpacaPort: 0,
    alpacaDiscoveryPort: 0,
  });
  const ports = [server.addr.port, server.alpaca!.addr.port];
  const conns: PeerConn[] = [];
  try {
    // 12 addresses, a few connections each (under --max-conns-per-peer), to either port.
    for (let i = 0; i < 96; i++) {
      const from = `127.0.3.${rng.int(1, 12)}`;
      conns.push(await connectFrom(from, rng.pick(ports)));
    }
    const open = () => conns.filter((c) => !c.closedByServer()).length;
    await waitUntil(() => open() <= maxConns, 5000, `at most ${maxConns} open`);
    // The newest were kept: the oldest, never served, were the ones closed.
    assert.ok(conns.slice(-maxConns + 4).every((c) => !c.closedByServer()));
    const res = await fetch(`${server.url}/safety`);
    assert.equal(res.status, 200);
    await res.body?.cancel();
  } finally {
    for (const c of conns) await c.destroy();
  }
});

Deno.test("startServer() answers 503 naming --max-conns to a new connection when every one of the bound has a request in flight", async () => {
  await using tmp = await tempDir();
  const warnings: string[] = [];
  await using server = await testServer({
    siteDir: tmp.path,
    connectionGuard: true,
    connectionLimits: { maxConns: 2 },
    onWarning: (m) => warnings.push(m),
  });
  const streams: PeerConn[] = [];
  try {
    // Two live streams from two addresses: busy, so neither may be closed for a newcomer.
    for (const from of ["127.0.4.1", "127.0.4.2"]) {
      const conn = await connectFrom(from, server.addr.port);
      streams.push(conn);
      await conn.write("GET /stream HTTP/1.1\r\nHost: localhost\r\n\r\n");
      await waitUntil(() => conn.received().includes("event: snapshot"), 5000, "the snapshot");
    }
    const third = await connectFrom("127.0.4.3", server.addr.port);
    try {
      await third.write("GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n");
      await waitUntil(() => third.closedByServer(), 5000, "the third connection to be closed");
      assert.match(third.received(), /^HTTP\/1\.1 503 /);
      assert.match(third.received(), /content-type: application\/problem\+json/);
      assert.match(third.received(), /--max-conns\b/);
    } finally {
      await third.destroy();
    }
    assert.ok(streams.every((s) => !s.closedByServer()));
    assert.equal(
      warnings.filter((w) => w.includes("(--max-conns 2)")).length,
      1,
      warnings.join("\n"),
    );
  } finally {
    for (const s of streams) await s.destroy();
  }
});

Deno.test({
  name:
    "obs-utils telemetry run bounds all connections by default to a quarter of what the descriptor limit leaves it",
  ignore: Deno.build.os !== "linux",
  async fn() {
    const rng = new Rng(SEED + 1);
    await using tmp = await tempDir();
    const port = freePort();
    // 400 descriptors: (400 - 64) / 4 = 84 connections, three descriptors each, fit with room.
    // The limit is read from /proc/self/limits, which Deno opens only with every permission.
    await using child = await spawnCliServer({
      siteDir: tmp.path,
      port,
      nofile: 400,
      permissions: ["--allow-all"],
      args: ["--host", "0.0.0.0", "--insecure"],
    });
    const conns: PeerConn[] = [];
    try {
      for (let i = 0; i < 120; i++) {
        conns.push(await connectFrom(`127.0.7.${rng.int(1, 12)}`, port));
      }
      const open = () => conns.filter((c) => !c.closedByServer()).length;
      await waitUntil(() => open() <= 84, 5000, "at most 84 open");
      // Exactly the bound: no connection was lost for want of a descriptor.
      await new Promise((r) => setTimeout(r, 200));
      assert.equal(open(), 84, child.output());
      assert.doesNotMatch(child.output(), /Too many open files/);
    } finally {
      for (const c of conns) await c.destroy();
    }
  },
});
