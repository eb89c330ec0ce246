/**
 * Shared test helpers: real temp directories and real servers on 127.0.0.1 port 0.
 * @module
 */

import assert from "node:assert/strict";
import dgram from "node:dgram";
import { join } from "node:path";
import {
  permissionFlags,
  type ServerHandle,
  type ServerOptions,
  type ServiceOptions,
  startServer,
  TelemetryService,
  toProblem,
} from "../../server.ts";

/** Path of the command-line entry point, for subprocess tests. */
export const CLI = new URL("../../cli.ts", import.meta.url).pathname;

/** The lowest port {@linkcode freePort} picks; below it lie the usual fixed ports of services. */
const FREE_PORTS_FROM = 10_000;

/**
 * The first port of the kernel's ephemeral range (port-0 binds and outgoing connections take
 * theirs from it), or `undefined` where it cannot be read or leaves no room below.
 */
function ephemeralRangeStart(): number | undefined {
  try {
    const text = Deno.readTextFileSync("/proc/sys/net/ipv4/ip_local_port_range");
    const low = Number(text.trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > FREE_PORTS_FROM + 1000 ? low : undefined;
  } catch {
    return undefined;
  }
}

const EPHEMERAL_FROM = ephemeralRangeStart();

/**
 * The ports at or above {@linkcode FREE_PORTS_FROM} that `fetch` refuses to connect to (the
 * Fetch standard's "bad port" list): a test server there could not be reached by `fetch`.
 */
const FETCH_BAD_PORTS: ReadonlySet<number> = new Set([10080]);

/** A random port below the kernel's ephemeral range, or `undefined` where that range is unknown. */
function belowEphemeral(): number | undefined {
  if (EPHEMERAL_FROM === undefined) return undefined;
  for (;;) {
    const port = FREE_PORTS_FROM + Math.floor(Math.random() * (EPHEMERAL_FROM - FREE_PORTS_FROM));
    if (!FETCH_BAD_PORTS.has(port)) return port;
  }
}

/** How many random ports {@linkcode freePort} and {@linkcode freeUdpPort} try. */
const FREE_PORT_DRAWS = 1000;

/**
 * A TCP port free on 127.0.0.1 for a child process to bind a moment later (subprocess servers).
 *
 * Picked at random below the kernel's ephemeral range, not with port 0: a port-0 port is free
 * again once the check closes it, and until the child binds it, any port-0 bind or outgoing
 * connection on this machine (another test, another copy of the suite beside this one) may take
 * it. Below the range only another explicit pick can, one in about 20,000; the shared starters
 * (`ServerProcess`, `PostgresServer`) still try another port when they lose that race.
 */
export function freePort(): number {
  for (let draw = 0; draw < FREE_PORT_DRAWS; draw++) {
    const port = belowEphemeral() ?? 0;
    try {
      const listener = Deno.listen({ hostname: "127.0.0.1", port });
      const taken = (listener.addr as Deno.NetAddr).port;
      listener.close();
      return taken;
    } catch (err) {
      if (!(err instanceof Deno.errors.AddrInUse)) throw err;
    }
  }
  throw new Error(`no free TCP port on 127.0.0.1 between ${FREE_PORTS_FROM} and ${EPHEMERAL_FROM}`);
}

/** The UDP twin of {@linkcode freePort}, for a child's datagram socket (Alpaca discovery). */
export async function freeUdpPort(): Promise<number> {
  for (let draw = 0; draw < FREE_PORT_DRAWS; draw++) {
    const socket = dgram.createSocket("udp4");
    const bound = await new Promise<boolean>((resolve) => {
      socket.once("error", () => resolve(false));
      socket.bind(belowEphemeral() ?? 0, "127.0.0.1", () => resolve(true));
    });
    const port = bound ? socket.address().port : 0;
    await new Promise<void>((resolve) => socket.close(() => resolve()));
    if (bound) return port;
  }
  throw new Error(`no free UDP port on 127.0.0.1 between ${FREE_PORTS_FROM} and ${EPHEMERAL_FROM}`);
}

/**
 * Whether the process `pid` itself holds a listening TCP socket on `port` (Linux: the socket's
 * inode in /proc/net/tcp and tcp6 among the process's descriptors). A child that lost its port to
 * another program never does, though that program answers on the port. Elsewhere, whether
 * anything accepts on 127.0.0.1:`port`.
 */
export async function listensOn(pid: number, port: number): Promise<boolean> {
  const inodes = new Set<string>();
  let tables = 0;
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text: string;
    try {
      text = await Deno.readTextFile(table);
    } catch {
      continue;
    }
    tables++;
    // "sl local_address rem_address st ... inode": the address is hex "ADDR:PORT", 0A is LISTEN.
    for (const line of text.split("\n").slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f[3] === "0A" && parseInt(f[1]?.split(":")[1] ?? "", 16) === port) inodes.add(f[9]!);
    }
  }
  if (tables === 0) return await accepts(port);
  if (inodes.size === 0) return false;
  try {
    for await (const fd of Deno.readDir(`/proc/${pid}/fd`)) {
      const link = await Deno.readLink(`/proc/${pid}/fd/${fd.name}`).catch(() => "");
      const inode = /^socket:\[(\d+)\]$/.exec(link)?.[1];
      if (inode !== undefined && inodes.has(inode)) return true;
    }
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err; // the process is gone
  }
  return false;
}

