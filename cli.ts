/**
 * The `obs-utils` command line: `obs-utils telemetry run | stop | current | post | migrate`.
 *
 * Run it with scoped permissions (see the README); a missing permission is reported as one line
 * naming the flag to add.
 *
 * @example Usage
 * ```sh
 * deno run --allow-net=localhost:6562 --allow-read=./telemetry --allow-write=./telemetry \
 *   --allow-env=OBS_TELEMETRY_HOST,OBS_TELEMETRY_PORT,OBS_TELEMETRY_SITE_DIR,OBS_TELEMETRY_TZ,OBS_TELEMETRY_SITE_TYPES,OBS_TELEMETRY_TOKEN,OBS_TELEMETRY_FSYNC \
 *   jsr:@obs-utils/telemetry/cli telemetry run --site-dir ./telemetry
 * ```
 *
 * @module
 */

// deno-lint-ignore-file no-console
import { parseArgs, type ParseArgsConfig } from "node:util";
import { TelemetryClient, TelemetryConnectionError, TelemetryHttpError } from "./client.ts";
import type { Envelope, TelemetryEvent } from "./event.ts";
import { hostForUrl, readEnv } from "./_address.ts";
import { sleep } from "./_async.ts";
import { migrate, MigrateError, type MigrateProgress, type MigrateSummary } from "./migrate.ts";
import {
  checkTimeZone,
  ConfigError,
  DEFAULT_HOST,
  DEFAULT_MAX_BODY,
  DEFAULT_MAX_TYPES,
  DEFAULT_PORT,
  FSYNC_MODES,
  type FsyncMode,
  SERVER_ENV_VARS,
  type ServerHandle,
  SiteInUseError,
  startServer,
  VERSION,
} from "./server.ts";

/** Environment variables the program reads (CONTRACT 6: the only ones it may). */
export const ENV_VARS: readonly string[] = SERVER_ENV_VARS;

/** Default site directory (SPEC 4.6). */
export const DEFAULT_SITE_DIR = "telemetry";

