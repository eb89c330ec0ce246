/**
 * `obs-utils telemetry current`: the latest event of each type, as a table or JSON, once or
 * following the service's live stream (`--follow`).
 *
 * @example Usage
 * ```ts
 * import { formatAge } from "./current.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(formatAge(4_000), "4s");
 * ```
 *
 * @module
 */

// deno-lint-ignore-file no-console
import {
  type TelemetryClient,
  TelemetryConnectionError,
  TelemetryHttpError,
} from "../client/client.ts";
import type { Envelope, TelemetryEvent } from "../wire/event.ts";
import type { FieldInfo, TypeInfo } from "../client/client.ts";
import { judgeType } from "../core/freshness.ts";
import type { FieldSpec, TypeSpec } from "../core/types_registry.ts";
import { readEnv } from "../wire/address.ts";
import { sleep } from "../wire/async.ts";
import { printable, terminalJson } from "../wire/terminal_text.ts";
import {
  client,
  clientFailure,
  type Connection,
  connection,
  CONNECTION_HELP,
  CONNECTION_OPTIONS,
  Failure,
  parse,
  parseSeconds,
  printHelp,
  printJson,
  UsageError,
} from "./common.ts";

/** The `--help` text of `current`. */
export const CURRENT_HELP: string = `Usage: obs-utils telemetry current [TYPE] [options]

Show the latest event of each type, or of TYPE only.

Options:
  --json          Print JSON instead of a table
  --follow        Keep watching and redraw on every change (Ctrl-C to exit)
  --interval S    Seconds between polls when the server has no live stream [default 1]
${CONNECTION_HELP}
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
 * import { currentCommand } from "./current.ts";
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
    printJson(JSON.stringify(type === undefined ? events : events[type], null, 2));
  } else {
    const types = await fetchTypes(api, type);
    const table = renderTable(events, Date.now(), { ...style(), ...(types ? { types } : {}) });
    Deno.stdout.writeSync(new TextEncoder().encode(table));
  }
  return 0;
}

/**
 * The registry of `GET /types`, limited to TYPE when one is asked for; `undefined` when the
 * server has none (an older one answers 404) or refuses it: the table is then shown without
 * states.
 */
async function fetchTypes(
  api: TelemetryClient,
  type: string | undefined,
  signal?: AbortSignal,
): Promise<Record<string, TypeInfo> | undefined> {
  try {
    const types = await api.types(signal ? { signal } : {});
    if (type === undefined) return types;
    return types[type] ? { [type]: types[type] } : {};
  } catch {
    return undefined;
  }
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
  red: (s: string) => string;
  yellow: (s: string) => string;
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
  return { bold: wrap("1"), dim: wrap("2"), red: wrap("1;31"), yellow: wrap("33"), width };
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
 * The stream a snapshot event's seq counts in, as the event stream's ids name it: `site:12`, or
 * `run:<run_id>:4` for an event of a run (the snapshot holds the run copy, docs/storage.md).
 */
function streamSeq(e: Envelope): string {
  return typeof e.meta.run_id === "string" ? `run:${e.meta.run_id}:${e.seq}` : `site:${e.seq}`;
}

/** `TS` as the width allows: the full ISO time, the UTC time of day, or nothing. */
function shortTs(ts: string, mode: "full" | "time" | "none"): string {
  if (mode === "full") return ts;
  const m = /T(\d\d:\d\d:\d\d)/.exec(ts);
  return m ? `${m[1]}Z` : ts;
}

function clip(text: string, max: number): string {
  return text.length <= max ? text : text.slice(0, Math.max(max - 1, 1)) + "…";
}

/** A type's registry entry as `GET /types` gives it: what the table judges states with. */
export interface TableTypeInfo {
  /** Whether the type is critical. */
  readonly critical: boolean;
  /** Seconds after `ts` the type is stale, or `null`. */
  readonly stale_after_s: number | null;
  /** Dashboard order, or `null`. */
  readonly order: number | null;
  /** Registered fields by dotted path. */
  readonly fields: Readonly<Record<string, FieldInfo>>;
}

/** Options of {@linkcode renderTable}. */
export interface TableOptions {
  /**
   * Terminal width: at 100 columns and more `TS` is the full ISO time, from 70 the UTC time of
   * day, below that it is left out; no line is longer than the width.
   * @default {120}
   */
  width?: number;
  /** Styles the header. */
  bold?: (s: string) => string;
  /** Styles quiet text. */
  dim?: (s: string) => string;
  /** Styles `ALARM` and `STALE`. */
  red?: (s: string) => string;
  /** Styles `warn`. */
  yellow?: (s: string) => string;
  /**
   * The types registry as `GET /types` gives it. With registered types the table gets a `STATE`
   * column (ok, warn, ALARM, STALE), lists registered types never seen, and ends with one `!`
   * line of reasons per type that is not ok.
   */
  types?: Readonly<Record<string, TableTypeInfo>>;
}

function hasRegistry(types: Readonly<Record<string, TableTypeInfo>> | undefined): boolean {
  return types !== undefined &&
    Object.values(types).some((t) =>
      t.critical || t.stale_after_s !== null || Object.keys(t.fields ?? {}).length > 0
    );
}

function toSpec(info: TableTypeInfo): TypeSpec {
  return {
    critical: info.critical,
    // The server validated the registry; its JSON values are what FieldSpec describes.
    fields: (info.fields ?? {}) as Readonly<Record<string, FieldSpec>>,
    ...(info.stale_after_s !== null ? { stale_after_s: info.stale_after_s } : {}),
    ...(info.order !== null ? { order: info.order } : {}),
  };
}

/**
 * Renders the current events as an aligned table: type, (state,) stream and seq, ts, age, data.
 *
 * @param events Events keyed by type.
 * @param now The current time in epoch milliseconds, for the age column and the states.
 * @param options Terminal width, styling and the types registry.
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
 * assert.match(table, /weather\s+site:4\s+2026-11-22T03:00:00.000Z\s+5s\s+wind_mps=2.1/);
 * ```
 */
