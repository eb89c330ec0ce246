/**
 * The cost of collecting MQTT (`deno task bench:collect`, docs/collect.md, "MQTT"): a collector
 * child (the `mqtt` input and a per-type merger posting at most once per 500 ms per type, run
 * with scoped permissions: net to the broker only, `--ignore-env`; and the service's V8 flags, a
 * young generation of at most 8 MiB semi-spaces, unless `--v8-flags` says otherwise) subscribes to a real
 * `mosquitto`. First 5 s of warm-up and `--seconds` of 200 fields per second (4 types of 50 fields): the merged
 * records per type and second, and the child's CPU (`/proc/<pid>/stat`, user + system). Then
 * `--messages` published as fast as the broker takes them: the child's RSS before and after.
 *
 * The merger here is the rule of docs/collect.md ("Merging") in a few lines, and its "post" is
 * building the record's JSON; the collector's queue and HTTP posting are measured by its own
 * benchmark.
 *
 * Usage: deno run -A bench/collect.ts [--seconds 30] [--messages 1000000] [--v8-flags ""]
 * @module
 */

// deno-lint-ignore-file no-console
import { parseArgs } from "node:util";
import mqtt from "npm:mqtt@^5.14.1";
import { mqttInput } from "../collect/inputs/mqtt.ts";
import type { FieldReading } from "../collect/inputs/input.ts";
import { SERVICE_V8_FLAGS } from "../cli/spawn.ts";
import { configAt, Mosquitto, mosquittoMissing } from "../tests/_collect_push_util.ts";

const TYPES = 4;
const FIELDS = 50;
const MERGE_MS = 500;

/** The child: the input and a merger; prints its counts and RSS once a second. */
async function child(url: string): Promise<void> {
  const topics = Object.fromEntries(
    Array.from({ length: TYPES }, (_, t) => [`bench/t${t}/+`, { type: `t${t}` }]),
  );
  const input = mqttInput.create(mqttInput.parse({ url, topics }, configAt()), { name: "bench" });
  const latest = new Map<string, Record<string, unknown>>();
  const lastPost = new Map<string, number>();
  const timers = new Map<string, ReturnType<typeof setTimeout>>();
  const posts: Record<string, number> = {};
  let received = 0;
  let bytes = 0;
  const post = (type: string): void => {
    timers.delete(type);
    lastPost.set(type, Date.now());
    bytes += JSON.stringify({ type, data: latest.get(type) }).length;
    posts[type] = (posts[type] ?? 0) + 1;
  };
  const sink = {
    record: () => {},
    warn: (_key: string, message: string) => console.error(message),
    field: (r: FieldReading) => {
      received++;
      const data = latest.get(r.type) ?? {};
      data[r.field] = r.value;
      latest.set(r.type, data);
      if (timers.has(r.type)) return;
      const wait = (lastPost.get(r.type) ?? 0) + MERGE_MS - Date.now();
      timers.set(r.type, setTimeout(() => post(r.type), Math.max(0, wait)));
    },
  };
  // A clean exit on SIGINT, so that `--cpu-prof` can write its profile.
  Deno.addSignalListener("SIGINT", () => Deno.exit(0));
  setInterval(() => {
    const { rss, heapUsed } = Deno.memoryUsage();
    console.log(JSON.stringify({ received, posts, bytes, rss, heapUsed }));
  }, 1000);
  await input.listen!(sink, new AbortController().signal, () => console.log('"up"'));
}

