/**
 * The scale benchmark: many live viewers and many event types, side by side in one run.
 *
 * 1. Ingestion (`POST /event` from `wrk`, 16 connections) with 0 and with 200 `GET /stream`
 *    subscribers. Every subscriber is a real HTTP reader in this process that counts the bytes it
 *    receives; one of them parses every message. After the load, each subscriber must have
 *    received exactly the bytes of the parsed one, which saw every stored seq exactly once.
 *    The server's CPU time per event (user + system, from /proc) is reported too: on a shared
 *    machine it tells the server's own cost from the load of the readers and `wrk`.
 * 2. With 10,000 types in the snapshot: event-loop time of one `GET /current` and one
 *    `GET /metrics` (measured in-process: the handler and the reading of its whole body chunk
 *    by chunk, as the HTTP layer reads it, with nothing else running), and the `POST /event` rate cycling over the 10,000 types against the
 *    rate with one type (child servers, `wrk`).
 *
 * Usage: deno run -A bench/scale.ts [--seconds 3] [--rounds 2] [--subscribers 200]
 *   [--types 10000] [--pin] [--readers raw|fetch] [--baseline DIR] [--only viewers|types]
 *
 * `--only types` runs part 2 alone (`--only viewers` part 1), with `--baseline DIR` its rounds
 * and bodies for the other checkout too.
 * @module
 */

// deno-lint-ignore-file no-console
import { parseArgs } from "node:util";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import {
  cpuSeconds,
  freePort,
  luaString,
  ROOT,
  runWrk,
  serviceArgs,
  threadCpuNanos,
  waitReady,
} from "./_util.ts";
import { createHandler as ourHandler, TelemetryService as OurService } from "../server.ts";
import { ServerSentEventParserStream } from "../wire/sse.ts";

const { values: flags } = parseArgs({
  args: Deno.args.filter((a) => a !== "--"),
  options: {
    seconds: { type: "string", default: "3" },
    rounds: { type: "string", default: "2" },
    subscribers: { type: "string", default: "200" },
    types: { type: "string", default: "10000" },
    pin: { type: "boolean", default: false },
    readers: { type: "string", default: "raw" },
    baseline: { type: "string" },
    only: { type: "string" },
  },
  strict: true,
});
/** One part alone: `viewers` (part 1) or `types` (part 2); both when absent. */
const ONLY = flags.only;
if (ONLY !== undefined && ONLY !== "viewers" && ONLY !== "types") {
  throw new Error("--only is viewers or types");
}
const SECONDS = Number(flags.seconds);
const ROUNDS = Number(flags.rounds);
const SUBSCRIBERS = Number(flags.subscribers);
const TYPES = Number(flags.types);
/**
 * With `--pin`, the server runs on CPU 0 alone and this process (the subscribers) and `wrk` on
 * CPU 1: the viewers' own reading no longer takes the server's CPU, as when they are browsers on
 * other machines.
 */
const PIN = flags.pin;
/**
 * How the subscribers read. `raw` (default): a TCP socket read 256 KiB at a time, the chunked
 * framing stepped over and the gzip body counted, not decoded (a viewer's own decoding happens on
 * its own machine); one of them decodes and parses every message. `fetch`: each subscriber is a
 * `fetch` body that Deno decodes, which on two shared cores costs more than the service's own
 * extra work per viewer.
 */
const READERS = flags.readers;
/** With `--baseline DIR`, another checkout's service runs the viewer rounds too, side by side. */
const BASELINE = flags.baseline;
if (READERS !== "raw" && READERS !== "fetch") throw new Error("--readers is raw or fetch");
const EVENT_DATA = { wind_mps: 2.1, temp_c: -3.5, humidity: 41, sky: "clear" };

interface Running {
  child: Deno.ChildProcess;
  url: string;
  siteDir: string;
}

async function start(root?: string): Promise<Running> {
  const port = freePort();
  const siteDir = await Deno.makeTempDir({ prefix: "bench-scale-" });
  const args = serviceArgs({ siteDir, port, ...(root ? { root } : {}) });
  const child = PIN
    ? new Deno.Command("taskset", {
      args: ["-c", "0", Deno.execPath(), ...args],
      stdout: "null",
      stderr: "inherit",
    }).spawn()
    : new Deno.Command(Deno.execPath(), { args, stdout: "null", stderr: "inherit" }).spawn();
  const url = `http://127.0.0.1:${port}`;
  await waitReady(url, "the server");
  return { child, url, siteDir };
}