/** The `--help` texts, keyed by command (`""` for the program, `"telemetry"` for the group). */
export const HELP_TEXT: Readonly<Record<string, string>> = {
  "": `obs-utils ${VERSION}: observatory utilities

Usage: obs-utils telemetry <command> [options]

Commands:
  telemetry run       Start the telemetry service in the foreground
  telemetry stop      Stop a running service
  telemetry current   Show the latest event of each type
  telemetry post      Record one event
  telemetry migrate   Convert a legacy file database to NDJSON

Options:
  -h, --help     Show this help
  -V, --version  Print the version
`,
  telemetry: `Usage: obs-utils telemetry <command> [options]

Commands:
  run       Start the telemetry service in the foreground
  stop      Stop a running service
  current   Show the latest event of each type (--follow to watch)
  post      Record one event from the shell
  migrate   Convert a legacy file database to NDJSON

Run 'obs-utils telemetry <command> --help' for a command's options.
`,
  run: `Usage: obs-utils telemetry run [options]

Start the telemetry service in the foreground. Stop it with Ctrl-C, SIGTERM or
'obs-utils telemetry stop'.

Options:
  --site-dir DIR        Telemetry directory           [env OBS_TELEMETRY_SITE_DIR, default telemetry]
  --host HOST           Address to bind               [env OBS_TELEMETRY_HOST, default localhost]
  --port PORT           Port to bind                  [env OBS_TELEMETRY_PORT, default 6562]
  --tz ZONE             IANA zone of the noon file rotation [env OBS_TELEMETRY_TZ, default system zone]
  --site-types A,B      Types also written to the site file during a run
                                                      [env OBS_TELEMETRY_SITE_TYPES, default weather,environment]
  --fsync MODE          always | interval | never     [env OBS_TELEMETRY_FSYNC, default interval]
  --token TOKEN         Require 'Authorization: Bearer TOKEN' [env OBS_TELEMETRY_TOKEN]
  --allow-run-root DIR  Also allow run directories below DIR (repeatable)
  --max-body BYTES      Largest request body              [default 1048576]
  --max-types N         Most event types the snapshot holds [default 10000]
  --insecure            Allow a non-loopback --host without a token
  --verbose             Log one line per incoming event
  -h, --help            Show this help
`,
  stop: `Usage: obs-utils telemetry stop [options]

Ask the running service to shut down and wait until it has.

Options:
  --host HOST    [env OBS_TELEMETRY_HOST, default localhost]
  --port PORT    [env OBS_TELEMETRY_PORT, default 6562]
  --token TOKEN  [env OBS_TELEMETRY_TOKEN]
  --timeout S    Seconds to wait for the service to exit  [default 10]
  -h, --help     Show this help
`,
  current: `Usage: obs-utils telemetry current [TYPE] [options]

Show the latest event of each type, or of TYPE only.

Options:
  --json          Print JSON instead of a table
  --follow        Keep watching and redraw on every change (Ctrl-C to exit)
  --interval S    Seconds between polls when the server has no live stream [default 1]
  --host HOST     [env OBS_TELEMETRY_HOST, default localhost]
  --port PORT     [env OBS_TELEMETRY_PORT, default 6562]
  --token TOKEN   [env OBS_TELEMETRY_TOKEN]
  -h, --help      Show this help
`,
  post: `Usage: obs-utils telemetry post TYPE [options]

Record one event and print its envelope.

Options:
  --data JSON     The payload, a JSON object ('-' reads it from stdin)  [default {}]
  --meta JSON     Caller metadata, a JSON object
  --ts TIME       The event's own time, ISO 8601 with Z or an offset [default now]
  --ephemeral     Update the current snapshot only; do not write to disk
  --host HOST     [env OBS_TELEMETRY_HOST, default localhost]
  --port PORT     [env OBS_TELEMETRY_PORT, default 6562]
  --token TOKEN   [env OBS_TELEMETRY_TOKEN]
  -h, --help      Show this help
`,
  migrate: `Usage: obs-utils telemetry migrate --source DIR --dest DIR [options]

Convert a legacy file database (<collection>.json files) into site_YYYYMMDD.ndjson files.
Never overwrites existing files unless --force; rejected lines go to migrate-rejects.ndjson.

Options:
  --source DIR   Legacy database directory (searched recursively)
  --dest DIR     Where to write the NDJSON files
  --dry-run      Report what would be written; write nothing
  --force        Replace existing output files
  -h, --help     Show this help
`,
};

/** A mistake in the command line: exit code 2. */
export class UsageError extends Error {
  /** The command whose `--help` explains the fix. */
  readonly command: string;
  /**
   * Creates the error.
   *
   * @param message What is wrong.
   * @param command The command, for the `--help` hint.
   */
  constructor(message: string, command: string) {
    super(message);
    this.name = "UsageError";
    this.command = command;
  }
}

/** A failure to report as one line: exit code 1. */
class Failure extends Error {
  constructor(message: string) {
    super(message);
    this.name = "Failure";
  }
}

const CONNECTION_OPTIONS = {
  host: { type: "string" },
  port: { type: "string" },
  token: { type: "string" },
  help: { type: "boolean", short: "h" },
} as const satisfies ParseArgsConfig["options"];

function parse<T extends NonNullable<ParseArgsConfig["options"]>>(
  command: string,
  args: string[],
  options: T,
  allowPositionals: boolean,
) {
  try {
    return parseArgs({ args, options, allowPositionals, strict: true });
  } catch (err) {
    const message = err instanceof Error ? err.message.split("\n")[0]! : String(err);
    throw new UsageError(message.replace(/\. To specify a positional.*$/, ""), command);
  }
}

function parsePort(value: string, command: string): number {
  if (!/^\d{1,5}$/.test(value) || Number(value) > 65535) {
    throw new UsageError(`--port must be a number from 0 to 65535, not "${value}"`, command);
  }
  return Number(value);
}

function parsePositiveInt(value: string, flag: string, command: string): number {
  if (!/^\d+$/.test(value) || Number(value) < 1 || !Number.isSafeInteger(Number(value))) {
    throw new UsageError(`${flag} must be a positive whole number, not "${value}"`, command);
  }
  return Number(value);
}

