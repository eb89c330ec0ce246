/**
 * What the `GET /history` load tests and `bench/history_http.ts` share (docs/history.md): a large
 * night written as the service writes it, the latency of one `POST /event`, its p99, a child
 * process of looping history readers, and what they do to the service's latency and memory.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { spawnDeno } from "../../process/spawn.ts";
import { type SpawnedServer, spawnServer } from "../../server.ts";

/** The start of the night the helpers write: 2026-05-10 12:00 UTC (the night 20260510 in UTC). */
export const NIGHT_START: number = Date.parse("2026-05-10T12:00:00Z");

/** The range of that night, as a query of `GET /history`. */
export const NIGHT_RANGE = "since=2026-05-10T12:00:00Z&until=2026-05-11T12:00:00Z";

/** What a night is made of. */
export interface NightOptions {
  /** The types, in turn line after line. @default {["weather", "mount", "dome"]} */
  types?: readonly string[];
  /** Lines, spread evenly over the 12 hours from {@linkcode NIGHT_START}. @default {43200 a type} */
  lines?: number;
  /** Numeric fields `f0`... added to each event's data beside `wind.mps`, `temp`, `note`. */
  fields?: number;
}

/**
 * Writes `site_20260510.ndjson` into `dir` in the service's line format, seq from 1: by default
 * one event of each type every second (the types in turn, each line of a second 1/n s after the
 * one before).
 *
 * @returns The number of lines written.
 */
export async function writeNight(dir: string, options: NightOptions = {}): Promise<number> {
  const { types = ["weather", "mount", "dome"], fields = 0 } = options;
  const count = options.lines ?? 43_200 * types.length;
  const file = await Deno.open(join(dir, "site_20260510.ndjson"), { create: true, write: true });
  const encoder = new TextEncoder();
  try {
    for (let k = 0; k < count; k += 1000) {
      let text = "";
      for (let j = k; j < Math.min(count, k + 1000); j++) {
        const ts = new Date(NIGHT_START + Math.floor(j * 43_200_000 / count)).toISOString();
        let extra = "";
        for (let f = 0; f < fields; f++) extra += `,"f${f}":${(j * 7 + f * 13) % 1000}`;
        text += `{"seq":${j + 1},"ts":"${ts}","type":"${
          types[j % types.length]
        }","data":{"wind":{"mps":${(j % 97) / 7}},"temp":${
          (j % 31) - 10
        },"note":"steady breeze from the west"${extra}},"meta":{}}\n`;
      }
      const bytes = encoder.encode(text);
      for (let at = 0; at < bytes.length;) at += await file.write(bytes.subarray(at));
    }
  } finally {
    file.close();
  }
  return count;
}

/** The 99th percentile of some latencies. */
export function p99(samples: readonly number[]): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.99))]!;
}

/** Posts one small event and returns how long the answer took, in ms. */
export async function postOnce(url: string, i: number): Promise<number> {
  const t0 = performance.now();
  const res = await fetch(`${url}/event`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ type: "probe", data: { i } }),
  });
  await res.body?.cancel();
  assert.equal(res.status, 200);
  return performance.now() - t0;
}

/** Posts `count` events one after another and returns their latencies. */
export async function postMany(url: string, count: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < count; i++) out.push(await postOnce(url, i));
  return out;
}

/** What the readers got: answers per status, and bytes. */
export interface ReadersReport {
  statuses: Record<string, number>;
  bytes: number;
}

/** Looping readers in a child process (`history_readers_child.ts`). */
export interface HistoryReaders extends AsyncDisposable {
  /** Their report, once they stopped by themselves after `ms`. */
  readonly done: Promise<ReadersReport>;
}

const CHILD = new URL("./history_readers_child.ts", import.meta.url).pathname;

/**
 * Starts one looping reader per URL in another process (as browsers or scripts would be: this
 * process's event loop stays the posting one's): each asks, reads the answer to its end and
 * asks again at once, a 503 included, for `ms` milliseconds. Their process runs at the lowest
 * priority: readers are browsers and scripts on other machines, and what is measured is the
 * service, not 16 clients sharing its 2 cores.
 */
export function startReaders(urls: readonly string[], ms: number): HistoryReaders {
  const child = spawnDeno({
    args: ["run", "--allow-net=127.0.0.1", CHILD, String(ms), ...urls],
    output: "piped",
    killAfterMs: 5000,
    via: ["nice", "-n", "19"],
  });
  const done = child.process.output().then(({ code, stdout, stderr }) => {
    const text = new TextDecoder().decode(stdout);
    assert.equal(code, 0, new TextDecoder().decode(stderr));
    return JSON.parse(text) as ReadersReport;
  });
  return {
    done,
    async [Symbol.asyncDispose]() {
      await child.stop();
      await done.catch(() => {});
    },
  };
}