/**
 * The module specifiers of a file's graph as `deno info --json` lists them: what running that
 * file loads (the graph tests of the collector and the publisher).
 *
 * @param entry A path from the checkout's root, such as `cli.ts`.
 * @returns The specifiers (file URLs and `npm:` ones).
 */
export async function moduleGraph(entry: string): Promise<string[]> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["info", "--json", new URL(`../../${entry}`, import.meta.url).pathname],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  const info = JSON.parse(new TextDecoder().decode(out.stdout));
  return info.modules.map((m: { specifier: string }) => m.specifier);
}

/** Whether anything accepts a connection on 127.0.0.1:`port` now. */
async function accepts(port: number): Promise<boolean> {
  try {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port });
    conn.close();
    return true;
  } catch {
    return false;
  }
}

/**
 * The `deno` arguments that run `cli.ts telemetry run` on 127.0.0.1 in UTC, by default under the
 * scoped permissions of docs/cli.md.
 */
export function cliRunArgs(
  siteDir: string,
  port: number,
  extra: readonly string[] = [],
  flags: readonly string[] = permissionFlags({ siteDir, host: "127.0.0.1", port }),
): string[] {
  return [
    "run",
    "--no-prompt",
    ...flags,
    CLI,
    "telemetry",
    "run",
    "--site-dir",
    siteDir,
    "--host",
    "127.0.0.1",
    "--port",
    String(port),
    "--tz",
    "UTC",
    ...extra,
  ];
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Polls `check` every 50 ms until it holds; throws naming `what` after `ms`. */
export async function waitUntil(
  check: () => boolean | Promise<boolean>,
  ms: number,
  what: string,
): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A temporary directory removed when disposed. */
export interface TempDir extends AsyncDisposable {
  path: string;
}

/** Creates a real temporary directory; `await using` removes it afterwards. */
export async function tempDir(prefix = "obs-telemetry-test-"): Promise<TempDir> {
  const path = await Deno.makeTempDir({ prefix });
  return {
    path,
    async [Symbol.asyncDispose]() {
      await Deno.remove(path, { recursive: true }).catch(() => {});
    },
  };
}

/** Starts a real server on 127.0.0.1 with a free port, in UTC unless told otherwise. */
export function testServer(
  options: Partial<ServerOptions> & { siteDir: string },
): Promise<ServerHandle> {
  return startServer({ hostname: "127.0.0.1", port: 0, timeZone: "UTC", ...options });
}

/** POSTs JSON and returns status and parsed body. */
export async function postJson(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: unknown; headers: Headers }> {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined, headers: res.headers };
}

/** GETs a path and returns status and parsed body. */
export async function getJson(
  url: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: unknown; headers: Headers }> {
  const res = await fetch(url, { headers });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined, headers: res.headers };
}

/** Reads an NDJSON file as its lines (without the final empty string); [] if missing. */
export async function readLines(path: string): Promise<string[]> {
  try {
    const text = await Deno.readTextFile(path);
    return text === "" ? [] : text.replace(/\n$/, "").split("\n");
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return [];
    throw err;
  }
}