function parseSeconds(value: string, flag: string, command: string): number {
  const n = Number(value);
  if (value.trim() === "" || !Number.isFinite(n) || n <= 0) {
    throw new UsageError(`${flag} must be a number of seconds above 0, not "${value}"`, command);
  }
  return n;
}

function parseJsonObject(text: string, flag: string, command: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new UsageError(
      `${flag} is not valid JSON (${
        (err as Error).message
      }); quote it, e.g. ${flag} '{"wind_mps": 2.1}'`,
      command,
    );
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new UsageError(`${flag} must be a JSON object such as '{"wind_mps": 2.1}'`, command);
  }
  return value as Record<string, unknown>;
}

interface Connection {
  baseUrl: string;
  token: string | undefined;
}

function connection(
  values: { host?: string | undefined; port?: string | undefined; token?: string | undefined },
  command: string,
): Connection {
  const host = values.host ?? readEnv("OBS_TELEMETRY_HOST") ?? DEFAULT_HOST;
  const portText = values.port ?? readEnv("OBS_TELEMETRY_PORT");
  const port = portText === undefined ? DEFAULT_PORT : parsePort(portText, command);
  return {
    baseUrl: `http://${hostForUrl(host)}:${port}`,
    token: values.token ?? readEnv("OBS_TELEMETRY_TOKEN"),
  };
}

function client(conn: Connection, timeoutMs = 5000): TelemetryClient {
  return new TelemetryClient({
    baseUrl: conn.baseUrl,
    timeoutMs,
    ...(conn.token !== undefined ? { token: conn.token } : {}),
  });
}

/**
 * Turns a permission error into one line naming the flag to add. Deno's message has the form
 * `Requires net access to "localhost:7000", run again with the --allow-net flag`.
 */
function permissionHint(err: Error): string {
  const m = /Requires (\w+) access to "?([^",]+)"?/.exec(err.message);
  if (!m) return `Permission denied: ${err.message.split("\n")[0]}`;
  const [, kind, target] = m;
  return `Permission denied: requires ${kind} access to ${target}; add --allow-${kind}=${target}`;
}

// ---------------------------------------------------------------------------------------------
// run