async function stop(run: Running): Promise<void> {
  try {
    run.child.kill("SIGTERM");
  } catch {
    // gone
  }
  await run.child.status;
  await Deno.remove(run.siteDir, { recursive: true });
}

/** `wrk` posting single events for SECONDS; with `types`, cycling over `t0`..`t<types-1>`. */
async function wrk(
  url: string,
  types = 0,
): Promise<{ rate: number; requests: number; errors: number }> {
  const fixed = types === 0
    ? `wrk.body = ${luaString(JSON.stringify({ type: "weather", data: EVENT_DATA }))}\n`
    : `local n = 0
request = function()
  n = n + 1
  local body = '{"type":"t' .. (n % ${types}) .. '","data":{"wind_mps":2.1,"temp_c":-3.5,"humidity":41,"sky":"clear"}}'
  return wrk.format("POST", nil, nil, body)
end
`;
  const r = await runWrk({
    url: `${url}/event`,
    script: `wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n${fixed}`,
    connections: 16,
    seconds: SECONDS,
  });
  return { rate: r.requests / r.seconds, requests: r.requests, errors: r.errors };
}

/**
 * One `GET /stream` reader that counts body bytes (as sent: gzip for raw readers, decoded for
 * fetch ones); `parsed` ones also collect every telemetry seq.
 */
interface Subscriber {
  bytes: number;
  seqs: number[] | undefined;
  /** Cancels the reading and waits for it to end. */
  close(): Promise<void>;
}

function subscribe(url: string, parsed: boolean): Promise<Subscriber> {
  return READERS === "raw" ? subscribeRaw(url, parsed) : subscribeFetch(url, parsed);
}

/** The telemetry seqs of a decoded SSE body. */
async function collectSeqs(body: ReadableStream<Uint8Array>, seqs: number[]): Promise<void> {
  const parser = body.pipeThrough(new TextDecoderStream())
    .pipeThrough(new ServerSentEventParserStream()).getReader();
  try {
    while (true) {
      const { value: m, done } = await parser.read();
      if (done) break;
      if (m.event === "telemetry") seqs.push(Number(m.id.slice(m.id.lastIndexOf(":") + 1)));
    }
  } catch {
    // cancelled, or the gzip member cut short at the end of the round
  }
}

/**
 * A raw HTTP/1.1 reader asking for gzip: the head is checked once, then the chunked framing is
 * stepped over and the body bytes counted. A `parsed` one also feeds its body to a gzip decoder
 * and the SSE parser.
 */
