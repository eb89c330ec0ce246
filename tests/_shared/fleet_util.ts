/**
 * Real fleet peers for the forwarding tests: a `nats-server -js` and a PostgreSQL cluster, each
 * started in its own temp directory on a free loopback port, stopped (and deleted) on dispose.
 * No mocks: when a binary is missing the test skips with the reason these helpers give.
 * @module
 */

import { join } from "node:path";
import assert from "node:assert/strict";
import { freePort, postJson, type TempDir, tempDir, waitUntil } from "./util.ts";
import { forward, type ForwardOptions, type ForwardStats } from "../../forward.ts";
import { establishSiteIdentity } from "../../store/site_identity.ts";

const PG_BIN_CANDIDATES = [
  "/usr/lib/postgresql/17/bin",
  "/usr/lib/postgresql/16/bin",
  "/usr/lib/postgresql/15/bin",
];

function runs(cmd: string, args: string[]): boolean {
  try {
    return new Deno.Command(cmd, { args, stdout: "null", stderr: "null" }).outputSync().success;
  } catch {
    return false;
  }
}

/** Why `nats-server` cannot run here, or `undefined` when it can. */
export function natsMissing(): string | undefined {
  return runs("nats-server", ["--version"])
    ? undefined
    : "nats-server is not installed (apt-get install -y nats-server)";
}

/** The directory of PostgreSQL's server binaries, if installed. */
function pgBin(): string | undefined {
  return PG_BIN_CANDIDATES.find((dir) => runs(join(dir, "pg_ctl"), ["--version"]));
}

/** Why a PostgreSQL server cannot run here, or `undefined` when it can. */
export function postgresMissing(): string | undefined {
  if (!pgBin()) return "PostgreSQL is not installed (apt-get install -y postgresql)";
  if (!runs("psql", ["--version"])) {
    return "psql is not installed (apt-get install -y postgresql-client)";
  }
  if (Deno.uid() === 0 && !runs("runuser", ["--version"])) {
    return "PostgreSQL refuses to run as root and runuser is missing (apt-get install -y util-linux)";
  }
  return undefined;
}

async function waitFor(check: () => Promise<boolean>, what: string, ms = 15_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`${what} did not come up within ${ms} ms`);
}

async function accepts(port: number): Promise<boolean> {
  try {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port });
    conn.close();
    return true;
  } catch {
    return false;
  }
}

/** A running `nats-server -js` on 127.0.0.1 with its store in a temp directory. */
export class NatsServer implements AsyncDisposable {
  readonly port: number;
  readonly dir: string;
  #child: Deno.ChildProcess | undefined;

  private constructor(dir: string, port: number) {
    this.dir = dir;
    this.port = port;
  }

  /** Starts a server on a free port with JetStream enabled. */
  /**
   * Starts a server on a free port with JetStream enabled; `nice` runs it at a lower CPU
   * priority (a benchmark's stand-in for a destination on another machine).
   */
  static async start(options: { nice?: number } = {}): Promise<NatsServer> {
    const dir = await Deno.makeTempDir({ prefix: "obs-nats-" });
    const server = new NatsServer(dir, freePort());
    server.#nice = options.nice ?? 0;
    await server.restart();
    return server;
  }

  #nice = 0;

  /** `nats://127.0.0.1:<port>`. */
  get url(): string {
    return `nats://127.0.0.1:${this.port}`;
  }

  /** Starts the server again on the same port and store (after `kill`). */
  async restart(): Promise<void> {
    const args = ["-js", "-a", "127.0.0.1", "-p", String(this.port), "-sd", join(this.dir, "js")];
    this.#child = new Deno.Command(this.#nice ? "nice" : "nats-server", {
      args: this.#nice ? ["-n", String(this.#nice), "nats-server", ...args] : args,
      stdout: "null",
      stderr: "null",
    }).spawn();
    await waitFor(() => accepts(this.port), "nats-server");
  }

  /** Kills the server (SIGKILL by default) and waits for it to exit. */
  async kill(signal: Deno.Signal = "SIGKILL"): Promise<void> {
    const child = this.#child;
    if (!child) return;
    this.#child = undefined;
    try {
      child.kill(signal);
    } catch { /* already gone */ }
    await child.status;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.kill();
    await Deno.remove(this.dir, { recursive: true }).catch(() => {});
  }
}

/** A PostgreSQL cluster in a temp directory, listening on 127.0.0.1, trust authentication. */
export class PostgresServer implements AsyncDisposable {
  readonly port: number;
  readonly dir: string;
  readonly #bin: string;
  #running = false;

  private constructor(dir: string, port: number, bin: string) {
    this.dir = dir;
    this.port = port;
    this.#bin = bin;
  }

  /** Creates the cluster (`initdb`) and starts it on a free port. */
  static async start(): Promise<PostgresServer> {
    const bin = pgBin();
    if (!bin) throw new Error(postgresMissing());
    const dir = await Deno.makeTempDir({ prefix: "obs-pg-" });
    await Deno.chmod(dir, 0o777);
    const server = new PostgresServer(dir, freePort(), bin);
    await server.#pg("initdb", ["-D", server.#data, "-A", "trust", "-U", "postgres", "-E", "UTF8"]);
    await server.restart();
    return server;
  }