/** The site files of a directory, sorted by name. */
export async function siteFiles(dir: string): Promise<string[]> {
  const names: string[] = [];
  for await (const e of Deno.readDir(dir)) {
    if (/^site_\d{8}\.ndjson$/.test(e.name)) names.push(e.name);
  }
  return names.sort();
}

/** All lines of all site files of a directory, in file order. */
export async function readSiteLines(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const name of await siteFiles(dir)) out.push(...await readLines(join(dir, name)));
  return out;
}

/** The `data` of the stored site events of one type, in file order (such as audit events). */
export async function siteEventData(dir: string, type: string): Promise<Record<string, unknown>[]> {
  return (await readSiteLines(dir)).map((line) => JSON.parse(line)).filter((e) => e.type === type)
    .map((e) => e.data);
}

/** A SafetyEvent as a client sends it (no `EventTimeUtc`: the service stamps it). */
export function safetyEvent(
  id: string,
  description = "on battery",
): {
  Source: string;
  Name: string;
  Id: string;
  Type: string;
  Trigger: string;
  Description: string;
} {
  return {
    Source: "UPS",
    Name: "mains",
    Id: id,
    Type: "Power",
    Trigger: "Offline",
    Description: description,
  };
}

/** A parsed raw HTTP/1.1 response. */
export interface RawResponse {
  status: number;
  headers: Headers;
  body: string;
}

/**
 * Sends raw bytes over a real TCP connection, optionally half-closes it, and reads the answer
 * until the server closes or `timeoutMs` passes. For requests `fetch` refuses to send.
 * Resolves `status: 0` when the server closed without answering.
 */
export async function rawHttp(
  port: number,
  request: Uint8Array | string,
  options: { halfClose?: boolean; timeoutMs?: number } = {},
): Promise<RawResponse> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  const chunks: Uint8Array[] = [];
  const timer = setTimeout(() => conn.close(), options.timeoutMs ?? 5000);
  try {
    const bytes = typeof request === "string" ? encoder.encode(request) : request;
    for (let off = 0; off < bytes.length;) off += await conn.write(bytes.subarray(off));
    if (options.halfClose) await conn.closeWrite();
    const buf = new Uint8Array(16 * 1024);
    while (true) {
      const n = await conn.read(buf);
      if (n === null) break;
      chunks.push(buf.slice(0, n));
    }
  } catch (err) {
    // The timer closed the connection: treat what arrived as the answer.
    if (!(err instanceof Deno.errors.BadResource || err instanceof Deno.errors.Interrupted)) {
      throw err;
    }
  } finally {
    clearTimeout(timer);
    closeQuietly(conn);
  }
  const text = decoder.decode(await new Blob(chunks as BlobPart[]).bytes());
  const split = text.indexOf("\r\n\r\n");
  if (split < 0) return { status: 0, headers: new Headers(), body: text };
  const [statusLine, ...headerLines] = text.slice(0, split).split("\r\n");
  const headers = new Headers();
  for (const line of headerLines) {
    const colon = line.indexOf(":");
    headers.append(line.slice(0, colon).trim(), line.slice(colon + 1).trim());
  }
  return { status: Number(statusLine!.split(" ")[1]), headers, body: text.slice(split + 4) };
}

/** What {@linkcode slowBody} saw. */
export interface SlowBodyResult {
  /** The answer's status, 0 when none came. */
  status: number;
  /** Everything that came back. */
  text: string;
  /** Milliseconds from the head to the end of the answer's head, if one came. */
  answeredMs: number | undefined;
  /** Milliseconds from the head until the server closed the connection, if it did. */
  closedMs: number | undefined;
}

/**
 * Sends a request head, then its body one byte every `everyMs` (a slow sender), and reads what
 * comes back until the server closes the connection (or, with `untilAnswered`, until a whole
 * answer came) or `limitMs` passes.
 */