export function renderTable(
  events: Readonly<Record<string, Envelope>>,
  now: number,
  options: TableOptions = {},
): string {
  const {
    width = 120,
    bold = (s: string) => s,
    dim = (s: string) => s,
    red = (s: string) => s,
    yellow = (s: string) => s,
  } = options;
  const types = hasRegistry(options.types) ? options.types! : undefined;
  // Registered types first, in the dashboard's order; then the others as the snapshot has them.
  const names = Object.keys(events);
  if (types) {
    const rank = (t: string) => {
      const info = types[t];
      return info ? [info.order ?? Infinity, info.critical ? 0 : 1] : [Infinity, 2];
    };
    const registered = Object.keys(types).filter((t) => {
      const info = types[t]!;
      return t in events || info.critical || info.stale_after_s !== null;
    });
    const others = names.filter((t) => !(t in types));
    names.length = 0;
    names.push(
      ...registered.toSorted((a, b) => {
        const [x, y] = [rank(a), rank(b)];
        return x[0]! - y[0]! || x[1]! - y[1]! || (a < b ? -1 : a > b ? 1 : 0);
      }),
      ...others,
    );
  }
  if (names.length === 0) return dim("(no events recorded yet)") + "\n";
  const tsMode = width >= 100 ? "full" : width >= 70 ? "time" : "none";
  const header = ["TYPE", ...(types ? ["STATE"] : []), "STREAM:SEQ", "TS", "AGE", "DATA"];
  const reasons: string[] = [];
  const rows = names.map((type) => {
    const e = events[type];
    // Every cell from the service is printable before it is measured (docs/cli.md).
    const cells = [clip(printable(type), tsMode === "none" ? 16 : 24)];
    let paint = (s: string) => s;
    if (types) {
      const info = types[type];
      const status = judgeType(info ? toSpec(info) : undefined, e, now);
      const label = status.state === "alarm" || status.state === "stale"
        ? status.state.toUpperCase()
        : status.state;
      cells.push(label);
      if (label !== "ok") {
        paint = label === "warn" ? yellow : red;
        reasons.push(printable(`! ${type}: ${status.reasons.join("; ")}`));
      }
    }
    cells.push(
      e ? clip(printable(streamSeq(e)), tsMode === "none" ? 16 : 22) : "-",
      e ? printable(shortTs(e.ts, tsMode)) : "-",
      e ? formatAge(now - Date.parse(e.ts)) : "-",
      e ? printable(summarise(e.data)) : "(never seen)",
    );
    return { cells, paint };
  });
  const tsAt = header.indexOf("TS");
  const keep = (cells: string[]) => tsMode === "none" ? cells.filter((_, i) => i !== tsAt) : cells;
  const shownHeader = keep(header);
  const shownRows = rows.map((r) => ({ cells: keep(r.cells), paint: r.paint }));
  const fixedCount = shownHeader.length - 1;
  const widths = shownHeader.slice(0, fixedCount).map((h, i) =>
    Math.max(h.length, ...shownRows.map((r) => r.cells[i]!.length))
  );
  const fit = (text: string) => (text.length > width ? clip(text, width) : text).trimEnd();
  const line = (cells: string[]) =>
    fit(
      `${cells.slice(0, fixedCount).map((c, i) => c.padEnd(widths[i]!)).join("  ")}  ${
        cells[fixedCount]
      }`,
    );
  const stateAt = types ? 1 : -1;
  const body = shownRows.map(({ cells, paint }) => {
    const text = line(cells);
    if (stateAt < 0 || paint === undefined) return text;
    // Colour the state cell only, after fitting (escape codes take no columns).
    const start = widths[0]! + 2;
    const cell = cells[stateAt]!;
    return cell === "ok"
      ? text
      : text.slice(0, start) + paint(cell) + text.slice(start + cell.length);
  });
  return [bold(line(shownHeader)), ...body, ...reasons.map(fit)].join("\n") + "\n";
}