  get #data(): string {
    return join(this.dir, "data");
  }

  /** `postgres://postgres@127.0.0.1:<port>/postgres`. */
  get url(): string {
    return `postgres://postgres@127.0.0.1:${this.port}/postgres`;
  }

  async #pg(tool: string, args: string[]): Promise<void> {
    const [cmd, argv] = Deno.uid() === 0
      ? ["runuser", ["-u", "postgres", "--", join(this.#bin, tool), ...args]]
      : [join(this.#bin, tool), args];
    const out = await new Deno.Command(cmd, { args: argv, stdout: "piped", stderr: "piped" })
      .output();
    if (!out.success) {
      throw new Error(`${tool} failed: ${new TextDecoder().decode(out.stderr).trim()}`);
    }
  }

  /** Starts the server (again) on the same port and data directory. */
  async restart(): Promise<void> {
    // fsync=off is safe for the crashes these tests make (a killed process, not a lost
    // machine): the WAL is written before each commit answers, only not flushed to the disk.
    const options = `-p ${this.port} -k ${this.dir} -c listen_addresses=127.0.0.1 -c fsync=off`;
    await this.#pg("pg_ctl", [
      "-D",
      this.#data,
      "-o",
      options,
      "-l",
      join(this.dir, "log"),
      "-w",
      "start",
    ]);
    this.#running = true;
    await waitFor(() => accepts(this.port), "postgres");
  }

  /** Stops the server: `immediate` is the crash-like stop (no checkpoint), `fast` a clean one. */
  async stop(mode: "fast" | "immediate" = "fast"): Promise<void> {
    if (!this.#running) return;
    this.#running = false;
    await this.#pg("pg_ctl", ["-D", this.#data, "-m", mode, "-w", "stop"]);
  }

  /** Runs one SQL statement with `psql` and returns its unaligned, tuples-only output. */
  async query(sql: string): Promise<string> {
    const out = await new Deno.Command("psql", {
      args: ["-h", "127.0.0.1", "-p", String(this.port), "-U", "postgres", "-At", "-c", sql],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder();
    if (!out.success) throw new Error(`psql failed: ${text.decode(out.stderr).trim()}`);
    return text.decode(out.stdout).trim();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop("immediate").catch(() => {});
    await Deno.remove(this.dir, { recursive: true }).catch(() => {});
  }
}

/** The forwarder's own program, as `spawnForwarder()` and `deno task forward` run it. */
export const FORWARD_MAIN: string = new URL("../../cli/forward_main.ts", import.meta.url).pathname;

export { waitUntil };

/**
 * Runs `forward()` until `done` holds, then stops it and returns what it did. When `done` does not
 * hold within `ms`, stops it anyway and throws naming `what`.
 */
export async function forwardUntil(
  options: Omit<ForwardOptions, "signal">,
  done: () => boolean | Promise<boolean>,
  what: string,
  ms = 15_000,
): Promise<ForwardStats> {
  const forwarding = startForwarding(options);
  try {
    await waitUntil(done, ms, what);
  } catch (err) {
    await forwarding.stop().catch(() => {});
    throw err;
  }
  return await forwarding.stop();
}

/** A forwarder running in this process until `stop()`, or the end of the scope that holds it. */
export interface RunningForwarder extends AsyncDisposable {
  /** Stops it (after the batch in hand) and returns what it did; the same on a second call. */
  stop(): Promise<ForwardStats>;
}

/** Starts `forward()` with a signal of its own; `await using` stops it at the end of the scope. */
export function startForwarding(options: Omit<ForwardOptions, "signal">): RunningForwarder {
  const stop = new AbortController();
  const running = forward({ ...options, signal: stop.signal });
  const stopped = () => {
    stop.abort();
    return running;
  };
  return { stop: stopped, [Symbol.asyncDispose]: async () => void await stopped() };
}

/** Rows of `telemetry_events` matching `where`; 0 before anything has created the table. */
export async function countRows(pg: PostgresServer, where = "true"): Promise<number> {
  return Number(
    await pg.query(`select count(*) from telemetry_events where ${where}`).catch(() => "0"),
  );
}

/** Posts `count` events of `type` (`data: {i}`, i from `from`), each answered 200. */
export async function postEvents(
  url: string,
  type: string,
  from: number,
  count: number,
): Promise<void> {
  for (let i = from; i < from + count; i++) {
    const r = await postJson(`${url}/event`, { type, data: { i } });
    assert.equal(r.status, 200);
  }
}

/**
 * Gives a site directory made by hand its `.site.json`, as the service's first start does: the
 * forwarder claims its unit for that site id and refuses a directory without one
 * (docs/fleet.md, "Units").
 */
export async function giveSiteIdentity(siteDir: string): Promise<string> {
  return (await establishSiteIdentity(siteDir, { zone: "UTC" })).site_id;
}

/** A temporary site directory with its `.site.json`, removed when disposed. */
export async function tempSite(prefix?: string): Promise<TempDir> {
  const dir = await tempDir(prefix);
  await giveSiteIdentity(dir.path);
  return dir;
}