export async function slowBody(
  port: number,
  head: string,
  options: { everyMs: number; limitMs: number; byte?: string; untilAnswered?: boolean },
): Promise<SlowBodyResult> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  const t0 = performance.now();
  let text = "";
  let answeredMs: number | undefined;
  let closedMs: number | undefined;
  const byte = encoder.encode(options.byte ?? " ");
  const drip = setInterval(
    () => conn.write(byte).catch(() => clearInterval(drip)),
    options.everyMs,
  );
  const limit = setTimeout(() => closeQuietly(conn), options.limitMs);
  try {
    await conn.write(encoder.encode(head));
    const buf = new Uint8Array(16 * 1024);
    while (true) {
      const n = await conn.read(buf);
      if (n === null) {
        closedMs = performance.now() - t0;
        break;
      }
      text += decoder.decode(buf.subarray(0, n));
      const split = text.indexOf("\r\n\r\n");
      if (split < 0) continue;
      answeredMs ??= performance.now() - t0;
      const length = Number(/content-length: *(\d+)/i.exec(text.slice(0, split))?.[1] ?? 0);
      if (options.untilAnswered && encoder.encode(text.slice(split + 4)).length >= length) break;
    }
  } catch (err) {
    // Closed by the limit (still open then), or reset by the server (closed).
    if (err instanceof Deno.errors.ConnectionReset) closedMs = performance.now() - t0;
    else if (!(err instanceof Deno.errors.BadResource || err instanceof Deno.errors.Interrupted)) {
      throw err;
    }
  } finally {
    clearInterval(drip);
    clearTimeout(limit);
    closeQuietly(conn);
  }
  return { status: Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0), text, answeredMs, closedMs };
}

/** Closes a connection that the timer may already have closed. */
function closeQuietly(conn: Deno.Conn): void {
  try {
    conn.close();
  } catch (err) {
    if (!(err instanceof Deno.errors.BadResource)) throw err;
  }
}

// --- a TelemetryService without HTTP (service, runs and snapshot tests) -------------------------

/** The instant a test service's clock stands at unless the test moves it. */
export const T0: number = Date.parse("2026-05-10T13:00:00.000Z");

/** Opens a service in UTC whose clock stands still at `now.ms` unless the test moves it. */
export async function openService(
  siteDir: string,
  options: Partial<ServiceOptions> = {},
  now: { ms: number } = { ms: T0 },
): Promise<TelemetryService> {
  return await TelemetryService.open({ siteDir, timeZone: "UTC", clock: () => now.ms, ...options });
}

/**
 * Asserts a promise rejects with a domain error that the HTTP layer answers with the given status
 * and a detail matching `detail`.
 */
export async function rejectsWith(
  promise: Promise<unknown>,
  status: number,
  detail: RegExp,
): Promise<void> {
  const err = await promise.then(() => assert.fail("expected a rejection"), (e: unknown) => e);
  const answer = toProblem(err);
  assert.ok(answer, `expected a domain error, got ${err}`);
  const body = await answer.json();
  assert.equal(answer.status, status, body.detail);
  assert.match(body.detail, detail);
}

/** Records one event of `type` and answers the seq it was given. */
export async function seqOf(service: TelemetryService, type = "probe"): Promise<number> {
  const [event] = await service.record([{ type, data: {} }]);
  return event!.seq;
}

/** A written line, parsed. */
export interface Envelope {
  seq: number;
  ts: string;
  type: string;
  data: unknown;
  meta: Record<string, unknown>;
}

/** Parses a written line. */
export function parseEnvelope(line: string): Envelope {
  return JSON.parse(line);
}

/** Why promtool cannot run here, or `undefined` when it can. */
export function promtoolMissing(): string | undefined {
  try {
    const out = new Deno.Command("promtool", {
      args: ["--version"],
      stdout: "null",
      stderr: "null",
    }).outputSync();
    return out.success ? undefined : "`promtool --version` failed";
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      return "promtool is not installed (apt-get install -y prometheus)";
    }
    throw err;
  }
}

/**
 * Runs `promtool check metrics` on an exposition text.
 *
 * @param text The `/metrics` body.
 * @returns Whether promtool accepted it, and everything it printed.
 */
export async function promtoolCheck(text: string): Promise<{ ok: boolean; report: string }> {
  const child = new Deno.Command("promtool", {
    args: ["check", "metrics"],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(text));
  await writer.close();
  const { success, stdout, stderr } = await child.output();
  const report = new TextDecoder().decode(stdout) + new TextDecoder().decode(stderr);
  return { ok: success, report };
}
