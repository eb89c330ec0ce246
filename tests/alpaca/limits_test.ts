/**
 * The Alpaca listener's limits (docs/safety.md, "Access"; docs/operations.md, "Connections"): a
 * `PUT` body slower than `--body-timeout` is answered HTTP 400 text, and a flood of silent
 * connections that uses up the descriptors never ends the process: the service keeps recording
 * and answering `/safety`, behind the guard and on loopback. The floods run `cli.ts telemetry
 * run` as a child under a low descriptor limit (`prlimit`), from many loopback source addresses.
 */

import assert from "node:assert/strict";
import { slowBody, type SlowBodyResult, tempDir, testServer, waitUntil } from "../_shared/util.ts";
import {
  type ChildServer,
  freePort,
  readAllStreams,
  Rng,
  seedFromEnv,
  spawnCliServer,
} from "../_shared/fault_util.ts";
import { connectFrom, type PeerConn } from "../_shared/net.ts";

const SEED = seedFromEnv(0xa1ac_a0f1);
const TIMEOUT_MS = 400;
const SLOW_PUT = "PUT /api/v1/safetymonitor/0/commandblind HTTP/1.1\r\nHost: localhost\r\n" +
  "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 2000\r\n\r\nCommand=";

function assertAlpacaTimeout(result: SlowBodyResult): void {
  assert.equal(result.status, 400, result.text);
  assert.match(result.text, /content-type: text\/plain/);
  assert.match(result.text, /The PUT body did not arrive in full within 0\.4 s/);
  assert.match(result.text, /--body-timeout/);
  assert.ok(result.answeredMs !== undefined && result.answeredMs >= TIMEOUT_MS * 0.8);
}

/** A slow `PUT` to the Alpaca port of a service with a short `--body-timeout`. */
async function slowPut(siteDir: string, guarded: boolean): Promise<SlowBodyResult> {
  await using server = await testServer({
    siteDir,
    alpacaPort: 0,
    alpacaDiscoveryPort: 0,
    connectionGuard: guarded,
    bodyTimeoutMs: TIMEOUT_MS,
  });
  // Without the guard Deno keeps the connection after the answer: read the answer only.
  return await slowBody(server.alpaca!.addr.port, SLOW_PUT, {
    everyMs: 100,
    limitMs: 8000,
    byte: "x",
    untilAnswered: !guarded,
  });
}

Deno.test("the Alpaca port behind the guard answers HTTP 400 text to a PUT body slower than --body-timeout, and closes its connection", async () => {
  await using site = await tempDir();
  const result = await slowPut(site.path, true);
  assertAlpacaTimeout(result);
  assert.ok(result.closedMs !== undefined, "still open after 8 s");
});

Deno.test("the Alpaca port on loopback answers HTTP 400 text to a PUT body slower than --body-timeout", async () => {
  await using site = await tempDir();
  assertAlpacaTimeout(await slowPut(site.path, false));
});

// --- floods of connections under a low descriptor limit -----------------------------------

async function whyNoPrlimit(): Promise<string | undefined> {
  if (Deno.build.os !== "linux") return `prlimit and 127/8 source addresses need Linux`;
  try {
    const out = await new Deno.Command("prlimit", { args: ["--nofile=64:64", "true"] }).output();
    return out.success ? undefined : "prlimit failed";
  } catch (err) {
    return `prlimit is not available (apt-get install util-linux): ${(err as Error).message}`;
  }
}
const noPrlimit = await whyNoPrlimit();
if (noPrlimit !== undefined) {
  // deno-lint-ignore no-console
  console.log(`tests/alpaca/limits_test.ts: ignoring the flood tests: ${noPrlimit}`);
}