async function subscribeRaw(url: string, parsed: boolean): Promise<Subscriber> {
  const { hostname, port } = new URL(url);
  const conn = await Deno.connect({ hostname, port: Number(port) });
  await conn.write(
    new TextEncoder().encode(
      `GET /stream HTTP/1.1\r\nHost: ${hostname}:${port}\r\nAccept-Encoding: gzip\r\n\r\n`,
    ),
  );
  const sub: Subscriber = { bytes: 0, seqs: parsed ? [] : undefined, close: async () => {} };
  let feed: WritableStreamDefaultWriter<Uint8Array> | undefined;
  let parse: Promise<void> = Promise.resolve();
  /** A parsed reader's decoder, once the head says whether the body is gzip. */
  const startParsing = (gzip: boolean) => {
    const decode = gzip
      ? new DecompressionStream("gzip")
      : new TransformStream<Uint8Array, Uint8Array>();
    feed = decode.writable.getWriter() as WritableStreamDefaultWriter<Uint8Array>;
    parse = collectSeqs(decode.readable as ReadableStream<Uint8Array>, sub.seqs!);
  };
  const buf = new Uint8Array(256 * 1024);
  let head = "";
  let inHead = true;
  // Chunked framing: `left` body bytes of the current chunk, then its CRLF and the next size line.
  let left = 0;
  let sizeLine = "";
  let skipCrlf = 0;
  const body = (bytes: Uint8Array) => {
    sub.bytes += bytes.byteLength;
    if (feed) void feed.write(bytes.slice()).catch(() => {});
  };
  const read = (async () => {
    try {
      while (true) {
        const n = await conn.read(buf);
        if (n === null) break;
        let at = 0;
        if (inHead) {
          head += new TextDecoder().decode(buf.subarray(0, n));
          const end = head.indexOf("\r\n\r\n");
          if (end < 0) continue;
          if (!/^HTTP\/1\.1 200/.test(head)) {
            throw new Error(`GET /stream answered ${head.slice(0, end)}`);
          }
          // A version without gzip (--baseline) sends plain text: counted and parsed as such.
          if (parsed) startParsing(/content-encoding: gzip/i.test(head.slice(0, end)));
          at = n - (head.length - end - 4);
          inHead = false;
        }
        while (at < n) {
          if (skipCrlf > 0) {
            const k = Math.min(skipCrlf, n - at);
            skipCrlf -= k;
            at += k;
          } else if (left > 0) {
            const k = Math.min(left, n - at);
            body(buf.subarray(at, at + k));
            left -= k;
            at += k;
            if (left === 0) skipCrlf = 2;
          } else {
            const nl = buf.indexOf(10, at);
            const stop = nl < 0 ? n : nl + 1;
            sizeLine += new TextDecoder().decode(buf.subarray(at, stop));
            at = stop;
            if (nl >= 0) {
              left = parseInt(sizeLine, 16);
              sizeLine = "";
              if (left === 0) return; // the last chunk
            }
          }
        }
      }
    } catch {
      // closed at the end of the round
    }
  })();
  sub.close = async () => {
    try {
      conn.close();
    } catch {
      // already closed
    }
    await read;
    await feed?.close().catch(() => {});
    await parse;
  };
  return sub;
}

async function subscribeFetch(url: string, parsed: boolean): Promise<Subscriber> {
  const res = await fetch(`${url}/stream`);
  if (!res.ok || !res.body) throw new Error(`GET /stream answered ${res.status}`);
  const [counted, forParse] = parsed ? res.body.tee() : [res.body, undefined];
  const counter = counted.getReader();
  const parser = forParse?.pipeThrough(new TextDecoderStream()).pipeThrough(
    new ServerSentEventParserStream(),
  ).getReader();
  const sub: Subscriber = { bytes: 0, seqs: parsed ? [] : undefined, close: async () => {} };
  const count = (async () => {
    try {
      while (true) {
        const { value, done } = await counter.read();
        if (done) break;
        sub.bytes += value.byteLength;
      }
    } catch {
      // cancelled at the end, or dropped by the server (seen as missing bytes)
    }
  })();
  const parse = (async () => {
    if (!parser) return;
    try {
      while (true) {
        const { value: m, done } = await parser.read();
        if (done) break;
        if (m.event === "telemetry") sub.seqs!.push(Number(m.id.slice(m.id.lastIndexOf(":") + 1)));
      }
    } catch {
      // cancelled
    }
  })();
  sub.close = async () => {
    await Promise.all([counter.cancel().catch(() => {}), parser?.cancel().catch(() => {})]);
    await Promise.all([count, parse]);
  };
  return sub;
}

async function siteLineCount(siteDir: string): Promise<number> {
  let n = 0;
  for await (const e of Deno.readDir(siteDir)) {
    if (!/^site_\d{8}\.ndjson$/.test(e.name)) continue;
    const text = await Deno.readTextFile(join(siteDir, e.name));
    n += text.split("\n").length - 1;
  }
  return n;
}

interface StreamSample {
  /** Whether the `--baseline` checkout served it. */
  baseline: boolean;
  subscribers: number;
  rate: number;
  /** CPU time of the server process per acknowledged event, in µs (user + system). */
  serverUs: number;
  /** The user-space part of it: the service's own work, without the kernel's TCP. */
  serverUserUs: number;
  /** CPU time of this process per event: the subscribers' reading, on the same cores. */
  readersUs: number;
  verified: string;
}

/** User and system CPU time of a process so far, in µs (from /proc, Linux). */
function cpuUs(pid: number): { user: number; total: number } {
  const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const user = Number(fields[11]) * 1e4; // clock ticks of 10 ms
  return { user, total: user + Number(fields[12]) * 1e4 };
}

