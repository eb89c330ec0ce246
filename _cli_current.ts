/**
 * `obs-utils telemetry current`: the latest event of each type, as a table or JSON, once or
 * following the service's live stream (`--follow`).
 *
 * @example Usage
 * ```ts
 * import { formatAge } from "./_cli_current.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(formatAge(4_000), "4s");
 * ```
 *
 * @module
 */

// deno-lint-ignore-file no-console
import { type TelemetryClient, TelemetryConnectionError, TelemetryHttpError } from "./client.ts";
import type { Envelope, TelemetryEvent } from "./event.ts";
import { readEnv } from "./_address.ts";
import { sleep } from "./_async.ts";
import {
  client,
  clientFailure,
  type Connection,
  connection,
  CONNECTION_OPTIONS,
  Failure,
  parse,
  parseSeconds,
  printHelp,
  UsageError,
} from "./_cli_common.ts";

/** The `--help` text of `current`. */
export const CURRENT_HELP: string = `Usage: obs-utils telemetry current [TYPE] [options]

Show the latest event of each type, or of TYPE only.

Options:
  --json          Print JSON instead of a table
  --follow        Keep watching and redraw on every change (Ctrl-C to exit)
  --interval S    Seconds between polls when the server has no live stream [default 1]
  --host HOST     [env OBS_TELEMETRY_HOST, default localhost]
  --port PORT     [env OBS_TELEMETRY_PORT, default 6562]
  --token TOKEN   [env OBS_TELEMETRY_TOKEN]
  --tls           Use HTTPS (a server run with --tls-cert; trust its CA with DENO_CERT=FILE)
  -h, --help      Show this help
`;

/**
 * Runs `obs-utils telemetry current`.
 *
 * @param args The arguments after `telemetry current`.
 * @returns The exit code, 0 when the events were shown (or `--follow` was ended with Ctrl-C).
 * @throws {UsageError} For a bad flag or more than one TYPE.
 * @throws {Failure} If no service answers, it refuses, or TYPE has no event yet.
 *
 * @example Usage
 * ```ts ignore
 * import { currentCommand } from "./_cli_current.ts";
 * Deno.exit(await currentCommand(["weather", "--json"]));
 * ```
 */
export async function currentCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse("current", args, {
    ...CONNECTION_OPTIONS,
    json: { type: "boolean" },
    follow: { type: "boolean" },
    interval: { type: "string" },
  }, true);
  if (values.help) return printHelp(CURRENT_HELP);
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

/** What `--follow` shows: the events, the connection status, and the frame last drawn. */
class FollowScreen {
  events: Record<string, TelemetryEvent> = {};
  status = "connecting…";
  readonly asJson: boolean;
  /** Ages tick every second on a terminal even when nothing new arrives. */
  readonly ticks: boolean;
  #baseUrl: string;
  #type: string | undefined;
  #style = style();
  #tty = Deno.stdout.isTerminal();
  #lastDrawn = "";

  constructor(baseUrl: string, type: string | undefined, asJson: boolean) {
    this.#baseUrl = baseUrl;
    this.#type = type;
    this.asJson = asJson;
    this.ticks = this.#tty && !asJson;
  }

  draw(): void {
    const type = this.#type;
    const events = this.events;
    const shown = type === undefined ? events : (events[type] ? { [type]: events[type] } : {});
    if (this.asJson) {
      const text = JSON.stringify(type === undefined ? shown : shown[type] ?? null);
      if (text !== this.#lastDrawn) write(text + "\n");
      this.#lastDrawn = text;
      return;
    }
    const st = this.#style;
    const table = renderTable(shown, Date.now(), st);
    const frame = `${st.dim(`${this.#baseUrl} · ${this.status} · Ctrl-C to exit`)}\n${table}`;
    if (this.#tty) write(`\x1b[H\x1b[2J${frame}`);
    else if (frame !== this.#lastDrawn) write(frame + "\n");
    this.#lastDrawn = frame;
  }
}

function write(text: string): void {
  Deno.stdout.writeSync(new TextEncoder().encode(text));
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
  const screen = new FollowScreen(conn.baseUrl, type, asJson);
  const ticker = screen.ticks ? setInterval(() => screen.draw(), 1000) : undefined;
  try {
    if (await followStream(api, conn, screen, controller.signal)) {
      await poll(api, conn, screen, intervalS, controller.signal);
    }
  } finally {
    clearInterval(ticker);
    Deno.removeSignalListener("SIGINT", stop);
  }
  return 0;
}

/** Follows `GET /stream`; true when the server has none (an older one: 404) and must be polled. */
async function followStream(
  api: TelemetryClient,
  conn: Connection,
  screen: FollowScreen,
  signal: AbortSignal,
): Promise<boolean> {
  try {
    for await (const item of api.follow({ signal })) {
      if (item.kind === "snapshot") screen.events = { ...item.current };
      else if (item.kind === "telemetry") {
        screen.events = { ...screen.events, [item.event.type]: item.event };
      } else if (item.kind === "disconnected") {
        screen.status = `reconnecting… (attempt ${item.attempt})`;
        if (!screen.asJson) screen.draw();
        continue;
      } else continue; // a run start or stop changes no reading
      screen.status = "live";
      screen.draw();
    }
    return false;
  } catch (err) {
    if (signal.aborted) return false;
    if (err instanceof TelemetryHttpError && err.status === 404) return true;
    throw clientFailure(err, conn);
  }
}

async function poll(
  api: TelemetryClient,
  conn: Connection,
  screen: FollowScreen,
  intervalS: number,
  signal: AbortSignal,
): Promise<void> {
  while (!signal.aborted) {
    try {
      screen.events = await api.current();
      screen.status = `polling every ${intervalS} s`;
    } catch (err) {
      if (!(err instanceof TelemetryConnectionError)) throw clientFailure(err, conn);
      screen.status = "reconnecting…";
    }
    screen.draw();
    await sleep(intervalS * 1000, signal);
  }
}