function delay(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/**
 * Retries `fn` until it returns, at most 20 times 100 ms apart: out of descriptors, the guard may
 * close a client's connection to make room, and a client tries again.
 */
async function eventually<T>(what: string, fn: () => Promise<T>): Promise<T> {
  let last: unknown;
  for (let i = 0; i < 20; i++) {
    try {
      return await fn();
    } catch (err) {
      last = err;
      await delay(100);
    }
  }
  throw new Error(`${what} failed 20 times: ${last}`);
}

/** One event posted and acknowledged: its seq. */
async function record(url: string, n: number): Promise<number> {
  return await eventually(`POST /event #${n}`, async () => {
    const res = await fetch(`${url}/event`, {
      method: "POST",
      headers: { "content-type": "application/json", connection: "close" },
      body: JSON.stringify({ type: "probe", data: { n } }),
      signal: AbortSignal.timeout(5000),
    });
    const body = await res.json();
    assert.equal(res.status, 200, JSON.stringify(body));
    return body.seq as number;
  });
}

/** `GET /safety` answers its verdict. */
async function safety(url: string): Promise<void> {
  await eventually("GET /safety", async () => {
    const res = await fetch(`${url}/safety`, {
      headers: { connection: "close" },
      signal: AbortSignal.timeout(5000),
    });
    const body = await res.json();
    assert.equal(res.status, 200, JSON.stringify(body));
    assert.equal(typeof body.safe, "boolean");
  });
}

/** The service with an Alpaca port, under `nofile` descriptors and every permission. */
function alpacaChild(
  siteDir: string,
  alpacaPort: number,
  nofile: number,
  args: string[] = [],
): Promise<ChildServer> {
  return spawnCliServer({
    siteDir,
    port: freePort(),
    nofile,
    // Every permission: the default --max-conns reads the limit from /proc/self/limits.
    permissions: ["--allow-all"],
    args: [...args, "--alpaca-port", String(alpacaPort), "--alpaca-discovery-port", "0"],
  });
}

/** The Alpaca port answers `issafe` (false: no critical type is registered). */
async function issafe(alpacaPort: number): Promise<void> {
  await eventually("issafe", async () => {
    const res = await fetch(`http://127.0.0.1:${alpacaPort}/api/v1/safetymonitor/0/issafe`, {
      signal: AbortSignal.timeout(5000),
    });
    assert.equal((await res.json()).Value, false);
  });
}

/** The warn lines of one kind in the child's output. */
function lines(child: ChildServer, pattern: RegExp): number {
  return child.output().split("\n").filter((l) => pattern.test(l)).length;
}

Deno.test({
  name:
    "the service keeps recording and answering /safety through 768 silent connections from 12 addresses on the Alpaca port, out of descriptors",
  ignore: noPrlimit !== undefined,
  async fn() {
    const rng = new Rng(SEED);
    // deno-lint-ignore no-console
    console.log(`seed ${SEED}`);
    await using tmp = await tempDir();
    const alpacaPort = freePort();
    // 160 descriptors: the default --max-conns (64, three descriptors each) and the service's
    // own do not fit, so accepts fail for want of descriptors and the guard must make room.
    await using child = await alpacaChild(tmp.path, alpacaPort, 160, [
      "--host",
      "0.0.0.0",
      "--insecure",
    ]);
    const started = Date.now();
    const acknowledged: number[] = [await record(child.url, 0)];
    // 12 addresses, 64 connections each (--max-conns-per-peer), in a seeded order.
    const plan = Array.from({ length: 12 * 64 }, (_, i) => `127.0.6.${(i % 12) + 1}`);
    for (let i = plan.length - 1; i > 0; i--) {
      const j = rng.int(0, i);
      [plan[i], plan[j]] = [plan[j]!, plan[i]!];
    }
    const flood: PeerConn[] = [];
    try {
      for (let at = 0; at < plan.length; at += 96) {
        const batch = plan.slice(at, at + 96).map((from) =>
          connectFrom(from, alpacaPort).then((c) => void flood.push(c), () => {})
        );
        await Promise.all(batch);
        // During the flood: recording and the verdict go on.
        acknowledged.push(await record(child.url, acknowledged.length));
        await safety(child.url);
        assert.equal(child.output().includes("Uncaught"), false, child.output());
      }
      assert.match(child.output(), /Too many open files/, "the descriptors never ran out");
      acknowledged.push(await record(child.url, acknowledged.length));
      await safety(child.url);
    } finally {
      for (const c of flood) await c.destroy();
    }
    // After it: the same, and the Alpaca port answers again.
    acknowledged.push(await record(child.url, acknowledged.length));
    await safety(child.url);
    await issafe(alpacaPort);
    // One warning per kind every 10 s at most, however many accepts failed.
    const tens = Math.ceil((Date.now() - started) / 10_000) + 1;
    for (const kind of [/Could not accept/, /stopped accepting/, /Could not reach/]) {
      assert.ok(lines(child, kind) <= tens, `${lines(child, kind)} lines of ${kind}`);
    }
    const status = await child.kill("SIGTERM");
    assert.equal(status.code, 0, child.output());
    const stored = [...(await readAllStreams(tmp.path)).values()].flat().map((l) => l.seq);
    assert.deepEqual(acknowledged.filter((s) => !stored.includes(s)), [], "acknowledged, lost");
  },
});

Deno.test({
  name:
    "the Alpaca port on loopback listens again after running out of descriptors, and the process goes on",
  ignore: noPrlimit !== undefined,
  async fn() {
    await using tmp = await tempDir();
    const alpacaPort = freePort();
    await using child = await alpacaChild(tmp.path, alpacaPort, 96);
    const seq = await record(child.url, 0);
    // Connections until one is refused: by then an accept failed and the listener ended.
    const conns: Deno.Conn[] = [];
    try {
      for (let i = 0; i < 500; i++) {
        const conn = await Deno.connect({ hostname: "127.0.0.1", port: alpacaPort }).catch(
          () => undefined,
        );
        if (conn === undefined) break;
        conns.push(conn);
      }
      assert.ok(conns.length < 500, "500 connections were accepted: the limit did not apply");
      const ended = /on 127\.0\.0\.1:\d+ \(Alpaca\) stopped accepting connections/;
      await waitUntil(() => ended.test(child.output()), 15_000, "the Alpaca listener to end");
    } finally {
      for (const c of conns) c.close();
    }
    await issafe(alpacaPort);
    await safety(child.url);
    assert.equal(await record(child.url, 1), seq + 1);
    assert.equal((await child.kill("SIGTERM")).code, 0, child.output());
  },
});
