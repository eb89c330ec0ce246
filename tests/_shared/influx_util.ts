/**
 * The InfluxDB clients the line-protocol tests run for real (docs/influx.md): Debian's `influx`
 * command line (`influxdb-client`), Debian's `python3-influxdb`, the npm
 * `@influxdata/influxdb-client` under Node, and an `influxd` of our own (Debian's `influxdb`, the
 * starter bench/_util.ts shares with the benchmarks) to hold the service beside. Each `...Missing`
 * function says why its client cannot run here, so a test can skip with that reason printed.
 * @module
 */

import { join } from "node:path";
import { type InfluxServer, startInfluxd } from "../../bench/_util.ts";
import { tempDir } from "./util.ts";

export { influxdMissing, influxQuery } from "../../bench/_util.ts";

const decoder = new TextDecoder();

/** What a client process printed and how it ended. */
export interface ClientRun {
  code: number;
  stdout: string;
  stderr: string;
}

async function run(
  command: string,
  args: readonly string[],
  options: { cwd?: string; stdin?: string } = {},
): Promise<ClientRun> {
  const child = new Deno.Command(command, {
    args: [...args],
    ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
    // No proxy from the environment between a client and the loopback service.
    env: { NO_PROXY: "*", no_proxy: "*" },
    stdin: options.stdin === undefined ? "null" : "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  if (options.stdin !== undefined) {
    const writer = child.stdin.getWriter();
    await writer.write(new TextEncoder().encode(options.stdin));
    await writer.close();
  }
  const out = await child.output();
  return { code: out.code, stdout: decoder.decode(out.stdout), stderr: decoder.decode(out.stderr) };
}

/** Why Debian's `influx` command line cannot run here, or `undefined` when it can. */
export function influxCliMissing(): string | undefined {
  try {
    const out = new Deno.Command("influx", { args: ["-version"], stdout: "null", stderr: "null" })
      .outputSync();
    return out.success ? undefined : "influx -version failed";
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      return "the influx command line is not installed (apt-get install influxdb-client)";
    }
    throw err;
  }
}

/**
 * Runs `influx` against `127.0.0.1:<port>` as `user` with `password`, then `args`.
 *
 * @param port The server's port.
 * @param password The basic-auth password (the service's token).
 * @param args More arguments: `-database site -execute 'INSERT ...'`, `-import -path F`.
 * @returns What it printed and its exit code.
 */
export function runInfluxCli(
  port: number,
  password: string,
  args: readonly string[],
): Promise<ClientRun> {
  return run("influx", [
    "-host",
    "127.0.0.1",
    "-port",
    String(port),
    "-username",
    "telegraf",
    "-password",
    password,
    ...args,
  ]);
}

/**
 * The Python 3 that imports Debian's `influxdb` module: `python3` on the PATH, or Debian's own
 * `/usr/bin/python3` (a pyenv or venv `python3` first on the PATH does not see Debian's
 * `/usr/lib/python3/dist-packages`).
 */
function influxPython(): { python: string } | { missing: string } {
  for (const python of ["python3", "/usr/bin/python3"]) {
    try {
      const out = new Deno.Command(python, {
        args: ["-c", "import influxdb"],
        stdout: "null",
        stderr: "null",
      }).outputSync();
      if (out.success) return { python };
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) throw err;
    }
  }
  return { missing: "no python3 imports influxdb (apt-get install python3-influxdb)" };
}

const PYTHON = influxPython();

/** Why Debian's `python3-influxdb` cannot run here, or `undefined` when it can. */
export function influxPythonMissing(): string | undefined {
  return "missing" in PYTHON ? PYTHON.missing : undefined;
}

/** What tests/_shared/python/influx_write.py saw: `True`, or the client's error. */
export interface PythonWrite {
  /** What `write_points` returned. */
  result?: boolean;
  /** The `InfluxDBClientError`'s status code and content. */
  error?: { code: number; content: string };
}

/**
 * Runs `InfluxDBClient(host, port, username, password, database).write_points(points)` of
 * Debian's `python3-influxdb` (tests/_shared/python/influx_write.py).
 *
 * @param port The server's port.
 * @param password The password (the service's token).
 * @param points The points as `write_points` takes them (`measurement`, `tags`, `time`,
 *   `fields`).
 * @param options `time_precision` for `write_points`.
 * @returns What the client returned or raised.
 * @throws {Error} When the script fails some other way (its stderr in the message).
 */
export async function runPythonWrite(
  port: number,
  password: string,
  points: readonly Record<string, unknown>[],
  options: { timePrecision?: string } = {},
): Promise<PythonWrite> {
  if ("missing" in PYTHON) throw new Error(PYTHON.missing);
  const script = new URL("./python/influx_write.py", import.meta.url).pathname;
  const out = await run(PYTHON.python, [
    script,
    String(port),
    password,
    JSON.stringify(points),
    options.timePrecision ?? "",
  ]);
  if (out.code !== 0) throw new Error(`influx_write.py exited ${out.code}: ${out.stderr}`);
  return JSON.parse(out.stdout);
}