async function runCommand(args: string[]): Promise<number> {
  const { values } = parse("run", args, {
    "site-dir": { type: "string" },
    host: { type: "string" },
    port: { type: "string" },
    tz: { type: "string" },
    "site-types": { type: "string" },
    fsync: { type: "string" },
    token: { type: "string" },
    "allow-run-root": { type: "string", multiple: true },
    "max-body": { type: "string" },
    "max-types": { type: "string" },
    insecure: { type: "boolean" },
    verbose: { type: "boolean" },
    help: { type: "boolean", short: "h" },
  }, false);
  if (values.help) return help("run");

  const siteDir = values["site-dir"] ?? readEnv("OBS_TELEMETRY_SITE_DIR") ?? DEFAULT_SITE_DIR;
  const hostname = values.host ?? readEnv("OBS_TELEMETRY_HOST") ?? DEFAULT_HOST;
  const portText = values.port ?? readEnv("OBS_TELEMETRY_PORT");
  const port = portText === undefined ? DEFAULT_PORT : parsePort(portText, "run");
  const fsyncText = values.fsync ?? readEnv("OBS_TELEMETRY_FSYNC") ?? "interval";
  if (!(FSYNC_MODES as readonly string[]).includes(fsyncText)) {
    throw new UsageError(`--fsync must be always, interval or never, not "${fsyncText}"`, "run");
  }
  const fsync = fsyncText as FsyncMode;
  const tzText = values.tz ?? readEnv("OBS_TELEMETRY_TZ");
  let timeZone: string;
  try {
    timeZone = checkTimeZone(tzText ?? Temporal.Now.timeZoneId());
  } catch (err) {
    throw new UsageError((err as Error).message, "run");
  }
  const siteTypesText = values["site-types"] ?? readEnv("OBS_TELEMETRY_SITE_TYPES");
  const siteTypes = siteTypesText === undefined
    ? undefined
    : siteTypesText.split(",").map((t) => t.trim()).filter((t) => t !== "");
  const maxBody = values["max-body"] === undefined
    ? DEFAULT_MAX_BODY
    : parsePositiveInt(values["max-body"], "--max-body", "run");
  const maxTypes = values["max-types"] === undefined
    ? DEFAULT_MAX_TYPES
    : parsePositiveInt(values["max-types"], "--max-types", "run");
  const token = values.token ?? readEnv("OBS_TELEMETRY_TOKEN");

  let server: ServerHandle;
  let early: string[] | undefined = [];
  try {
    server = await startServer({
      siteDir,
      hostname,
      port,
      timeZone,
      fsync,
      maxBody,
      maxTypes,
      token,
      insecure: values.insecure ?? false,
      allowRunRoots: values["allow-run-root"] ?? [],
      ...(siteTypes ? { siteTypes } : {}),
      // CONTRACT 4.7: nothing is printed before the listener is up, so a start-up failure stays
      // one line; what recovery found is reported right after the ready line.
      onWarning: (message) => {
        const line = `warning: ${message}`;
        if (early) early.push(line);
        else console.error(line);
      },
      onError: (err) => console.error(`error: ${err instanceof Error ? err.stack : err}`),
    });
  } catch (err) {
    throw new Failure(startupFailure(err, { siteDir, hostname, port }));
  }

  if (values.verbose) {
    server.service.subscribe((message) => {
      if (message.kind === "telemetry") {
        const e = message.event;
        console.log(`debug event ${e.stream}#${e.seq} ${e.type} ${e.line}`);
      } else {
        console.log(
          `debug run ${message.active ? "started" : "stopped"} ${JSON.stringify(message.run)}`,
        );
      }
    });
  }

  let signals = 0;
  const onSignal = () => {
    signals++;
    if (signals > 1) {
      console.error("Second signal: exiting without waiting for in-flight requests.");
      Deno.exit(1);
    }
    void server.shutdown();
  };
  const signalNames: Deno.Signal[] = Deno.build.os === "windows"
    ? ["SIGINT"]
    : ["SIGINT", "SIGTERM"];
  for (const s of signalNames) Deno.addSignalListener(s, onSignal);

  console.log(
    `telemetry service listening on ${server.url} (site dir ${server.service.siteDir}, zone ${timeZone}, fsync ${fsync}${
      token ? ", token required" : ""
    })`,
  );
  for (const line of early ?? []) console.error(line);
  early = undefined;
  try {
    await server.finished;
  } finally {
    for (const s of signalNames) Deno.removeSignalListener(s, onSignal);
  }
  console.log("telemetry service stopped; all files flushed and closed");
  return 0;
}

function startupFailure(
  err: unknown,
  ctx: { siteDir: string; hostname: string; port: number },
): string {
  if (err instanceof ConfigError || err instanceof SiteInUseError) return err.message;
  if (err instanceof Deno.errors.AddrInUse) {
    return `Cannot listen on ${ctx.hostname}:${ctx.port}: the port is in use; stop the other server ('obs-utils telemetry stop --port ${ctx.port}') or choose another --port`;
  }
  if (err instanceof Deno.errors.NotCapable) return permissionHint(err);
  if (err instanceof Deno.errors.PermissionDenied) {
    return `Cannot use site directory ${ctx.siteDir}: the operating system denied access (${
      (err as Error).message
    }); choose a writable --site-dir`;
  }
  if (err instanceof Deno.errors.AlreadyExists || err instanceof Deno.errors.NotADirectory) {
    return `Cannot use site directory ${ctx.siteDir}: a file is in the way; choose another --site-dir`;
  }
  if (err instanceof Deno.errors.NotFound) {
    return `Cannot create site directory ${ctx.siteDir}: ${
      (err as Error).message.replace(/ \(os error \d+\).*$/, "")
    }; choose a writable --site-dir`;
  }
  if (err instanceof Deno.errors.AddrNotAvailable) {
    return `Cannot listen on ${ctx.hostname}:${ctx.port}: the address is not available on this machine; check --host`;
  }
  if (err instanceof RangeError) return err.message;
  return `Cannot start the telemetry service: ${err instanceof Error ? err.message : String(err)}`;
}

// ---------------------------------------------------------------------------------------------
// stop