/** User + system CPU time of a process so far, in seconds. */
async function cpuSeconds(pid: number): Promise<number> {
  const stat = await Deno.readTextFile(`/proc/${pid}/stat`);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

interface Stats {
  received: number;
  posts: Record<string, number>;
  rss: number;
  heapUsed: number;
}

async function parent(seconds: number, messages: number, v8Flags: string[]): Promise<void> {
  const missing = mosquittoMissing();
  if (missing) {
    console.log(`bench/collect.ts: skipping: ${missing}`);
    return;
  }
  await using broker = await Mosquitto.start();
  const proc = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      ...v8Flags,
      `--allow-net=127.0.0.1:${broker.port}`,
      "--ignore-env",
      new URL(import.meta.url).pathname,
      "--child",
      broker.url,
    ],
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  let stats: Stats = { received: 0, posts: {}, rss: 0, heapUsed: 0 };
  let up = false;
  const reading = (async () => {
    let rest = "";
    for await (const chunk of proc.stdout.pipeThrough(new TextDecoderStream())) {
      rest += chunk;
      const lines = rest.split("\n");
      rest = lines.pop()!;
      for (const line of lines) {
        const v = JSON.parse(line);
        if (v === "up") up = true;
        else stats = v;
      }
    }
  })();
  const until = async (check: () => boolean, ms: number, what: string) => {
    const end = Date.now() + ms;
    while (!check()) {
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  const pub = await mqtt.connectAsync(broker.url, { reconnectPeriod: 0 });
  try {
    await until(() => up, 30_000, "the collector child");
    // 1. 200 fields per second (10 every 50 ms): 5 s of warm-up (the start-up's garbage is
    // collected then), then `seconds` measured.
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
    await steady(5);
    await until(() => stats.received >= n, 10_000, "the warm-up fields");
    const n0 = n;
    const posts0 = { ...stats.posts };
    const cpu0 = await cpuSeconds(proc.pid);
    const start = performance.now();
    await steady(seconds);
    const wall = (performance.now() - start) / 1000;
    const cpu = (await cpuSeconds(proc.pid)) - cpu0;
    await until(() => stats.received >= n, 10_000, "every field of the rate phase");
    const perType = Object.entries(stats.posts).map(([t, p]) => p - (posts0[t] ?? 0));
    console.log(
      `rate phase: ${n - n0} fields in ${wall.toFixed(1)} s (${((n - n0) / wall).toFixed(0)}/s); ` +
        `records per type: at most ${Math.max(...perType)} ` +
        `(${(Math.max(...perType) / wall).toFixed(2)} per second); ` +
        `collector CPU ${((cpu / wall) * 100).toFixed(2)} % of one core`,
    );
    // 2. `messages` as fast as mosquitto takes them; RSS after a warm-up and at the end.
    const base = stats.received;
    const flood = async (count: number) => {
      for (let i = 0; i < count; i++) {
        const topic = `bench/t${i % TYPES}/f${Math.floor(i / TYPES) % FIELDS}`;
        if (i % 1000 === 999) await pub.publishAsync(topic, String(i), { qos: 1 });
        else pub.publish(topic, String(i), { qos: 0 });
      }
    };
    const warm = Math.min(100_000, messages / 10);
    await flood(warm);
    await until(() => stats.received >= base + warm, 120_000, "the warm-up messages");
    await new Promise((r) => setTimeout(r, 1500));
    const rssBefore = stats.rss;
    const t0 = performance.now();
    const floodCpu0 = await cpuSeconds(proc.pid);
    // RSS and heap at each tenth of the messages: flat means no growth with their number.
    const series: string[] = [];
    for (let tenth = 0; tenth < 10; tenth++) {
      await flood(messages / 10);
      const mark = base + warm + (tenth + 1) * (messages / 10);
      await until(() => stats.received >= mark, 600_000, "a tenth of the messages");
      series.push(`${(stats.rss / 1048576).toFixed(0)}/${(stats.heapUsed / 1048576).toFixed(0)}`);
    }
    await until(() => stats.received >= base + warm + messages, 600_000, "every message");
    const took = (performance.now() - t0) / 1000;
    const floodCpu = ((await cpuSeconds(proc.pid)) - floodCpu0) / took;
    await new Promise((r) => setTimeout(r, 1500));
    const rssAfter = stats.rss;
    const mib = (b: number) => (b / 1048576).toFixed(1);
    console.log(
      `flood phase: ${messages} messages in ${took.toFixed(1)} s ` +
        `(${(messages / took).toFixed(0)}/s); collector RSS ${mib(rssBefore)} MiB before, ` +
        `${mib(rssAfter)} MiB after (${mib(rssAfter - rssBefore)} MiB); ` +
        `collector CPU ${(floodCpu * 100).toFixed(0)} % of one core\n` +
        `RSS/heap used (MiB) after each tenth: ${series.join(" ")}`,
    );
  } finally {
    await pub.endAsync();
    proc.kill();
    await proc.status;
    await reading.catch(() => {});
  }
}

const { values } = parseArgs({
  args: Deno.args,
  options: {
    child: { type: "string" },
    seconds: { type: "string", default: "30" },
    messages: { type: "string", default: "1000000" },
    "v8-flags": { type: "string", default: SERVICE_V8_FLAGS.join(" ") },
  },
});
if (values.child) await child(values.child);
else {
  const v8Flags = values["v8-flags"].split(" ").filter((f) => f !== "");
  await parent(Number(values.seconds), Number(values.messages), v8Flags);
}
