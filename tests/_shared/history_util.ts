/**
 * What the `GET /history` load tests and `bench/history_http.ts` share (docs/history.md): a large
 * night written as the service writes it, the latency of one `POST /event`, its p99, and a child
 * process of looping history readers.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { spawnDeno } from "../../process/spawn.ts";

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