async function streamRound(subscribers: number, root?: string): Promise<StreamSample> {
  const run = await start(root);
  const subs: Subscriber[] = [];
  try {
    for (let i = 0; i < subscribers; i++) subs.push(await subscribe(run.url, i === 0));
    const cpuBefore = cpuUs(run.child.pid);
    const selfBefore = cpuUs(Deno.pid);
    const { rate, errors } = await wrk(run.url);
    const cpuAfter = cpuUs(run.child.pid);
    const readersUs = (cpuUs(Deno.pid).total - selfBefore.total) / (rate * SECONDS);
    const serverUs = (cpuAfter.total - cpuBefore.total) / (rate * SECONDS);
    const serverUserUs = (cpuAfter.user - cpuBefore.user) / (rate * SECONDS);
    let verified = errors === 0 ? "ok" : `${errors} wrk errors`;
    if (subscribers > 0) {
      await new Promise((r) => setTimeout(r, 200));
      const stored = await siteLineCount(run.siteDir);
      const ref = subs[0]!;
      const deadline = Date.now() + 30_000;
      while (ref.seqs!.length < stored && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 50));
      }
      const seqs = ref.seqs!;
      const exact = seqs.length === stored && seqs.every((s, i) => s === i + 1);
      // Let the other readers catch up with the reference.
      while (subs.some((s) => s.bytes < ref.bytes) && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 50));
      }
      const short = subs.filter((s) => s.bytes !== ref.bytes).length;
      verified = !exact
        ? `reference saw ${seqs.length} of ${stored} events`
        : short > 0
        ? `${short} of ${subscribers} subscribers short`
        : `ok: ${subscribers} x ${stored} events`;
    }
    const baseline = root !== undefined;
    return { baseline, subscribers, rate, serverUs, serverUserUs, readersUs, verified };
  } finally {
    await Promise.all(subs.map((s) => s.close()));
    await stop(run);
  }
}

/** Median wall time in ms of `fn`, over `n` runs after 3 warm-ups. */
/**
 * The event-loop time of `fn` in milliseconds, after 10 unmeasured calls: the main thread's CPU
 * time over `n` calls divided by `n` (the kernel adds it up at scheduler ticks, too coarse for
 * one call; wall time on the shared cores counts other processes' turns too), and the median
 * wall time of one call.
 */
async function timeIt(
  n: number,
  fn: () => Promise<unknown>,
): Promise<{ cpu: number; wall: number }> {
  for (let i = 0; i < 10; i++) await fn();
  const wall: number[] = [];
  const t0 = threadCpuNanos();
  for (let i = 0; i < n; i++) {
    const w0 = performance.now();
    await fn();
    wall.push(performance.now() - w0);
  }
  return { cpu: (threadCpuNanos() - t0) / 1e6 / n, wall: median(wall) };
}