async function stopCommand(args: string[]): Promise<number> {
  const { values } = parse("stop", args, {
    ...CONNECTION_OPTIONS,
    timeout: { type: "string" },
  }, false);
  if (values.help) return help("stop");
  const conn = connection(values, "stop");
  const timeoutS = values.timeout === undefined
    ? 10
    : parseSeconds(values.timeout, "--timeout", "stop");
  const api = client(conn, 2000);
  try {
    await api.shutdown();
  } catch (err) {
    if (err instanceof TelemetryConnectionError) {
      throw new Failure(`No telemetry service answers at ${conn.baseUrl}; nothing to stop`);
    }
    if (err instanceof TelemetryHttpError && err.status === 401) {
      throw new Failure(
        `The service at ${conn.baseUrl} requires a token; pass --token or set OBS_TELEMETRY_TOKEN`,
      );
    }
    // 503: it is already shutting down; wait for it like for our own request.
    if (!(err instanceof TelemetryHttpError && err.status === 503)) throw clientFailure(err, conn);
  }
  const deadline = Date.now() + timeoutS * 1000;
  while (Date.now() < deadline) {
    try {
      await client(conn, 500).health();
    } catch (err) {
      if (err instanceof TelemetryConnectionError) {
        console.log(`telemetry service at ${conn.baseUrl} stopped`);
        return 0;
      }
      // 503 while draining: keep waiting.
    }
    await sleep(100);
  }
  throw new Failure(
    `The service at ${conn.baseUrl} accepted the shutdown but still answers after ${timeoutS} s; check its log`,
  );
}

// ---------------------------------------------------------------------------------------------
// current

async function currentCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse("current", args, {
    ...CONNECTION_OPTIONS,
    json: { type: "boolean" },
    follow: { type: "boolean" },
    interval: { type: "string" },
  }, true);
  if (values.help) return help("current");
  if (positionals.length > 1) {
    throw new UsageError(`expected at most one TYPE, got ${positionals.length}`, "current");
  }
  const type = positionals[0];
  const interval = values.interval === undefined
    ? 1
    : parseSeconds(values.interval, "--interval", "current");
  const conn = connection(values, "current");
  const api = client(conn);
  if (values.follow) return await follow(api, conn, type, values.json ?? false, interval);

  const events = await fetchCurrent(api, conn, type);
  if (values.json) {
    console.log(JSON.stringify(type === undefined ? events : events[type], null, 2));
  } else {
    Deno.stdout.writeSync(new TextEncoder().encode(renderTable(events, Date.now(), style())));
  }
  return 0;
}

async function fetchCurrent(
  api: TelemetryClient,
  conn: Connection,
  type: string | undefined,
): Promise<Record<string, TelemetryEvent>> {
  try {
    if (type === undefined) return await api.current();
    const event = await api.getCurrent(type);
    if (event === null) {
      throw new Failure(`No event of type "${type}" has been recorded yet at ${conn.baseUrl}`);
    }
    return { [type]: event };
  } catch (err) {
    throw clientFailure(err, conn);
  }
}

function clientFailure(err: unknown, conn: Connection): unknown {
  if (err instanceof TelemetryConnectionError) {
    return new Failure(
      `No telemetry service answers at ${conn.baseUrl}; start it with 'obs-utils telemetry run' or check --host/--port`,
    );
  }
  if (err instanceof TelemetryHttpError) {
    return new Failure(`The service answered ${err.status}: ${err.detail}`);
  }
  return err;
}

interface Style {
  bold: (s: string) => string;
  dim: (s: string) => string;
  width: number;
}

function style(): Style {
  const tty = Deno.stdout.isTerminal();
  const color = tty && readEnv("NO_COLOR") === undefined && !hasNoColor();
  const wrap = (code: string) => (s: string) => color ? `\x1b[${code}m${s}\x1b[0m` : s;
  let width = 120;
  if (tty) {
    try {
      // A fresh pseudo-terminal can report 0 columns; fall back rather than cut every row.
      const columns = Deno.consoleSize().columns;
      if (columns >= 20) width = columns;
    } catch {
      // not a console after all
    }
  }
  return { bold: wrap("1"), dim: wrap("2"), width };
}

function hasNoColor(): boolean {
  // NO_COLOR is outside the scoped env list; Deno.noColor reads it without a permission.
  return Deno.noColor;
}

