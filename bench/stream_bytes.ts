/**
 * Bytes per event a `GET /stream` viewer is sent, plain and gzip (`deno task bench:stream-bytes`).
 *
 * Real envelope lines come from a service in a temp directory (seeded readings of three types:
 * weather, environment, status; or one repeated reading, as `bench/scale.ts` posts), are encoded
 * as the hub encodes them, and are cut into fan-out batches of 1 to 1,000 events. Each batch is
 * compressed as the hub compresses it (one `deflatePiece` per batch, shared by every gzip viewer).
 * Batches hold one event when events come slower than one per flush interval (50 ms), so a few
 * events per second gain little; under load a batch is every event of 50 ms.
 *
 * Usage: deno run -A bench/stream_bytes.ts [--events 6000]
 * @module
 */

// deno-lint-ignore-file no-console
import { Buffer } from "node:buffer";
import { parseArgs } from "node:util";
import { TelemetryService } from "../core/service.ts";
import { encodeServerSentEvent } from "../wire/sse.ts";
import { deflatePiece } from "../http/gzip_live.ts";

const { values: flags } = parseArgs({
  args: Deno.args.filter((a) => a !== "--"),
  options: { events: { type: "string", default: "6000" } },
  strict: true,
});
const EVENTS = Number(flags.events);

/** mulberry32: the same readings on every run. */
function rng(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    let t = (state = (state + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

type Item = { type: string; data: Record<string, unknown> };

function varied(random: () => number, i: number): Item {
  const r = (scale: number, digits: number) => Number((random() * scale).toFixed(digits));
  switch (i % 3) {
    case 0:
      return {
        type: "weather",
        data: { wind_mps: r(12, 1), temp_c: r(20, 2) - 5, humidity: Math.round(r(100, 0)) },
      };
    case 1:
      return {
        type: "environment",
        data: { dome_temp_c: r(10, 2), mirror_temp_c: r(10, 2), dewpoint_c: r(5, 2) - 3 },
      };
    default:
      return {
        type: "status",
        data: { dome: "open", tracking: true, filter: "R", ra_deg: r(360, 5), dec_deg: r(90, 5) },
      };
  }
}

const repeated = (): Item => ({
  type: "weather",
  data: { wind_mps: 2.1, temp_c: -3.5, humidity: 41, sky: "clear" },
});

/** The SSE messages of `EVENTS` events, as the hub encodes them. */
async function messages(make: (random: () => number, i: number) => Item): Promise<Uint8Array[]> {
  const siteDir = await Deno.makeTempDir({ prefix: "bench-stream-bytes-" });
  try {
    await using service = await TelemetryService.open({ siteDir, timeZone: "UTC" });
    const out: Uint8Array[] = [];
    service.subscribe((m) => {
      if (m.kind !== "telemetry") return;
      const e = m.event;
      out.push(encodeServerSentEvent({ event: "telemetry", id: `site:${e.seq}`, data: e.line }));
    });
    const random = rng(2026_11_25);
    for (let i = 0; i < EVENTS; i += 500) {
      const items = Array.from(
        { length: Math.min(500, EVENTS - i) },
        (_, j) => make(random, i + j),
      );
      await service.record(items);
    }
    return out;
  } finally {
    await Deno.remove(siteDir, { recursive: true });
  }
}

async function main() {
  console.log(`bench/stream_bytes.ts: ${EVENTS} events per kind, seeded readings`);
  console.log();
  console.log(
    "| events | batch (events) | plain B/event | gzip B/event | smaller by | ms per batch |",
  );
  console.log("| --- | ---: | ---: | ---: | ---: | ---: |");
  for (
    const [name, make] of [["three types, varied", varied], [
      "one repeated reading",
      repeated,
    ]] as const
  ) {
    const all = await messages(make);
    const plain = all.reduce((n, m) => n + m.byteLength, 0);
    for (const size of [1, 10, 50, 250, 1000]) {
      let gzip = 0;
      let batches = 0;
      const t0 = performance.now();
      for (let i = 0; i < all.length; i += size) {
        gzip += deflatePiece(Buffer.concat(all.slice(i, i + size))).byteLength;
        batches++;
      }
      const ms = (performance.now() - t0) / batches;
      console.log(
        `| ${name} | ${size} | ${(plain / all.length).toFixed(0)} | ${
          (gzip / all.length).toFixed(1)
        } | ${(plain / gzip).toFixed(1)}x | ${ms.toFixed(3)} |`,
      );
    }
  }
}

if (import.meta.main) await main();
