/**
 * Real fleet peers for the forwarding tests: a `nats-server -js` and a PostgreSQL cluster, each
 * started in its own temp directory on a free loopback port, stopped (and deleted) on dispose.
 * No mocks: when a binary is missing the test skips with the reason these helpers give.
 * @module
 */

import { join } from "node:path";
import assert from "node:assert/strict";
import { freePort, postJson, type TempDir, tempDir, waitUntil } from "./util.ts";
import { ServerProcess } from "./server_process.ts";
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

/** A running `nats-server -js` on 127.0.0.1 with its store in a temp directory. */
export class NatsServer extends ServerProcess {
  /**
   * Starts a server on a free port with JetStream enabled; `nice` runs it at a lower CPU
   * priority (a benchmark's stand-in for a destination on another machine).
   */
  static async start(options: { nice?: number } = {}): Promise<NatsServer> {
    const dir = await Deno.makeTempDir({ prefix: "obs-nats-" });
    const nice = options.nice ?? 0;
    const server = new NatsServer("nats-server", dir, (port, dir) => {
      const args = ["-js", "-a", "127.0.0.1", "-p", String(port), "-sd", join(dir, "js")];
      return nice ? ["nice", ["-n", String(nice), "nats-server", ...args]] : ["nats-server", args];
    });
    await server.firstStart();
    return server;
  }

  /** `nats://127.0.0.1:<port>`. */
  get url(): string {
    return `nats://127.0.0.1:${this.port}`;
  }
}

/** `pg_ctl start` failed because another program holds the port. */
class PortTaken extends Error {}

/** How many ports a first start tries before it gives up. */
const PG_START_ATTEMPTS = 3;

/** A PostgreSQL cluster in a temp directory, listening on 127.0.0.1, trust authentication. */
export class PostgresServer implements AsyncDisposable {
  readonly dir: string;
  readonly #bin: string;
  #port = 0;
  #running = false;

  private constructor(dir: string, bin: string) {
    this.dir = dir;
    this.#bin = bin;
  }

  /**
   * Creates the cluster (`initdb`) and starts it on a free port. The port is picked once the
   * cluster exists, right before the server binds it; a start that finds it taken by another
   * program (another copy of the suite on this machine) tries another.
   */
  static async start(): Promise<PostgresServer> {
    const bin = pgBin();
    if (!bin) throw new Error(postgresMissing());
    const dir = await Deno.makeTempDir({ prefix: "obs-pg-" });
    await Deno.chmod(dir, 0o777);
    const server = new PostgresServer(dir, bin);
    try {
      await server.#pg("initdb", [
        "-D",
        server.#data,
        "-A",
        "trust",
        "-U",
        "postgres",
        "-E",
        "UTF8",
      ]);
      for (let attempt = 1;; attempt++) {
        server.#port = freePort();
        try {
          await server.restart();
          return server;
        } catch (err) {
          if (!(err instanceof PortTaken) || attempt >= PG_START_ATTEMPTS) throw err;
        }
      }
    } catch (err) {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      throw err;
    }
  }

  /** The port it listens on. */
  get port(): number {
    return this.#port;
  }

  get #data(): string {
    return join(this.dir, "data");
  }

  get #log(): string {
    return join(this.dir, "log");
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

  /**
   * Starts the server (again) on the same port and data directory; `pg_ctl -w` returns once it
   * accepts connections.
   *
   * @throws {Error} With the server log's last lines when it does not start.
   */
  async restart(): Promise<void> {
    // fsync=off is safe for the crashes these tests make (a killed process, not a lost
    // machine): the WAL is written before each commit answers, only not flushed to the disk.
    const options = `-p ${this.port} -k ${this.dir} -c listen_addresses=127.0.0.1 -c fsync=off`;
    const logged = (await Deno.readTextFile(this.#log).catch(() => "")).length;
    try {
      await this.#pg("pg_ctl", ["-D", this.#data, "-o", options, "-l", this.#log, "-w", "start"]);
    } catch (err) {
      const log = (await Deno.readTextFile(this.#log).catch(() => "")).slice(logged).trim();
      const tail = log.split("\n").slice(-5).join(" | ");
      const taken = /could not bind IPv4 address|Address already in use/.test(log);
      throw new (taken ? PortTaken : Error)(
        `${(err as Error).message} (port ${this.port}): ${tail}`,
      );
    }
    this.#running = true;
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
