/**
 * The cost of collecting MQTT (`deno task bench:collect`, docs/collect.md, "MQTT"): a real
 * collector (`spawnCollector()`: its own process under its scoped permissions) with one `mqtt`
 * input of four types subscribes to a real `mosquitto` and posts to a real service (in this
 * process, a temp site directory). First 5 s of warm-up and `--seconds` of 200 fields per second
 * (4 types of 50 fields): the events stored per type and second, and the collector's CPU
 * (`/proc/<pid>/stat`, user + system). Then `--messages` published as fast as the broker takes
 * them: the collector's RSS (`/proc/<pid>/status`) after each tenth.
 *
 * Usage: deno run -A bench/collect.ts [--seconds 30] [--messages 1000000]
 * @module
 */

// deno-lint-ignore-file no-console
import { parseArgs } from "node:util";
import { join } from "node:path";
import mqtt from "npm:mqtt@^5.14.1";
import { spawnCollector } from "../collect.ts";
import { testServer } from "../tests/_shared/util.ts";
import { storedEvents } from "../tests/_shared/collect_util.ts";
import { Mosquitto, mosquittoMissing } from "../tests/_shared/collect_push_util.ts";
import { cpuSeconds, rssMiB } from "./_util.ts";

const TYPES = 4;
const FIELDS = 50;

async function main(seconds: number, messages: number): Promise<void> {
  const missing = mosquittoMissing();
  if (missing) {
    console.log(`bench/collect.ts: skipping: ${missing}`);
    return;
  }
  await using broker = await Mosquitto.start();
  const dir = await Deno.makeTempDir({ prefix: "obs-bench-collect-" });
  try {
    await using service = await testServer({ siteDir: join(dir, "site") });
    const config = join(dir, "collect.json");
    const topics = Object.fromEntries(
      Array.from({ length: TYPES }, (_, t) => [`bench/t${t}/+`, { type: `t${t}` }]),
    );
    await Deno.writeTextFile(
      config,
      JSON.stringify({ inputs: [{ name: "bench", kind: "mqtt", url: broker.url, topics }] }),
    );
    await using collector = spawnCollector({
      config,
      host: "127.0.0.1",
      port: service.addr.port,
      output: "null",
    });
    const pub = await mqtt.connectAsync(broker.url, { reconnectPeriod: 0 });
    const site = join(dir, "site");
    /** Waits until the collector has posted `marker` (a field of t0), so it read all before. */
    const drained = async (marker: number) => {
      const end = Date.now() + 600_000;
      // Published again each second until stored: the first may come before the subscription.
      for (let tries = 0;; tries++) {
        if (tries % 5 === 0) await pub.publishAsync("bench/t0/marker", String(marker), { qos: 1 });
        const events = await storedEvents(site).catch(() => []);
        if (events.some((e) => e.data.marker === marker)) return;
        if (Date.now() > end) throw new Error(`timed out waiting for marker ${marker}`);
        await new Promise((r) => setTimeout(r, 200));
      }
    };
    try {
      await drained(0);
      let n = 0;
      const steady = async (secs: number) => {
        const begin = performance.now();
        for (let tick = 0; tick < secs * 20; tick++) {
          for (let i = 0; i < 10; i++, n++) {
            const topic = `bench/t${n % TYPES}/f${Math.floor(n / TYPES) % FIELDS}`;
            pub.publish(topic, String(n), { qos: 0 });
          }
          const next = begin + (tick + 1) * 50;
          await new Promise((r) => setTimeout(r, Math.max(0, next - performance.now())));
        }
      };
      // 1. 200 fields per second, after 5 s of warm-up (the start-up's garbage is collected).
      await steady(5);
      await drained(1);
      const before = (await storedEvents(site)).length;
      const cpu0 = await cpuSeconds(collector.pid);
      const start = performance.now();
      await steady(seconds);
      const wall = (performance.now() - start) / 1000;
      const cpu = (await cpuSeconds(collector.pid)) - cpu0;
      await drained(2);
      const events = (await storedEvents(site)).slice(before);
      const perType = Array.from(
        { length: TYPES },
        (_, t) => events.filter((e) => e.type === `t${t}`).length,
      );
      console.log(
        `rate phase: ${seconds * 200} fields in ${wall.toFixed(1)} s; events stored per type: ` +
          `${perType.join(", ")} (at most ${
            (Math.max(...perType) / wall).toFixed(2)
          } per second); ` +
          `collector CPU ${((cpu / wall) * 100).toFixed(2)} % of one core`,
      );
      // 2. `messages` as fast as mosquitto takes them; RSS after each tenth.
      const flood = async (count: number) => {
        for (let i = 0; i < count; i++) {
          const topic = `bench/t${i % TYPES}/f${Math.floor(i / TYPES) % FIELDS}`;
          if (i % 1000 === 999) await pub.publishAsync(topic, String(i), { qos: 1 });
          else pub.publish(topic, String(i), { qos: 0 });
        }
      };
      await flood(Math.min(100_000, messages / 10));
      await drained(3);
      const rss = [await rssMiB(collector.pid)];
      const t0 = performance.now();
      const floodCpu0 = await cpuSeconds(collector.pid);
      for (let tenth = 0; tenth < 10; tenth++) {
        await flood(messages / 10);
        await drained(10 + tenth);
        rss.push(await rssMiB(collector.pid));
      }
      const took = (performance.now() - t0) / 1000;
      const floodCpu = ((await cpuSeconds(collector.pid)) - floodCpu0) / took;
      console.log(
        `flood phase: ${messages} messages in ${took.toFixed(1)} s ` +
          `(${(messages / took).toFixed(0)}/s), collector CPU ${(floodCpu * 100).toFixed(0)} %; ` +
          `collector RSS ${rss[0]!.toFixed(1)} MiB before, ${rss.at(-1)!.toFixed(1)} MiB after; ` +
          `after each tenth: ${rss.slice(1).map((r) => r.toFixed(0)).join(" ")}`,
      );
    } finally {
      await pub.endAsync();
      await collector.stop();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

const { values } = parseArgs({
  args: Deno.args,
  options: {
    seconds: { type: "string", default: "30" },
    messages: { type: "string", default: "1000000" },
  },
});
await main(Number(values.seconds), Number(values.messages));
