/**
 * The cost of publishing to MQTT (`deno task bench:publish`, docs/publish.md): a real service
 * (`spawnServer()`, its own process), a real publisher (`spawnPublisher()`, its own process under
 * its scoped permissions) and a real `mosquitto`; the benchmark posts events and subscribes to the
 * broker with MQTT.js.
 *
 * 1. Latency from `POST /event` to the message at a subscriber: `--latency` events one at a time
 *    (the next once the last arrived, 20 ms apart), then the same number at 200 per second over
 *    20 types (the service's `/stream` sends what arrives within 20 ms together; one payload per
 *    topic waits, so a type's event could supersede its predecessor: 10 per second per type
 *    do not).
 * 2. The publisher's CPU at 200 events per second (4 types, 10 fields each) for `--seconds`, after
 *    5 s of warm-up: user + system time of `/proc/<pid>/stat`.
 * 3. Its memory over `--events` events posted as fast as the service takes them (`POST /events`
 *    of 1,000): RSS (`/proc/<pid>/status`) after each tenth, once the last event of the tenth
 *    reached the subscriber; then the same again with the publisher under `--inspect`, its JS
 *    heap read after a full garbage collection after each tenth.
 * 4. `POST /event` latency side by side, one run: without a publisher, with the publisher and its
 *    broker up, with its broker down, and with a broker that accepts and never answers; rounds of
 *    `--posts` posts each, the four in turn, three times.
 *
 * Usage: deno run -A bench/publish.ts [--latency 1000] [--seconds 30] [--events 1000000] [--posts 500]
 * @module
 */

// deno-lint-ignore-file no-console
import { parseArgs } from "node:util";
import { join } from "node:path";
import mqtt from "npm:mqtt@^5.14.1";
import { spawnServer } from "../server.ts";
import { TelemetryClient } from "../client.ts";
import {
  publisherArgs,
  publisherEnv,
  SiteTopics,
  type SpawnedPublisher,
  spawnPublisher,
} from "../publish.ts";
import { spawnDeno } from "../process/spawn.ts";
import { Mosquitto, mosquittoMissing } from "../tests/_shared/collect_push_util.ts";
import { SilentBroker } from "../tests/_shared/publish_util.ts";
import { cpuSeconds, freePort, rssMiB } from "./_util.ts";

function percentile(values: number[], p: number): number {
  const sorted = values.toSorted((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length - 1) * p))]!;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

/**
 * A publisher run as `spawnPublisher()` runs it, plus `--inspect` on a loopback port: its JS heap
 * is read after a full garbage collection through the DevTools protocol.
 */
async function inspectedPublisher(to: string, port: number) {
  const options = { to, host: "127.0.0.1", port };
  const args = publisherArgs(options);
  const inspect = freePort();
  args.splice(1, 0, `--inspect=127.0.0.1:${inspect}`);
  const child = spawnDeno({ args, env: publisherEnv(options), output: "null" });
  let targets: { webSocketDebuggerUrl: string }[] | undefined;
  for (let tries = 0; targets === undefined; tries++) {
    try {
      targets = await (await fetch(`http://127.0.0.1:${inspect}/json/list`)).json();
    } catch (err) {
      if (tries > 100) throw err;
      await sleep(100);
    }
  }
  const ws = new WebSocket(targets[0]!.webSocketDebuggerUrl);
  await new Promise((resolve) => (ws.onopen = resolve));
  let id = 0;
  const waiting = new Map<number, (result: Record<string, number>) => void>();
  ws.onmessage = (e) => {
    const message = JSON.parse(e.data);
    waiting.get(message.id)?.(message.result);
    waiting.delete(message.id);
  };
  const call = (method: string) =>
    new Promise<Record<string, number>>((resolve) => {
      waiting.set(++id, resolve);
      ws.send(JSON.stringify({ id, method }));
    });
  return {
    child,
    async heapAfterGc(): Promise<number> {
      await call("HeapProfiler.collectGarbage");
      return (await call("Runtime.getHeapUsage")).usedSize! / 1024 / 1024;
    },
    close: () => ws.close(),
  };
}

