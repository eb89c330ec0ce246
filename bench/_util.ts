/**
 * What the service benchmarks share: a free loopback port, the command line that starts the
 * service as `deno task start` does (scoped permissions, the same V8 flags), waiting for
 * `/ready`, wrk runs, a process's CPU time, and keep-alive connections sending one request at a
 * fixed rate.
 *
 * @module
 */

import { join } from "node:path";
import { Rng } from "../tests/_shared/fault_util.ts";
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
 *   grants it, `127.0.0.1` too), the port, the fsync mode, whether V8 prints a line per garbage
 *   collection on stdout (for {@linkcode GcTrace}), and more `deno run` flags (such as
 *   `--cpu-prof --cpu-prof-dir=DIR`).
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
    denoFlags?: readonly string[];
  },
): string[] {
  const {
    root = ROOT,
    siteDir,
    host = "127.0.0.1",
    port,
    fsync = "interval",
    denoFlags = [],
  } = options;
  const network = host === "127.0.0.1" ? [] : ["--insecure"];
  return [
    "run",
    ...denoFlags,
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
 * Polls `GET /ready` (or another path) until it answers 2xx.
 *
 * @param url The server's base URL.
 * @param what Named in the error.
 * @param timeoutMs How long to wait.
 * @param path What to ask: `/ready` for the service, `/ping` for InfluxDB.
 * @returns Milliseconds it took.
 * @throws {Error} When it does not become ready in time.
 */
export async function waitReady(
  url: string,
  what: string,
  timeoutMs = 15_000,
  path = "/ready",
): Promise<number> {
  const t0 = performance.now();
  while (true) {
    try {
      const res = await fetch(`${url}${path}`);
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

/**
 * Where {@linkcode secondSlotScript}'s `request()` writes the second of its request: a batch body
 * carries it once per time, followed by the time's milliseconds.
 */
export const SECOND_SLOT = "\u00a7";

/**
 * A wrk script that posts a batch whose times wrk fills in per request, a second of their own
 * (`base + n * 8 + thread`, wrk's threads numbered from 1, at most 8), so that no request repeats
 * an earlier one's points: every {@linkcode SECOND_SLOT} of `body` becomes that second, as
 * `2026-12-07T01:02:03.` for `POST /events` (`"events"`) or as Unix seconds for line protocol
 * (`"lines"`).
 *
 * @param body The batch, with {@linkcode SECOND_SLOT} where each time's second goes.
 * @param base The first second.
 * @param kind What the body is: JSON events (sent with `Prefer: return=minimal`) or line protocol.
 * @returns The Lua script.
 */
export function secondSlotScript(body: string, base: number, kind: "events" | "lines"): string {
  // Fixed text in the odd places, the second's text in the even ones (filled per request).
  const parts = body.split(SECOND_SLOT).flatMap((text, i) => i === 0 ? [text] : ['""', text]);
  const table = parts.map((p) => p === '""' ? p : luaString(p)).join(",\n");
  const second = kind === "events"
    ? 'os.date("!%Y-%m-%dT%H:%M:%S.", sec)'
    : 'string.format("%d", sec)';
  const headers = kind === "events"
    ? `wrk.headers["Content-Type"] = "application/json"\nwrk.headers["Prefer"] = "return=minimal"`
    : `wrk.headers["Content-Type"] = "text/plain; charset=utf-8"`;
  return `wrk.method = "POST"
${headers}
local parts = {
${table}
}
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
local n = 0
function request()
  local sec = ${base} + n * 8 + tid
  n = n + 1
  local text = ${second}
  for i = 2, #parts, 2 do parts[i] = text end
  return wrk.format(nil, nil, nil, table.concat(parts))
end
`;
}

/** The six numeric fields of a weather station, the data of {@linkcode weatherReadings}. */
export const WEATHER_FIELDS: readonly string[] = [
  "temp_c",
  "humidity",
  "pressure_hpa",
  "wind_mps",
  "gust_mps",
  "sky_temp_c",
];

/**
 * `count` readings of the six {@linkcode WEATHER_FIELDS}, a seeded random walk rounded as a
 * station sends them: the same data for every benchmark that compares the service with InfluxDB.
 *
 * @param count How many readings.
 * @param seed The seed of the walk.
 * @returns One array of six numbers a reading.
 */
export function weatherReadings(count: number, seed: number): number[][] {
  const rng = new Rng(seed);
  const round = (x: number, d: number) => Math.round(x * 10 ** d) / 10 ** d;
  let temp = 8, humidity = 60, pressure = 751, wind = 4;
  const out: number[][] = [];
  for (let i = 0; i < count; i++) {
    temp += (rng.next() - 0.5) * 0.1;
    humidity = Math.min(100, Math.max(5, humidity + (rng.next() - 0.5) * 0.4));
    pressure += (rng.next() - 0.5) * 0.02;
    wind = Math.max(0, wind + (rng.next() - 0.5) * 0.6);
    out.push([
      round(temp, 2),
      round(humidity, 1),
      round(pressure, 2),
      round(wind, 1),
      round(wind + rng.next() * 5, 1),
      round(temp - 25 - rng.next() * 10, 2),
    ]);
  }
  return out;
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

/** Clock ticks per second of `/proc/<pid>/stat` on Linux. */
const CLK_TCK = 100;

/**
 * User + system CPU seconds of a process (all its threads), or of one of its threads, so far.
 *
 * @param pid The process.
 * @param tid One thread of it (`/proc/<pid>/task/<tid>/stat`); the main thread's id is `pid`.
 * @returns Seconds, in steps of 10 ms.
 */
export async function cpuSeconds(pid: number, tid?: number): Promise<number> {
  const path = tid === undefined ? `/proc/${pid}/stat` : `/proc/${pid}/task/${tid}/stat`;
  const stat = await Deno.readTextFile(path);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
}

/**
 * CPU time of a process so far, all its threads, in nanoseconds (the first field of each
 * `/proc/<pid>/task/<tid>/schedstat`): precise enough for one request of a few milliseconds,
 * where `/proc/<pid>/stat` counts 10 ms ticks. Threads that have ended are no longer counted, so
 * read it around work during which the process keeps its threads.
 *
 * @param pid The process.
 * @returns Nanoseconds on a CPU.
 */
export async function cpuNanos(pid: number): Promise<number> {
  let ns = 0;
  for await (const task of Deno.readDir(`/proc/${pid}/task`)) {
    try {
      const text = await Deno.readTextFile(`/proc/${pid}/task/${task.name}/schedstat`);
      ns += Number(text.slice(0, text.indexOf(" ")));
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) throw err; // the thread ended meanwhile
    }
  }
  return ns;
}

/**
 * CPU time of one thread so far, in nanoseconds (`/proc/<pid>/task/<tid>/schedstat`): for the
 * event-loop time of work done in this process, read on its main thread around the work. Unlike
 * wall time it does not count the moments another process held the core. The kernel adds the
 * time up at scheduler ticks and switches: read it around many calls, not one of a millisecond.
 *
 * @param pid The process (default this one).
 * @param tid The thread (default the main thread, whose id is the process's).
 * @returns Nanoseconds on a CPU.
 */
export function threadCpuNanos(pid: number = Deno.pid, tid: number = pid): number {
  const text = Deno.readTextFileSync(`/proc/${pid}/task/${tid}/schedstat`);
  return Number(text.slice(0, text.indexOf(" ")));
}

/** The one request a {@linkcode KeepAliveConnection} sends again and again. */
export interface PostRequest {
  /** The path with its query, such as `/event` or `/write?db=bench`. */
  path: string;
  /** The body. */
  body: string;
  /** Its content type. */
  contentType: string;
}

/**
 * One keep-alive connection sending the same `POST` and reading each answer (status line,
 * headers, `content-length` body) before the next: a raw-TCP load generator lighter than
 * `fetch`, for a paced load whose cost on the shared cores must stay small.
 */
export class KeepAliveConnection {
  #conn: Deno.TcpConn;
  #request: Uint8Array;
  #buf = new Uint8Array(64 * 1024);
  #have = 0;

  private constructor(conn: Deno.TcpConn, port: number, request: PostRequest) {
    this.#conn = conn;
    const body = new TextEncoder().encode(request.body);
    const head = new TextEncoder().encode(
      `POST ${request.path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n` +
        `Content-Type: ${request.contentType}\r\nContent-Length: ${body.length}\r\n\r\n`,
    );
    this.#request = new Uint8Array(head.length + body.length);
    this.#request.set(head);
    this.#request.set(body, head.length);
  }

  /**
   * Connects to `127.0.0.1:port`.
   *
   * @param port The server's port.
   * @param request What every {@linkcode post} sends.
   * @returns The open connection.
   */
  static async open(port: number, request: PostRequest): Promise<KeepAliveConnection> {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port });
    return new KeepAliveConnection(conn, port, request);
  }

  /**
   * Sends the request once and reads its whole answer.
   *
   * @returns The status code.
   * @throws {Error} When the server closes the connection.
   */
  async post(): Promise<number> {
    await this.#conn.write(this.#request);
    while (true) {
      const text = new TextDecoder().decode(this.#buf.subarray(0, this.#have));
      const head = text.indexOf("\r\n\r\n");
      if (head >= 0) {
        const length = Number(/content-length: *(\d+)/i.exec(text.slice(0, head))?.[1] ?? 0);
        const total = head + 4 + length;
        if (this.#have >= total) {
          const status = Number(text.slice(9, 12));
          this.#buf.copyWithin(0, total, this.#have);
          this.#have -= total;
          return status;
        }
      }
      if (this.#have === this.#buf.length) {
        // An answer larger than the buffer (a batch's envelopes): make room for it.
        const larger = new Uint8Array(this.#buf.length * 2);
        larger.set(this.#buf);
        this.#buf = larger;
      }
      const n = await this.#conn.read(this.#buf.subarray(this.#have));
      if (n === null) throw new Error("the server closed the connection");
      this.#have += n;
    }
  }

  /** Closes the connection. */
  close(): void {
    this.#conn.close();
  }
}

/** What {@linkcode pacedLoad} counted. */
export interface PacedResult {
  /** Requests answered inside the measured window. */
  events: number;
  /** Answers outside 2xx, lead-in included. */
  errors: number;
  /** The measured window's length. */
  seconds: number;
}

/**
 * Sends requests over `connections` at a fixed total `rate`, each connection waiting for its
 * answer before its next slot, for a lead-in and then a measured window of `seconds`.
 * `onWindow` runs when the window opens (read the server's CPU there); read it again when this
 * resolves, at the window's end.
 *
 * @param connections Open connections, shared out in turn.
 * @param options Requests per second over all, the window, the lead-in (default 1 s) and what
 *   to do as the window opens.
 * @returns The requests answered in the window, the errors and the window's length.
 */
export async function pacedLoad(
  connections: readonly KeepAliveConnection[],
  options: { rate: number; seconds: number; leadInMs?: number; onWindow?: () => Promise<void> },
): Promise<PacedResult> {
  const interval = 1000 / options.rate; // ms between requests, over all connections
  let next = performance.now();
  let errors = 0;
  let counting = false;
  let events = 0;
  const windowAt = performance.now() + (options.leadInMs ?? 1000);
  const endAt = windowAt + options.seconds * 1000;
  const worker = async (conn: KeepAliveConnection) => {
    while (true) {
      const slot = next;
      next += interval;
      const now = performance.now();
      if (slot >= endAt) return;
      if (slot > now) await new Promise((r) => setTimeout(r, slot - now));
      const status = await conn.post();
      if (status < 200 || status > 299) errors++;
      if (counting) events++;
    }
  };
  const workers = connections.map(worker);
  await new Promise((r) => setTimeout(r, windowAt - performance.now()));
  await options.onWindow?.();
  const windowStart = performance.now();
  counting = true;
  await Promise.all(workers);
  return { events, errors, seconds: (performance.now() - windowStart) / 1000 };
}

/**
 * Resident memory of a process (`/proc/<pid>/status`, Linux).
 *
 * @param pid The process.
 * @returns MiB.
 */
export async function rssMiB(pid: number): Promise<number> {
  const status = await Deno.readTextFile(`/proc/${pid}/status`);
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) / 1024;
}

/**
 * Stops a child: SIGTERM, then SIGKILL if it has not exited within 15 s.
 *
 * @param child The process.
 */
export async function stopChild(child: Deno.ChildProcess): Promise<void> {
  try {
    child.kill("SIGTERM");
  } catch {
    // already gone
  }
  const timer = setTimeout(() => {
    try {
      child.kill("SIGKILL");
    } catch {
      // gone in the meantime
    }
  }, 15_000);
  await child.status;
  clearTimeout(timer);
}

/**
 * The config `influxd config` prints (Debian's defaults) with its two addresses on the given
 * loopback ports, its directories in `dir`, and its WAL fsynced per write (`wal-fsync-delay =
 * "0s"`: nothing acknowledged before it is on disk, like the service's `--fsync always`).
 *
 * @param dir Where its meta, data and WAL directories go.
 * @param httpPort The port of its HTTP API.
 * @param rpcPort The port of its backup/restore RPC.
 * @returns The config file's text.
 * @throws {Error} When `influxd config` lacks a setting it edits (not InfluxDB 1.x).
 */
export async function influxdConfig(
  dir: string,
  httpPort: number,
  rpcPort: number,
): Promise<string> {
  const out = await new Deno.Command("influxd", {
    args: ["config"],
    stdout: "piped",
    stderr: "null",
  }).output();
  const edits: Record<string, Record<string, string>> = {
    "": { "bind-address": `127.0.0.1:${rpcPort}` },
    meta: { dir: join(dir, "meta") },
    data: { dir: join(dir, "data"), "wal-dir": join(dir, "wal"), "wal-fsync-delay": "0s" },
    http: { "bind-address": `127.0.0.1:${httpPort}` },
  };
  const done = new Set<string>();
  let section = "";
  const lines = new TextDecoder().decode(out.stdout).split("\n").map((line) => {
    const header = /^\s*(\[\[?)([\w.-]+)\]\]?\s*$/.exec(line);
    if (header) section = header[1] === "[" ? header[2]! : `[[${header[2]}]]`;
    const m = /^(\s*)([\w-]+)\s*=/.exec(line);
    const value = m ? edits[section]?.[m[2]!] : undefined;
    if (value === undefined) return line;
    done.add(`${section}.${m![2]}`);
    return `${m![1]}${m![2]} = ${JSON.stringify(value)}`;
  });
  for (const [s, keys] of Object.entries(edits)) {
    for (const key of Object.keys(keys)) {
      if (!done.has(`${s}.${key}`)) {
        throw new Error(`influxd config printed no ${key} in [${s}]: is influxd 1.x installed?`);
      }
    }
  }
  return lines.join("\n");
}

/** An `influxd` of our own, started by {@linkcode startInfluxd}. */
export interface InfluxServer extends AsyncDisposable {
  /** Its HTTP API, `http://127.0.0.1:<port>`. */
  readonly url: string;
  /** The port of its HTTP API. */
  readonly port: number;
  /** The process id of `influxd`. */
  readonly pid: number;
  /** Stops it (SIGTERM) and waits for it to exit; its directory stays. */
  stop(): Promise<void>;
}

/**
 * Why `influxd` (Debian's `influxdb`, InfluxDB 1.6) cannot run here, or `undefined` when it can.
 *
 * @returns The reason, naming the package that brings it.
 */
export function influxdMissing(): string | undefined {
  try {
    const out = new Deno.Command("influxd", { args: ["version"], stdout: "null", stderr: "null" })
      .outputSync();
    return out.success ? undefined : "influxd version failed";
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      return "influxd is not installed (apt-get install influxdb, Debian's InfluxDB 1.6)";
    }
    throw err;
  }
}

/**
 * Starts `influxd` over `dir` (its config `influxdb.conf` and its log `influxd.log` there too)
 * on free loopback ports, with authentication off, and creates `database`.
 *
 * @param dir An empty directory of its own.
 * @param database The database to create.
 * @returns The running server.
 * @throws {Error} When it does not answer `/ping` within 15 s; the error holds its log's end.
 */
export async function startInfluxd(dir: string, database: string): Promise<InfluxServer> {
  const port = freePort();
  const config = join(dir, "influxdb.conf");
  const log = join(dir, "influxd.log");
  await Deno.writeTextFile(config, await influxdConfig(dir, port, freePort()));
  // sh execs influxd (the pid is influxd's), its log (one line per request) into a file.
  const child = new Deno.Command("sh", {
    args: ["-c", 'exec influxd run -config "$0" 2>"$1"', config, log],
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
  const url = `http://127.0.0.1:${port}`;
  try {
    await waitReady(url, "influxd", 15_000, "/ping");
    await influxQuery(url, database, `CREATE DATABASE ${database}`, "POST");
  } catch (err) {
    child.kill("SIGKILL");
    await child.status;
    const tail = (await Deno.readTextFile(log).catch(() => "")).split("\n").slice(-10).join("\n");
    throw new Error(`${(err as Error).message}; its log ends:\n${tail}`);
  }
  const stop = () => stopChild(child);
  return { url, port, pid: child.pid, stop, [Symbol.asyncDispose]: stop };
}

/** InfluxDB's answer to a query (`/query`): one result per statement. */
export interface InfluxAnswer {
  results: {
    series?: {
      name: string;
      tags?: Record<string, string>;
      columns: string[];
      values: unknown[][];
    }[];
    error?: string;
  }[];
}

/**
 * The URL of an InfluxQL query.
 *
 * @param url The server's base URL.
 * @param database The database.
 * @param q The query.
 * @returns `<url>/query?db=...&q=...`.
 */
export function influxQueryUrl(url: string, database: string, q: string): string {
  return `${url}/query?${new URLSearchParams({ db: database, q })}`;
}

/**
 * Runs an InfluxQL query and answers its JSON.
 *
 * @param url The server's base URL.
 * @param database The database.
 * @param q The query.
 * @param method `GET` for reads, `POST` for `CREATE` and the like.
 * @returns The parsed answer (`{results: [{series: [...]}]}`).
 * @throws {Error} When the server answers an error or the query's result holds one.
 */
export async function influxQuery(
  url: string,
  database: string,
  q: string,
  method = "GET",
): Promise<InfluxAnswer> {
  const res = await fetch(influxQueryUrl(url, database, q), { method });
  const text = await res.text();
  if (!res.ok) throw new Error(`InfluxDB ${q}: ${res.status} ${text}`);
  const json = JSON.parse(text);
  const error = json.results?.[0]?.error;
  if (error) throw new Error(`InfluxDB ${q}: ${error}`);
  return json;
}
