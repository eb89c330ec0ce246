/**
 * Alpaca discovery over a real UDP socket (docs/safety.md, "ASCOM Alpaca (N.I.N.A.)"): the
 * service started as `spawnServer()` starts it, under the scoped permissions of the flag table,
 * answers `alpacadiscovery1` with its Alpaca port and ignores anything else.
 */

import assert from "node:assert/strict";
import dgram from "node:dgram";
import { join } from "node:path";
import { freePort, freeUdpPort, tempDir, testServer } from "../_shared/util.ts";
import { spawnServer } from "../../server.ts";

/** A client socket that collects what it receives. */
async function client(): Promise<
  { socket: dgram.Socket; received: string[]; next(): Promise<string>; close(): Promise<void> }
> {
  const socket = dgram.createSocket("udp4");
  const received: string[] = [];
  const waiting: ((text: string) => void)[] = [];
  socket.on("message", (message: Uint8Array) => {
    const text = new TextDecoder().decode(message);
    received.push(text);
    waiting.shift()?.(text);
  });
  await new Promise<void>((resolve) => socket.bind(0, "127.0.0.1", resolve));
  return {
    socket,
    received,
    next() {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error("no discovery answer within 10 s")),
          10_000,
        );
        waiting.push((text) => {
          clearTimeout(timer);
          resolve(text);
        });
      });
    },
    close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
}

function send(socket: dgram.Socket, text: string, port: number): Promise<void> {
  return new Promise((resolve, reject) =>
    socket.send(
      new TextEncoder().encode(text),
      port,
      "127.0.0.1",
      (err) => err ? reject(err) : resolve(),
    )
  );
}

Deno.test("discovery answers alpacadiscovery1 with the Alpaca port, and nothing else", async () => {
  await using site = await tempDir();
  const alpacaPort = freePort();
  const discoveryPort = await freeUdpPort();
  await using _server = await spawnServer({
    siteDir: join(site.path, "t"),
    host: "127.0.0.1",
    port: 0,
    alpacaPort,
    alpacaDiscoveryPort: discoveryPort,
    output: "null",
  });
  const asker = await client();
  const stranger = await client();
  try {
    // The stranger's datagrams are read first; were any answered, its answer would arrive
    // before the asker's second one.
    for (const text of ["alpacadiscovery2", "hello", "alpacadiscovery1".repeat(8)]) {
      await send(stranger.socket, text, discoveryPort);
    }
    await send(asker.socket, "alpacadiscovery1", discoveryPort);
    assert.deepEqual(JSON.parse(await asker.next()), { AlpacaPort: alpacaPort });
    await send(asker.socket, "alpacadiscovery1", discoveryPort);
    assert.deepEqual(JSON.parse(await asker.next()), { AlpacaPort: alpacaPort });
    assert.deepEqual(stranger.received, []);
    // The port it names serves the devices.
    const res = await fetch(`http://127.0.0.1:${alpacaPort}/management/v1/configureddevices`);
    assert.equal(res.status, 200);
    assert.equal((await res.json()).Value.length, 2);
  } finally {
    await asker.close();
    await stranger.close();
  }
});

Deno.test("--alpaca-discovery-port 0 opens no discovery socket", async () => {
  await using site = await tempDir();
  const server = await testServer({ siteDir: site.path, alpacaPort: 0, alpacaDiscoveryPort: 0 });
  try {
    assert.ok(server.alpaca);
    assert.equal(server.alpaca.discovery, undefined);
  } finally {
    await server.shutdown();
  }
});

Deno.test("a discovery port held by another program is refused naming the flags to change", async () => {
  await using site = await tempDir();
  const holder = dgram.createSocket("udp4");
  await new Promise<void>((resolve) => holder.bind(0, "127.0.0.1", resolve));
  try {
    await assert.rejects(
      testServer({ siteDir: site.path, alpacaPort: 0, alpacaDiscoveryPort: holder.address().port }),
      /--alpaca-discovery-port 0/,
    );
  } finally {
    await new Promise<void>((resolve) => holder.close(() => resolve()));
  }
});