/**
 * Extra numeric fields per event of {@linkcode writeNight} for {@linkcode readerUrls}: enough for
 * `every=10s` to come near a request's cell budget (14 numeric fields of 3 types).
 */
export const READER_FIELDS = 12;

/**
 * `count` looping readers of the three kinds of the hardening issue, in turn: a whole night's
 * buckets near the cell budget (`every=10s`, every aggregate), `limit=1` over the whole night,
 * and the whole night as CSV.
 */
export function readerUrls(url: string, count: number): string[] {
  const kinds = [
    `${url}/history?${NIGHT_RANGE}&every=10s&agg=mean,min,max,last,count&limit=1000000`,
    `${url}/history?${NIGHT_RANGE}&limit=1`,
    `${url}/history?${NIGHT_RANGE}&format=csv&fields=wind.mps,temp,f0,f1`,
  ];
  return Array.from({ length: count }, (_, i) => kinds[i % kinds.length]!);
}

/** The service spawned as `run` over `siteDir` (UTC, a free port, its output dropped). */
export function spawnSite(siteDir: string): Promise<SpawnedServer> {
  return spawnServer({ siteDir, host: "127.0.0.1", port: 0, timeZone: "UTC", output: "null" });
}

/** The resident memory of a process, in bytes (`/proc/<pid>/status`). */
export async function rssOf(pid: number): Promise<number> {
  const status = await Deno.readTextFile(`/proc/${pid}/status`);
  const kb = /VmRSS:\s+(\d+) kB/.exec(status);
  assert.ok(kb, "no VmRSS in /proc status");
  return Number(kb[1]) * 1024;
}

/** `POST /event` latencies without readers (before, after) and while they loop (during). */
export interface LatencyUnderReaders {
  before: number[];
  during: number[];
  after: number[];
  report: ReadersReport;
}

/**
 * Posts events one after another: 300 before the readers, then as long as they loop on `urls`
 * for `ms` (from 1.5 s after their process starts, once they ask), then 300 after them.
 */
export async function latencyUnderReaders(
  url: string,
  urls: readonly string[],
  ms: number,
): Promise<LatencyUnderReaders> {
  await postMany(url, 30); // warm up
  const before = await postMany(url, 300);
  await using readers = startReaders(urls, ms);
  let done = false;
  readers.done.finally(() => done = true).catch(() => {});
  await new Promise((r) => setTimeout(r, 1500));
  const during: number[] = [];
  for (let i = 0; !done; i++) during.push(await postOnce(url, i));
  const report = await readers.done;
  return { before, during, after: await postMany(url, 300), report };
}

/** One line on what the readers did to `POST /event`: the p99s, their ratio and the bound. */
export function latencyLine(result: LatencyUnderReaders): string {
  const { before, during, after, report } = result;
  const reference = Math.max(p99(before), p99(after));
  return `answers ${JSON.stringify(report.statuses)}, ${
    (report.bytes / 1e6).toFixed(0)
  } MB read; POST /event p99 ${p99(before).toFixed(1)} ms before, ${
    p99(after).toFixed(1)
  } ms after, ${p99(during).toFixed(1)} ms during (${during.length} posts): ratio ${
    (p99(during) / reference).toFixed(2)
  }, bound 2 x ${reference.toFixed(1)} + 35 = ${(2 * reference + 35).toFixed(1)} ms`;
}

/**
 * The resident memory of the service `pid` after 100 posts to it (idle), and at most while
 * readers loop on `urls` for `ms` (sampled every 50 ms), in bytes.
 */
export async function memoryUnderReaders(
  url: string,
  pid: number,
  urls: readonly string[],
  ms: number,
): Promise<{ idle: number; peak: number; report: ReadersReport }> {
  await postMany(url, 100);
  const idle = await rssOf(pid);
  let peak = idle, sampling = true;
  const sampler = (async () => {
    while (sampling) {
      peak = Math.max(peak, await rssOf(pid));
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  let report: ReadersReport;
  try {
    await using readers = startReaders(urls, ms);
    report = await readers.done;
  } finally {
    sampling = false;
    await sampler;
  }
  return { idle, peak, report };
}