/** What `--follow` shows: the events, the connection status, and the frame last drawn. */
class FollowScreen {
  events: Record<string, TelemetryEvent> = {};
  types: Record<string, TypeInfo> | undefined;
  status = "connecting…";
  /** Whether the service answered since the last failure; until then no table is drawn. */
  answered = false;
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

  /**
   * The service stopped answering: say so, rather than show an empty or old table as if it were
   * the present. JSON output gets one line on stderr per outage.
   */
  disconnected(attempt: number): void {
    const hadData = this.answered;
    this.answered = false;
    this.status = hadData || Object.keys(this.events).length > 0
      ? `disconnected - values may be out of date; reconnecting… (attempt ${attempt})`
      : `no telemetry service answers; retrying… (attempt ${attempt})`;
    if (!this.asJson) this.draw();
    else if (attempt === 1) {
      console.error(`warning: no telemetry service answers at ${this.#baseUrl}; retrying`);
    }
  }

  draw(): void {
    const type = this.#type;
    const events = this.events;
    const shown = type === undefined ? events : (events[type] ? { [type]: events[type] } : {});
    if (this.asJson) {
      const text = JSON.stringify(type === undefined ? shown : shown[type] ?? null);
      if (text !== this.#lastDrawn) write((this.#tty ? terminalJson(text) : text) + "\n");
      this.#lastDrawn = text;
      return;
    }
    const st = this.#style;
    const types = this.types;
    const table = this.answered || Object.keys(shown).length > 0
      ? renderTable(shown, Date.now(), { ...st, ...(types ? { types } : {}) })
      : "";
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
  const refreshTypes = () =>
    void fetchTypes(api, type, controller.signal).then((types) => {
      if (types === undefined || controller.signal.aborted) return;
      screen.types = types;
      if (!asJson) screen.draw();
    });
  const ticker = screen.ticks ? setInterval(() => screen.draw(), 1000) : undefined;
  try {
    if (await followStream(api, conn, screen, controller.signal, refreshTypes)) {
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
  refreshTypes: () => void,
): Promise<boolean> {
  try {
    for await (const item of api.follow({ signal })) {
      if (item.kind === "snapshot") {
        screen.events = { ...item.current };
        screen.answered = true;
        // After every (re)connection: the service may have restarted with another --types.
        refreshTypes();
      } else if (item.kind === "telemetry") {
        screen.events = { ...screen.events, [item.event.type]: item.event };
      } else if (item.kind === "forget") {
        const { [item.type]: _gone, ...rest } = screen.events;
        screen.events = rest;
      } else if (item.kind === "disconnected") {
        screen.disconnected(item.attempt);
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
  let attempt = 0;
  while (!signal.aborted) {
    try {
      screen.events = await api.current();
      screen.answered = true;
      screen.status = `polling every ${intervalS} s`;
    } catch (err) {
      if (!(err instanceof TelemetryConnectionError)) throw clientFailure(err, conn);
      attempt++;
      screen.disconnected(attempt);
      await sleep(intervalS * 1000, signal);
      continue;
    }
    attempt = 0;
    screen.draw();
    await sleep(intervalS * 1000, signal);
  }
}
