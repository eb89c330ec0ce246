/**
 * What the service benchmarks share: a free loopback port, the command line that starts the
 * service as `deno task start` does (scoped permissions, the same V8 flags), and waiting for
 * `/ready`.
 *
 * @module
 */

import { join } from "node:path";
import { SERVICE_V8_FLAGS } from "../cli/spawn.ts";

/** The checkout these benchmarks belong to. */
export const ROOT: string = new URL("..", import.meta.url).pathname;

/**
 * A loopback port nothing listens on right now.
 *
 * @returns The port.
 */
export function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
  return port;
}

/**
 * The `deno` arguments that run a checkout's service on `<host>:<port>` with `siteDir`.
 *
 * @param options The checkout (default this one), the site directory, the address (default
 *   `127.0.0.1`; another one is a network bind, with `--insecure` and, as `deno task start`
 *   grants it, `127.0.0.1` too), the port, the fsync mode, and whether V8 prints a line per
 *   garbage collection on stdout (for {@linkcode GcTrace}).
 * @returns The arguments after `deno`.
 */
export function serviceArgs(
  options: {
    root?: string;
    siteDir: string;
    host?: string;
    port: number;
    fsync?: string;
    traceGc?: boolean;
  },
): string[] {
  const { root = ROOT, siteDir, host = "127.0.0.1", port, fsync = "interval" } = options;
  const network = host === "127.0.0.1" ? [] : ["--insecure"];
  return [
    "run",
    // as `deno task start` and spawnServer() run it
    ...(options.traceGc ? SERVICE_V8_FLAGS.map((f) => `${f},--trace-gc`) : SERVICE_V8_FLAGS),
    `--allow-net=${host}:${port}${network.length ? ",127.0.0.1" : ""}`,
    `--allow-read=${siteDir}`,
    `--allow-write=${siteDir}`,
    "--allow-env",
    join(root, "cli.ts"),
    "telemetry",
    "run",
    "--site-dir",
    siteDir,
    "--host",
    host,
    ...network,
    "--port",
    String(port),
    "--fsync",
    fsync,
    "--tz",
    "UTC",
  ];
}

/**
 * Polls `GET /ready` until it answers 200.
 *
 * @param url The server's base URL.
 * @param what Named in the error.
 * @param timeoutMs How long to wait.
 * @returns Milliseconds it took.
 * @throws {Error} When it does not become ready in time.
 */
export async function waitReady(url: string, what: string, timeoutMs = 15_000): Promise<number> {
  const t0 = performance.now();
  while (true) {
    try {
      const res = await fetch(`${url}/ready`);
      await res.body?.cancel();
      if (res.ok) return performance.now() - t0;
    } catch {
      await new Promise((r) => setTimeout(r, 2));
    }
    if (performance.now() - t0 > timeoutMs) throw new Error(`${what} did not become ready`);
  }
}

/**
 * A JavaScript string as a Lua string literal, for wrk scripts.
 *
 * @param s The text.
 * @returns The quoted literal.
 */
export function luaString(s: string): string {
  return `"${s.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll("\n", "\\n")}"`;
}

/** What one wrk run measured. */
export interface WrkResult {
  requests: number;
  errors: number;
  /** The errors by kind, as wrk counts them (`connect 0, read 1, ...`). */
  errorKinds?: string;
  seconds: number;
  p50Ms: number;
  p99Ms: number;
}

// Appended to every script: one machine-readable line with what wrk counted.
const WRK_DONE = `
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('\\nRESULT {"requests":%d,"errors":%d,"kinds":"connect %d, read %d, write %d, timeout %d, status %d","duration_us":%d,"p50_us":%d,"p99_us":%d}\\n',
    summary.requests, e.connect + e.read + e.write + e.timeout + e.status,
    e.connect, e.read, e.write, e.timeout, e.status, summary.duration,
    latency:percentile(50), latency:percentile(99)))
end
`;

/**
 * Runs wrk (two threads) with a Lua script against one URL and reads its counts.
 *
 * @param options The URL, the script (without a `done` function), connections and seconds, and
 *   the network namespace to run wrk in (`ip netns exec`), if not this machine's.
 * @returns Requests, errors, duration and latency percentiles.
 * @throws {Error} When wrk fails or prints no result.
 */
export async function runWrk(
  options: { url: string; script: string; connections: number; seconds: number; netns?: string },
): Promise<WrkResult> {
  const script = await Deno.makeTempFile({ suffix: ".lua" });
  await Deno.writeTextFile(script, options.script + WRK_DONE);
  const inNs = options.netns === undefined ? [] : ["netns", "exec", options.netns, "wrk"];
  const out = await new Deno.Command(inNs.length ? "ip" : "wrk", {
    args: [
      ...inNs,
      "-t2",
      `-c${options.connections}`,
      `-d${options.seconds}s`,
      "--timeout",
      "10s",
      "-s",
      script,
      options.url,
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  await Deno.remove(script);
  const text = new TextDecoder().decode(out.stdout);
  const m = /RESULT (\{.*\})/.exec(text);
  if (!m) throw new Error(`wrk failed: ${text}${new TextDecoder().decode(out.stderr)}`);
  const r = JSON.parse(m[1]!);
  return {
    requests: r.requests,
    errors: r.errors,
    errorKinds: r.kinds,
    seconds: r.duration_us / 1e6,
    p50Ms: r.p50_us / 1000,
    p99Ms: r.p99_us / 1000,
  };
}

/**
 * Reads the `--trace-gc` lines a process prints on stdout and tells how fast it allocated between
 * two marks: the heap size before each collection minus the size after the one before it, summed
 * from the first collection after one mark to the last before the other, over the time between
 * those two. Unlike CPU time, this barely moves between runs on a noisy machine.
 */
export class GcTrace {
  /** Each collection: V8's time stamp (ms) and the heap size (MB) before and after it. */
  #gcs: { ms: number; before: number; after: number }[] = [];
  /** Resolves when stdout ends. */
  readonly done: Promise<void>;

  /** @param stdout The process's stdout, which this consumes. */
  constructor(stdout: ReadableStream<Uint8Array>) {
    this.done = this.#read(stdout);
  }

  async #read(stdout: ReadableStream<Uint8Array>): Promise<void> {
    let rest = "";
    for await (const text of stdout.pipeThrough(new TextDecoderStream())) {
      const lines = (rest + text).split("\n");
      rest = lines.pop()!;
      for (const line of lines) {
        // [pid:0x...]   1234 ms: Scavenge 48.6 (59.3) -> 38.8 (56.4) MB, ...
        const m = /\s(\d+) ms: [A-Za-z -]+ ([\d.]+) \([\d.]+\) -> ([\d.]+) \(/.exec(line);
        if (m) this.#gcs.push({ ms: Number(m[1]), before: Number(m[2]), after: Number(m[3]) });
      }
    }
  }

  /** How many collections have been read so far: a mark for {@linkcode allocationRate}. */
  mark(): number {
    return this.#gcs.length;
  }

  /**
   * Megabytes allocated per second between two marks; `NaN` when fewer than three collections
   * fell in between (too few to tell).
   */
  allocationRate(from: number, to: number): number {
    if (to - from < 3) return NaN;
    let mb = 0;
    for (let i = from + 1; i < to; i++) mb += this.#gcs[i]!.before - this.#gcs[i - 1]!.after;
    return mb / ((this.#gcs[to - 1]!.ms - this.#gcs[from]!.ms) / 1000);
  }
}