/**
 * Formats an age in seconds as `4s`, `2m05s`, `3h07m` or `2d04h`.
 *
 * @param ms Age in milliseconds (negative ages, from clock skew, show as `0s`).
 * @returns A short human-readable age.
 *
 * @example Usage
 * ```ts
 * import { formatAge } from "@obs-utils/telemetry/cli";
 * import assert from "node:assert/strict";
 *
 * assert.equal(formatAge(125_000), "2m05s");
 * ```
 */
export function formatAge(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${String(s % 60).padStart(2, "0")}s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h${String(m % 60).padStart(2, "0")}m`;
  return `${Math.floor(h / 24)}d${String(h % 24).padStart(2, "0")}h`;
}

function summarise(data: Readonly<Record<string, unknown>>): string {
  return Object.entries(data).map(([k, v]) =>
    `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`
  ).join(" ");
}

/**
 * Renders the current events as an aligned table: type, seq, ts, age, run, data.
 *
 * @param events Events keyed by type.
 * @param now The current time in epoch milliseconds, for the age column.
 * @param options Terminal width and styling.
 * @returns The table, ending with a newline.
 *
 * @example Usage
 * ```ts
 * import { renderTable } from "@obs-utils/telemetry/cli";
 * import { TelemetryEvent } from "@obs-utils/telemetry/event";
 * import assert from "node:assert/strict";
 *
 * const event = new TelemetryEvent({ seq: 4, ts: "2026-11-22T03:00:00.000Z", type: "weather", data: { wind_mps: 2.1 }, meta: {} });
 * const table = renderTable({ weather: event }, Date.parse("2026-11-22T03:00:05Z"));
 * assert.match(table, /weather\s+4\s+2026-11-22T03:00:00.000Z\s+5s\s+-\s+wind_mps=2.1/);
 * ```
 */
export function renderTable(
  events: Readonly<Record<string, Envelope>>,
  now: number,
  options: { width?: number; bold?: (s: string) => string; dim?: (s: string) => string } = {},
): string {
  const { width = 120, bold = (s: string) => s, dim = (s: string) => s } = options;
  const entries = Object.entries(events);
  if (entries.length === 0) return dim("(no events recorded yet)") + "\n";
  const header = ["TYPE", "SEQ", "TS", "AGE", "RUN", "DATA"];
  const rows = entries.map(([type, e]) => [
    type,
    String(e.seq),
    e.ts,
    formatAge(now - Date.parse(e.ts)),
    typeof e.meta.run_id === "string" ? e.meta.run_id : "-",
    summarise(e.data),
  ]);
  const widths = header.slice(0, 5).map((h, i) =>
    Math.max(h.length, ...rows.map((r) => r[i]!.length))
  );
  const line = (cells: string[]) => {
    const fixed = cells.slice(0, 5).map((c, i) => c.padEnd(widths[i]!)).join("  ");
    let out = `${fixed}  ${cells[5]}`;
    if (out.length > width) out = out.slice(0, Math.max(width - 1, 10)) + "…";
    return out.trimEnd();
  };
  return [bold(line(header)), ...rows.map(line)].join("\n") + "\n";
}

async function follow(
  api: TelemetryClient,
  conn: Connection,
  type: string | undefined,
  asJson: boolean,
  intervalS: number,
): Promise<number> {
  const controller = new AbortController();
  const stop = () => controller.abort();
  Deno.addSignalListener("SIGINT", stop);
  const st = style();
  const tty = Deno.stdout.isTerminal();
  const out = (text: string) => Deno.stdout.writeSync(new TextEncoder().encode(text));
  let events: Record<string, TelemetryEvent> = {};
  let status = "connecting…";
  let lastDrawn = "";
  const draw = () => {
    const shown = type === undefined ? events : (events[type] ? { [type]: events[type] } : {});
    if (asJson) {
      const text = JSON.stringify(type === undefined ? shown : shown[type] ?? null);
      if (text !== lastDrawn) out(text + "\n");
      lastDrawn = text;
      return;
    }
    const table = renderTable(shown, Date.now(), st);
    const frame = `${st.dim(`${conn.baseUrl} · ${status} · Ctrl-C to exit`)}\n${table}`;
    if (tty) out(`\x1b[H\x1b[2J${frame}`);
    else if (frame !== lastDrawn) out(frame + "\n");
    lastDrawn = frame;
  };
  // Ages tick every second on a terminal even when nothing new arrives.
  const ticker = tty && !asJson ? setInterval(draw, 1000) : undefined;
  try {
    let useStream = true;
    while (!controller.signal.aborted) {
      if (useStream) {
        try {
          for await (const item of api.follow({ signal: controller.signal })) {
            if (item.kind === "snapshot") events = { ...item.current };
            else if (item.kind === "telemetry") {
              events = { ...events, [item.event.type]: item.event };
            } else if (item.kind === "disconnected") {
              status = `reconnecting… (attempt ${item.attempt})`;
              if (!asJson) draw();
              continue;
            } else continue; // a run start or stop changes no reading
            status = "live";
            draw();
          }
          break;
        } catch (err) {
          if (controller.signal.aborted) break;
          if (err instanceof TelemetryHttpError && err.status === 404) {
            useStream = false; // an older server without /stream: poll instead
            continue;
          }
          throw clientFailure(err, conn);
        }
      }
      try {
        events = await api.current();
        status = `polling every ${intervalS} s`;
      } catch (err) {
        if (!(err instanceof TelemetryConnectionError)) throw clientFailure(err, conn);
        status = "reconnecting…";
      }
      draw();
      await sleep(intervalS * 1000, controller.signal);
    }
  } finally {
    clearInterval(ticker);
    Deno.removeSignalListener("SIGINT", stop);
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// post

async function postCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse("post", args, {
    ...CONNECTION_OPTIONS,
    data: { type: "string" },
    meta: { type: "string" },
    ts: { type: "string" },
    ephemeral: { type: "boolean" },
  }, true);
  if (values.help) return help("post");
  if (positionals.length !== 1) {
    throw new UsageError(
      positionals.length === 0 ? "missing TYPE, e.g. 'post weather'" : "expected one TYPE",
      "post",
    );
  }
  const type = positionals[0]!;
  let dataText = values.data ?? "{}";
  if (dataText === "-") dataText = await new Response(Deno.stdin.readable).text();
  const data = parseJsonObject(dataText, "--data", "post");
  const meta = values.meta === undefined
    ? undefined
    : parseJsonObject(values.meta, "--meta", "post");
  const conn = connection(values, "post");
  try {
    const event = await client(conn).postEvent(type, data, {
      ...(meta ? { meta } : {}),
      ...(values.ts !== undefined ? { ts: values.ts } : {}),
      ...(values.ephemeral ? { storePermanently: false } : {}),
    });
    console.log(JSON.stringify(event));
  } catch (err) {
    if (err instanceof TypeError) throw new UsageError(err.message, "post");
    throw clientFailure(err, conn);
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// migrate

async function migrateCommand(args: string[]): Promise<number> {
  const { values } = parse("migrate", args, {
    source: { type: "string" },
    dest: { type: "string" },
    "dry-run": { type: "boolean" },
    force: { type: "boolean" },
    help: { type: "boolean", short: "h" },
  }, false);
  if (values.help) return help("migrate");
  if (values.source === undefined || values.dest === undefined) {
    throw new UsageError(
      `--source and --dest are both required, e.g. --source ./legacy-db --dest ./telemetry`,
      "migrate",
    );
  }
  const tty = Deno.stderr.isTerminal();
  const err = (text: string) => Deno.stderr.writeSync(new TextEncoder().encode(text));
  let lastDraw = 0;
  const onProgress = (p: MigrateProgress) => {
    const now = performance.now();
    if (!tty || now - lastDraw < 200) return;
    lastDraw = now;
    const pct = p.phase === "read"
      ? (p.totalBytes > 0 ? Math.floor(p.bytesRead / p.totalBytes * 100) : 100)
      : (p.filesTotal > 0 ? Math.floor(p.filesDone / p.filesTotal * 100) : 100);
    err(
      `\r\x1b[K${
        p.phase === "read" ? "reading" : p.phase === "write" ? "sorting" : "renaming"
      } ${pct}% · ${p.records.toLocaleString("en-US")} records · ${
        p.rejects.toLocaleString("en-US")
      } rejects`,
    );
  };
  let summary: MigrateSummary;
  try {
    summary = await migrate(values.source, values.dest, {
      force: values.force ?? false,
      dryRun: values["dry-run"] ?? false,
      onProgress,
    });
  } catch (e) {
    if (tty) err("\r\x1b[K");
    if (e instanceof MigrateError) throw new Failure(e.message);
    throw e;
  }
  if (tty) err("\r\x1b[K");
  const n = (x: number) => x.toLocaleString("en-US");
  const verb = summary.dryRun ? "would migrate" : "migrated";
  console.log(
    `${verb} ${n(summary.records)} records from ${
      Object.keys(summary.collections).length
    } collections into ${summary.files.length} site files in ${
      (summary.elapsedMs / 1000).toFixed(1)
    } s (${n(Math.round(summary.recordsPerSecond))} records/s)`,
  );
  for (const [collection, count] of Object.entries(summary.collections)) {
    console.log(`  ${collection}: ${n(count)}`);
  }
  if (summary.files.length > 0) {
    const first = summary.files[0]!.name, last = summary.files.at(-1)!.name;
    console.log(`  files: ${first}${summary.files.length > 1 ? ` … ${last}` : ""}`);
  }
  if (summary.replaced.length > 0) console.log(`  replaced: ${summary.replaced.length} files`);
  console.log(
    `  rejects: ${n(summary.rejects)}${
      summary.rejects > 0 ? ` (see ${summary.rejectsFile})` : ""
    }; blank lines: ${n(summary.blankLines)}`,
  );
  return 0;
}

// ---------------------------------------------------------------------------------------------

function help(command: string): number {
  console.log(HELP_TEXT[command]!.trimEnd());
  return 0;
}

const COMMANDS: Record<string, (args: string[]) => Promise<number>> = {
  run: runCommand,
  stop: stopCommand,
  current: currentCommand,
  post: postCommand,
  migrate: migrateCommand,
};

/**
 * Runs the program with the given arguments and returns its exit code: 0 ok, 1 failure,
 * 2 usage error. Errors are printed as one line on stderr, never as a stack trace.
 *
 * @param args The arguments after the program name, for example `["telemetry", "current"]`.
 * @returns The exit code.
 *
 * @example Usage
 * ```ts ignore
 * import { runCli } from "@obs-utils/telemetry/cli";
 * Deno.exit(await runCli(["telemetry", "current", "--json"]));
 * ```
 */
export async function runCli(args: string[]): Promise<number> {
  const command = args[0] === "telemetry" ? args[1] : undefined;
  try {
    if (args.length === 0 || args[0] === "--help" || args[0] === "-h") return help("");
    if (args[0] === "--version" || args[0] === "-V") {
      console.log(`obs-utils ${VERSION}`);
      return 0;
    }
    if (args[0] !== "telemetry") {
      throw new UsageError(`unknown command "${args[0]}"; the command group is 'telemetry'`, "");
    }
    if (command === undefined || command === "--help" || command === "-h") {
      return help("telemetry");
    }
    const run = COMMANDS[command];
    if (!run) {
      throw new UsageError(
        `unknown command "${command}"; use run, stop, current, post or migrate`,
        "telemetry",
      );
    }
    return await run(args.slice(2));
  } catch (err) {
    if (err instanceof UsageError) {
      const where = err.command === ""
        ? "obs-utils"
        : err.command === "telemetry"
        ? "obs-utils telemetry"
        : `obs-utils telemetry ${err.command}`;
      console.error(`${where}: ${err.message}. Run '${where} --help' for usage.`);
      return 2;
    }
    if (err instanceof Failure) {
      console.error(`error: ${err.message}`);
      return 1;
    }
    if (err instanceof Deno.errors.NotCapable) {
      console.error(`error: ${permissionHint(err)}`);
      return 1;
    }
    const failure = clientFailure(err, { baseUrl: "the service", token: undefined });
    console.error(`error: ${failure instanceof Error ? failure.message : String(failure)}`);
    return 1;
  }
}

if (import.meta.main) Deno.exit(await runCli(Deno.args));