function median(xs: number[]): number {
  const s = xs.toSorted((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/**
 * In-process: the handler plus reading its whole body, with 10,000 types in the snapshot; with
 * `root`, that checkout's handler and service.
 */
async function bodiesInProcess(root?: string): Promise<Bodies> {
  const { createHandler, TelemetryService } = root === undefined
    ? { createHandler: ourHandler, TelemetryService: OurService }
    : await import(pathToFileURL(join(root, "server.ts")).href) as {
      createHandler: typeof ourHandler;
      TelemetryService: typeof OurService;
    };
  const siteDir = await Deno.makeTempDir({ prefix: "bench-scale-types-" });
  try {
    await using service = await TelemetryService.open({ siteDir, timeZone: "UTC" });
    const handler = createHandler(service, { hostname: "127.0.0.1" });
    for (let i = 0; i < TYPES; i += 1000) {
      const items = [];
      for (let j = i; j < Math.min(TYPES, i + 1000); j++) {
        items.push({ type: `t${j}`, data: { ...EVENT_DATA, n: j } });
      }
      await service.record(items);
    }
    let currentBytes = 0;
    let metricsBytes = 0;
    const get = async (path: string) => {
      const res = await handler(
        new Request(`http://127.0.0.1${path}`, { headers: { host: "127.0.0.1" } }),
      );
      if (res.status !== 200) throw new Error(`GET ${path} answered ${res.status}`);
      // Read as the HTTP layer reads it: chunk by chunk, without joining them.
      let n = 0;
      for await (const chunk of res.body!) n += chunk.byteLength;
      if (path === "/current") currentBytes = n;
      else metricsBytes = n;
    };
    const current = await timeIt(40, () => get("/current"));
    const metrics = await timeIt(40, () => get("/metrics"));
    return {
      current: current.cpu,
      metrics: metrics.cpu,
      currentWall: current.wall,
      metricsWall: metrics.wall,
      bytes: `${(currentBytes / 1e6).toFixed(2)} MB / ${(metricsBytes / 1e6).toFixed(2)} MB`,
    };
  } finally {
    await Deno.remove(siteDir, { recursive: true });
  }
}

/** One `POST /event` round of part 2: the rate, and the server's CPU per event (µs). */
interface TypesSample {
  rate: number;
  cpuUs: number;
}

/**
 * `POST /event` rate with one type, and cycling over TYPES types already in the snapshot; with
 * `root`, of that checkout's service.
 */
async function typesRound(types: number, root?: string): Promise<TypesSample> {
  const run = await start(root);
  try {
    if (types > 0) {
      for (let i = 0; i < types; i += 1000) {
        const lines = [];
        for (let j = i; j < Math.min(types, i + 1000); j++) {
          lines.push(JSON.stringify({ type: `t${j}`, data: EVENT_DATA }));
        }
        const res = await fetch(`${run.url}/events`, {
          method: "POST",
          headers: { "content-type": "application/x-ndjson" },
          body: lines.join("\n") + "\n",
        });
        await res.body?.cancel();
        if (!res.ok) throw new Error(`POST /events answered ${res.status}`);
      }
    }
    // One type goes through the same Lua request function as 10,000 (type "t0"): wrk builds each
    // request in Lua then, on the same two cores, and a fixed body would flatter the one-type rate.
    const cpu0 = await cpuSeconds(run.child.pid);
    const { rate, requests, errors } = await wrk(run.url, Math.max(types, 1));
    const cpuUs = (await cpuSeconds(run.child.pid) - cpu0) / requests * 1e6;
    if (errors > 0) throw new Error(`wrk saw ${errors} errors`);
    return { rate, cpuUs };
  } finally {
    await stop(run);
  }
}

/** Each round's rate and CPU per event. */
function rounds(samples: TypesSample[]): string {
  return samples.map((t) => `${fmt(t.rate)} (${t.cpuUs.toFixed(1)} µs)`).join(", ");
}

function fmt(n: number): string {
  return Math.round(n).toLocaleString("en-US");
}

async function main() {
  if (PIN) {
    // Every thread of this process, and so the `wrk` it starts, on CPU 1.
    const out = await new Deno.Command("taskset", { args: ["-a", "-p", "-c", "1", `${Deno.pid}`] })
      .output();
    if (!out.success) throw new Error("--pin needs taskset (util-linux) and two CPUs");
  }
  const commit = new TextDecoder().decode(
    (await new Deno.Command("git", { args: ["-C", ROOT, "rev-parse", "--short", "HEAD"] })
      .output()).stdout,
  ).trim();
  console.log(
    `bench/scale.ts at ${commit}: ${ROUNDS} rounds x ${SECONDS} s, wrk -t2 -c16, ${SUBSCRIBERS} ${READERS} subscribers, ${TYPES} types${
      PIN ? ", server pinned to CPU 0, subscribers and wrk to CPU 1" : ""
    }`,
  );
  const streams: StreamSample[] = [];
  const oneType: TypesSample[] = [];
  const manyTypes: TypesSample[] = [];
  const baseOneType: TypesSample[] = [];
  const baseManyTypes: TypesSample[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    if (ONLY !== "types") {
      streams.push(await streamRound(0));
      streams.push(await streamRound(SUBSCRIBERS));
      if (BASELINE) {
        streams.push(await streamRound(0, BASELINE));
        streams.push(await streamRound(SUBSCRIBERS, BASELINE));
      }
    }
    if (ONLY !== "viewers") {
      oneType.push(await typesRound(0));
      manyTypes.push(await typesRound(TYPES));
      if (BASELINE) {
        baseOneType.push(await typesRound(0, BASELINE));
        baseManyTypes.push(await typesRound(TYPES, BASELINE));
      }
    }
  }
  if (ONLY === "viewers") {
    printViewers(streams);
    return;
  }
  // Each body several times, alternating between the checkouts: the median of each.
  const bodyRuns: Bodies[] = [];
  const baseBodyRuns: Bodies[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    bodyRuns.push(await bodiesInProcess());
    if (BASELINE) baseBodyRuns.push(await bodiesInProcess(BASELINE));
  }
  const bodies = medianBodies(bodyRuns);
  if (ONLY !== "types") printViewers(streams);
  else {console.log(
      "\n| measurement | value | ratio | target | check |\n| --- | ---: | ---: | --- | --- |",
    );}
  printTypes(oneType, manyTypes, bodies);
  if (BASELINE) {
    const base = medianBodies(baseBodyRuns);
    const one = median(baseOneType.map((t) => t.rate));
    const all = median(baseManyTypes.map((t) => t.rate));
    const oneUs = median(baseOneType.map((t) => t.cpuUs));
    const allUs = median(baseManyTypes.map((t) => t.cpuUs));
    console.log(
      `| baseline: POST /event, 1 / ${fmt(TYPES)} types (events/s) | ${fmt(one)} / ${fmt(all)} | ${
        (all / one).toFixed(2)
      } | | |`,
    );
    console.log(
      `| baseline: server CPU per event, 1 / ${fmt(TYPES)} types (µs) | ${oneUs.toFixed(1)} / ${
        allUs.toFixed(1)
      } | ${(oneUs / allUs).toFixed(2)} | | |`,
    );
    console.log(
      `| baseline: GET /current, GET /metrics, ${fmt(TYPES)} types (event-loop CPU ms; wall) | ${
        base.current.toFixed(2)
      } / ${base.metrics.toFixed(2)}; ${base.currentWall.toFixed(2)} / ${
        base.metricsWall.toFixed(2)
      } | | | |`,
    );
  }
  console.log();
  console.log(
    "Rounds: " +
      streams.map((s) => `${s.baseline ? "baseline " : ""}${s.subscribers} subs ${fmt(s.rate)}`)
        .join(", ") +
      `; 1 type ${rounds(oneType)}; ${TYPES} types ${rounds(manyTypes)}` +
      (BASELINE
        ? `; baseline 1 type ${rounds(baseOneType)}; ${TYPES} types ${rounds(baseManyTypes)}`
        : "") +
      `; GET /current ms ${bodyRuns.map((b) => b.current.toFixed(2)).join(", ")}` +
      (BASELINE ? `; baseline ${baseBodyRuns.map((b) => b.current.toFixed(2)).join(", ")}` : ""),
  );
}

/** What {@linkcode bodiesInProcess} measured. */
interface Bodies {
  /** Main-thread CPU time, ms. */
  current: number;
  metrics: number;
  /** Wall time, ms: the same, plus whatever else held the shared cores meanwhile. */
  currentWall: number;
  metricsWall: number;
  bytes: string;
}

function medianBodies(runs: Bodies[]): Bodies {
  return {
    current: median(runs.map((b) => b.current)),
    metrics: median(runs.map((b) => b.metrics)),
    currentWall: median(runs.map((b) => b.currentWall)),
    metricsWall: median(runs.map((b) => b.metricsWall)),
    bytes: runs[0]!.bytes,
  };
}

/** Part 1's rows. */
function printViewers(streams: StreamSample[]): void {
  const ours = streams.filter((s) => !s.baseline);
  const none = median(ours.filter((s) => s.subscribers === 0).map((s) => s.rate));
  const many = median(ours.filter((s) => s.subscribers > 0).map((s) => s.rate));
  const noneUs = median(ours.filter((s) => s.subscribers === 0).map((s) => s.serverUs));
  const manyUs = median(ours.filter((s) => s.subscribers > 0).map((s) => s.serverUs));
  const noneUser = median(ours.filter((s) => s.subscribers === 0).map((s) => s.serverUserUs));
  const manyUser = median(ours.filter((s) => s.subscribers > 0).map((s) => s.serverUserUs));
  console.log();
  console.log("| measurement | value | ratio | target | check |");
  console.log("| --- | ---: | ---: | --- | --- |");
  console.log(`| POST /event, 0 subscribers (events/s) | ${fmt(none)} | 1.00 | | |`);
  console.log(
    `| POST /event, ${SUBSCRIBERS} subscribers (events/s) | ${fmt(many)} | ${
      (many / none).toFixed(2)
    } | >= 0.50 | ${ours.filter((s) => s.subscribers > 0).map((s) => s.verified).join("; ")} |`,
  );
  console.log(
    `| server CPU per event, 0 subscribers (µs) | ${noneUs.toFixed(1)} | 1.00 | | |`,
  );
  console.log(
    `| server CPU per event, ${SUBSCRIBERS} subscribers (µs) | ${manyUs.toFixed(1)} | ${
      (manyUs / noneUs).toFixed(2)
    } | <= 2.00 | |`,
  );
  console.log(
    `| server user-space CPU per event, 0 / ${SUBSCRIBERS} subscribers (µs) | ${
      noneUser.toFixed(1)
    } / ${manyUser.toFixed(1)} | ${(manyUser / noneUser).toFixed(2)} | | |`,
  );
  const manyReaders = median(ours.filter((s) => s.subscribers > 0).map((s) => s.readersUs));
  console.log(
    `| the ${SUBSCRIBERS} subscribers' own CPU per event, same cores (µs) | ${
      manyReaders.toFixed(1)
    } | | | |`,
  );
  if (BASELINE) {
    const base = streams.filter((s) => s.baseline);
    const at = (n: number, key: "rate" | "serverUs" | "readersUs") =>
      median(base.filter((s) => (s.subscribers > 0) === (n > 0)).map((s) => s[key]));
    console.log(
      `| baseline: POST /event, 0 / ${SUBSCRIBERS} subscribers (events/s) | ${
        fmt(at(0, "rate"))
      } / ${fmt(at(1, "rate"))} | ${(at(1, "rate") / at(0, "rate")).toFixed(2)} | | ${
        base.filter((s) => s.subscribers > 0).map((s) => s.verified).join("; ")
      } |`,
    );
    console.log(
      `| baseline: server CPU per event, 0 / ${SUBSCRIBERS} subscribers (µs) | ${
        at(0, "serverUs").toFixed(1)
      } / ${at(1, "serverUs").toFixed(1)} | ${
        (at(1, "serverUs") / at(0, "serverUs")).toFixed(2)
      } | | |`,
    );
    console.log(
      `| baseline: the subscribers' own CPU per event (µs) | ${
        at(1, "readersUs").toFixed(1)
      } | | | |`,
    );
  }
}

/** Part 2's rows. */
function printTypes(oneType: TypesSample[], manyTypes: TypesSample[], bodies: Bodies): void {
  const one = median(oneType.map((t) => t.rate));
  const all = median(manyTypes.map((t) => t.rate));
  const oneUs = median(oneType.map((t) => t.cpuUs));
  const allUs = median(manyTypes.map((t) => t.cpuUs));
  console.log(`| POST /event, 1 type (events/s) | ${fmt(one)} | 1.00 | | |`);
  console.log(
    `| POST /event, cycling ${fmt(TYPES)} types (events/s) | ${fmt(all)} | ${
      (all / one).toFixed(2)
    } | >= 0.90 | |`,
  );
  // The rate on shared cores moves with the other processes' load; the server's CPU per event
  // does less: its inverse ratio is the rate a server with a core of its own would reach.
  console.log(
    `| server CPU per event, 1 / ${fmt(TYPES)} types (µs) | ${oneUs.toFixed(1)} / ${
      allUs.toFixed(1)
    } | ${(oneUs / allUs).toFixed(2)} | >= 0.90 | |`,
  );
  console.log(
    `| GET /current, ${fmt(TYPES)} types (event-loop CPU ms; wall) | ${
      bodies.current.toFixed(2)
    }; ${bodies.currentWall.toFixed(2)} | | < 2 | body ${bodies.bytes.split(" / ")[0]} |`,
  );
  console.log(
    `| GET /metrics, ${fmt(TYPES)} types (event-loop CPU ms; wall) | ${
      bodies.metrics.toFixed(2)
    }; ${bodies.metricsWall.toFixed(2)} | | < 2 | body ${bodies.bytes.split(" / ")[1]} |`,
  );
}

if (import.meta.main) await main();