/**
 * The Node entry of the npm `@influxdata/influxdb-client` in Deno's npm cache. Under Deno the
 * package's `deno` export is its browser build (fetch, which never compresses); Node loads the
 * build with its Node transport, which gzips every body over `gzipThreshold`. The version is the
 * one deno.lock pins for the specifier the tests import.
 */
function nodeInfluxClient(specifier: string): { module: string } | { missing: string } {
  try {
    const node = new Deno.Command("node", { args: ["--version"], stdout: "null", stderr: "null" })
      .outputSync();
    if (!node.success) return { missing: "node --version failed" };
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return { missing: "node is not installed" };
    throw err;
  }
  const lock = JSON.parse(
    Deno.readTextFileSync(new URL("../../deno.lock", import.meta.url)),
  );
  const version: string | undefined = lock.specifiers?.[specifier];
  if (version === undefined) return { missing: `deno.lock pins no ${specifier}` };
  const info = new Deno.Command(Deno.execPath(), { args: ["info", "--json"], stdout: "piped" })
    .outputSync();
  const { npmCache } = JSON.parse(decoder.decode(info.stdout));
  const module = join(
    npmCache,
    "registry.npmjs.org",
    "@influxdata",
    "influxdb-client",
    version,
    "dist",
    "index.mjs",
  );
  try {
    Deno.statSync(module);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      return { missing: `${module} is not in Deno's npm cache (deno cache the test first)` };
    }
    throw err;
  }
  return { module };
}

/** The specifier of the npm client the tests load, as deno.lock pins it. */
export const NPM_INFLUX_CLIENT = "npm:@influxdata/influxdb-client@^1.35.0";

const NODE_CLIENT = nodeInfluxClient(NPM_INFLUX_CLIENT);

/** Why the npm client cannot run under Node here, or `undefined` when it can. */
export function nodeInfluxClientMissing(): string | undefined {
  return "missing" in NODE_CLIENT ? NODE_CLIENT.missing : undefined;
}

/**
 * Writes points with the npm client's `WriteApi` under Node (tests/_shared/node/influx_write.mjs):
 * `new InfluxDB({url, token}).getWriteApi(org, bucket, precision, {gzipThreshold})`, one
 * `writePoint` each, then `close()`.
 *
 * @param url The server's base URL.
 * @param token The token.
 * @param points Each point's measurement, tags, typed fields and time in ms.
 * @param options The org, bucket and precision (default `obs`, `site`, `ns`), and the body size
 *   above which it gzips (default 0: every body).
 * @returns What the script printed: `{"ok": true}` or the client's error.
 * @throws {Error} When node fails some other way.
 */
export async function runNodeWrite(
  url: string,
  token: string,
  points: readonly NodePoint[],
  options: { org?: string; bucket?: string; precision?: string; gzipThreshold?: number } = {},
): Promise<{ ok?: boolean; error?: { name: string; statusCode?: number; message: string } }> {
  if ("missing" in NODE_CLIENT) throw new Error(NODE_CLIENT.missing);
  const script = new URL("./node/influx_write.mjs", import.meta.url).pathname;
  const out = await run("node", [
    script,
    NODE_CLIENT.module,
    url,
    token,
    JSON.stringify({
      org: options.org ?? "obs",
      bucket: options.bucket ?? "site",
      precision: options.precision ?? "ns",
      gzipThreshold: options.gzipThreshold ?? 0,
      points,
    }),
  ]);
  if (out.code !== 0) throw new Error(`influx_write.mjs exited ${out.code}: ${out.stderr}`);
  return JSON.parse(out.stdout.trim().split("\n").at(-1)!);
}

/** One point for {@linkcode runNodeWrite}: fields by kind, as the client's `Point` writes them. */
export interface NodePoint {
  measurement: string;
  tags?: Record<string, string>;
  floats?: Record<string, number>;
  ints?: Record<string, number>;
  uints?: Record<string, number>;
  booleans?: Record<string, boolean>;
  strings?: Record<string, string>;
  /** Milliseconds since the epoch; without it the client sends no time. */
  timeMs?: number;
}

/** An `influxd` of our own in a temp dir, with `database`, stopped and removed on dispose. */
export interface TestInfluxd extends AsyncDisposable {
  readonly server: InfluxServer;
}

/**
 * Starts an `influxd` (Debian's InfluxDB 1.6, authentication off) on free loopback ports.
 *
 * @param database The database to create.
 * @returns The server; `await using` stops it and removes its directory.
 */
export async function testInfluxd(database: string): Promise<TestInfluxd> {
  const dir = await tempDir("obs-telemetry-influxd-");
  try {
    const server = await startInfluxd(dir.path, database);
    return {
      server,
      async [Symbol.asyncDispose]() {
        await server.stop();
        await dir[Symbol.asyncDispose]();
      },
    };
  } catch (err) {
    await dir[Symbol.asyncDispose]();
    throw err;
  }
}