async function main(options: {
  latency: number;
  seconds: number;
  events: number;
  posts: number;
}): Promise<void> {
  const missing = mosquittoMissing();
  if (missing) {
    console.log(`bench/publish.ts: skipping: ${missing}`);
    return;
  }
  await using broker = await Mosquitto.start();
  const dir = await Deno.makeTempDir({ prefix: "obs-bench-publish-" });
  const siteDir = join(dir, "site");
  await using service = await spawnServer({
    siteDir,
    host: "127.0.0.1",
    port: freePort(),
    output: "null",
  });
  const port = Number(new URL(service.url).port);
  const { site_id } = JSON.parse(await Deno.readTextFile(join(siteDir, ".site.json")));
  const topics = new SiteTopics("obs", site_id);
  const start = (to: string): SpawnedPublisher =>
    spawnPublisher({ to, host: "127.0.0.1", port, output: "null" });
  const post = async (type: string, data: unknown): Promise<number> => {
    const t0 = performance.now();
    const res = await fetch(`${service.url}/event`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ type, data }),
    });
    await res.body?.cancel();
    if (!res.ok) throw new Error(`POST /event answered ${res.status}`);
    return performance.now() - t0;
  };

  const sub = await mqtt.connectAsync(broker.url, { reconnectPeriod: 0 });
  /** Arrival time (performance.now) of each message by type and `data.i`. */
  const arrived = new Map<string, number>();
  sub.on("message", (topic, payload) => {
    if (!topic.startsWith(`${topics.root}/state/`)) return;
    const env = JSON.parse(new TextDecoder().decode(payload));
    arrived.set(`${env.type}:${env.data.i}`, performance.now());
  });
  await sub.subscribeAsync(`${topics.root}/state/#`, { qos: 1 });
  // The service's own share: when each event reaches a plain /stream reader in this process.
  const streamed = new Map<string, number>();
  const follow = new AbortController();
  const following = (async () => {
    for await (
      const m of new TelemetryClient({ baseUrl: service.url }).follow({ signal: follow.signal })
    ) {
      if (m.kind === "telemetry") {
        streamed.set(`${m.event.type}:${m.event.data.i}`, performance.now());
      }
    }
  })();
  const arrival = async (key: string, ms = 600_000): Promise<number> => {
    const end = performance.now() + ms;
    while (!arrived.has(key)) {
      if (performance.now() > end) throw new Error(`no message ${key}`);
      await sleep(1);
    }
    return arrived.get(key)!;
  };

  let publisher = start(broker.url);
  try {
    // The publisher is up once a first event reached the subscriber.
    await post("warm", { i: 0 });
    await arrival("warm:0", 30_000);

    // 1. Latency, one event at a time, then at 200 per second.
    const one: number[] = [];
    const oneStream: number[] = [];
    for (let i = 1; i <= options.latency; i++) {
      const t0 = performance.now();
      await post("lat", { i });
      one.push((await arrival(`lat:${i}`, 10_000)) - t0);
      oneStream.push(streamed.get(`lat:${i}`)! - t0);
      // Past the stream's 50 ms interval: each event is the first after a quiet one.
      await sleep(60);
    }
    const sent = new Map<number, number>();
    const paced = performance.now();
    const posts: Promise<number>[] = [];
    for (let i = 1; i <= options.latency; i++) {
      await sleep(paced + i * 5 - performance.now());
      sent.set(i, performance.now());
      // 20 types, each one event every 100 ms: none supersedes another before it is sent.
      posts.push(post(`rate${i % 20}`, { i }));
    }
    await Promise.all(posts);
    // Each type's last event arrives; an earlier one may have been superseded (the stream
    // delivered two of a type together, on a loaded machine): counted, not waited for.
    for (let i = options.latency - 19; i <= options.latency; i++) {
      await arrival(`rate${i % 20}:${i}`, 10_000);
    }
    const rate: number[] = [];
    const rateStream: number[] = [];
    let superseded = 0;
    for (const [i, t0] of sent) {
      const at = arrived.get(`rate${i % 20}:${i}`);
      if (at === undefined) superseded++;
      else rate.push(at - t0);
      rateStream.push(streamed.get(`rate${i % 20}:${i}`)! - t0);
    }
    const show = (values: number[]) =>
      `p50 ${percentile(values, 0.5).toFixed(2)} ms, p99 ${
        percentile(values, 0.99).toFixed(2)
      } ms, max ${Math.max(...values).toFixed(2)} ms`;
    console.log(
      `latency POST /event -> MQTT subscriber, one at a time (${one.length}): ${show(one)}`,
    );
    console.log(`  the same to a /stream reader: ${show(oneStream)}`);
    console.log(
      `latency at 200 events/s (${rate.length}, ${superseded} superseded by the next of their type): ${
        show(rate)
      }`,
    );
    console.log(`  the same to a /stream reader: ${show(rateStream)}`);

    // 2. CPU at 200 events per second: 4 types of 10 fields.
    let n = 0;
    const steady = async (secs: number) => {
      const begin = performance.now();
      for (let tick = 0; tick < secs * 20; tick++) {
        const batch: Promise<number>[] = [];
        for (let k = 0; k < 10; k++, n++) {
          const data: Record<string, number> = { i: n };
          for (let f = 0; f < 10; f++) data[`f${f}`] = (n * 7 + f) % 1000 / 10;
          batch.push(post(`t${n % 4}`, data));
        }
        await Promise.all(batch);
        await sleep(begin + (tick + 1) * 50 - performance.now());
      }
    };
    await steady(5);
    const cpu0 = await cpuSeconds(publisher.pid);
    const serviceCpu0 = await cpuSeconds(service.pid);
    const t0 = performance.now();
    await steady(options.seconds);
    const wall = (performance.now() - t0) / 1000;
    const cpu = (await cpuSeconds(publisher.pid)) - cpu0;
    const serviceCpu = (await cpuSeconds(service.pid)) - serviceCpu0;
    await arrival(`t${(n - 1) % 4}:${n - 1}`, 30_000);
    console.log(
      `200 events/s for ${wall.toFixed(1)} s: publisher CPU ${
        (cpu / wall * 100).toFixed(2)
      } % of one core (the service ${(serviceCpu / wall * 100).toFixed(2)} %)`,
    );

    // 3. Memory over `events` events as fast as the service takes them.
    const flood = async (count: number, tag: number) => {
      for (let sentCount = 0; sentCount < count; sentCount += 1000) {
        const lines = [];
        for (let k = 0; k < 1000; k++, n++) {
          lines.push(JSON.stringify({ type: `t${n % 4}`, data: { i: n, tag, v: n % 100 } }));
        }
        const res = await fetch(`${service.url}/events`, {
          method: "POST",
          headers: { "content-type": "application/x-ndjson" },
          body: lines.join("\n"),
        });
        await res.body?.cancel();
        if (!res.ok) throw new Error(`POST /events answered ${res.status}`);
      }
      await arrival(`t${(n - 1) % 4}:${n - 1}`);
    };
    await flood(options.events / 10, -1);
    const rss = [await rssMiB(publisher.pid)];
    const floodCpu0 = await cpuSeconds(publisher.pid);
    const f0 = performance.now();
    for (let tenth = 0; tenth < 10; tenth++) {
      await flood(options.events / 10, tenth);
      rss.push(await rssMiB(publisher.pid));
    }
    const tookPlain = (performance.now() - f0) / 1000;
    const floodCpu = ((await cpuSeconds(publisher.pid)) - floodCpu0) / tookPlain;
    // The same under the inspector: the JS heap after a full garbage collection, each tenth
    // (RSS alone cannot tell a leak from a heap V8 left grown).
    await publisher.stop();
    const inspected = await inspectedPublisher(broker.url, port);
    publisher = inspected.child;
    await post("warm", { i: 1 });
    await arrival("warm:1", 30_000);
    await flood(options.events / 10, -2);
    const heap = [await inspected.heapAfterGc()];
    for (let tenth = 0; tenth < 10; tenth++) {
      await flood(options.events / 10, 100 + tenth);
      heap.push(await inspected.heapAfterGc());
    }
    inspected.close();
    console.log(
      `${options.events} events in ${tookPlain.toFixed(1)} s (${
        (options.events / tookPlain).toFixed(0)
      }/s), publisher CPU ${(floodCpu * 100).toFixed(0)} %; publisher RSS ${
        rss[0]!.toFixed(1)
      } MiB before, ${rss.at(-1)!.toFixed(1)} MiB after; after each tenth: ${
        rss.slice(1).map((r) => r.toFixed(0)).join(" ")
      }`,
    );
    console.log(
      `  its JS heap after a full GC, before and after each tenth (MiB): ${
        heap.map((h) => h.toFixed(1)).join(" ")
      }`,
    );

    // 4. POST /event latency: no publisher, broker up, broker down, broker that never answers.
    await publisher.stop();
    await using silent = new SilentBroker();
    const down = `mqtt://127.0.0.1:${freePort()}`;
    const phases: [string, string | undefined][] = [
      ["no publisher", undefined],
      ["broker up", broker.url],
      ["broker down", down],
      ["broker silent", silent.url],
    ];
    const latencies = new Map<string, number[]>(phases.map(([name]) => [name, []]));
    for (let round = 0; round < 3; round++) {
      for (const [name, to] of phases) {
        if (to !== undefined) {
          publisher = start(to);
          // Following the stream once the service counts it as a client.
          while (
            !(await (await fetch(`${service.url}/metrics`)).text())
              .includes("telemetry_stream_clients 1")
          ) {
            await sleep(20);
          }
        }
        for (let i = 0; i < options.posts; i++) {
          latencies.get(name)!.push(await post("probe", { i, round }));
        }
        if (to !== undefined) await publisher.stop();
      }
    }
    const base = latencies.get("no publisher")!;
    for (const [name, values] of latencies) {
      console.log(
        `POST /event with ${name} (${values.length}): p50 ${
          percentile(values, 0.5).toFixed(2)
        } ms (${(percentile(values, 0.5) / percentile(base, 0.5)).toFixed(2)}x), p99 ${
          percentile(values, 0.99).toFixed(2)
        } ms (${(percentile(values, 0.99) / percentile(base, 0.99)).toFixed(2)}x)`,
      );
    }
  } finally {
    await publisher.stop();
    follow.abort();
    await following;
    await sub.endAsync();
    await service.stop();
    await Deno.remove(dir, { recursive: true });
  }
}

const { values } = parseArgs({
  args: Deno.args,
  options: {
    latency: { type: "string", default: "1000" },
    seconds: { type: "string", default: "30" },
    events: { type: "string", default: "1000000" },
    posts: { type: "string", default: "500" },
  },
});
await main({
  latency: Number(values.latency),
  seconds: Number(values.seconds),
  events: Number(values.events),
  posts: Number(values.posts),
});
