/**
 * `obs-utils telemetry read`: stored events from the files (docs/history.md), as NDJSON (the lines
 * exactly as stored), CSV (RFC 4180) or a table, streamed: memory does not grow with the files.
 * No service is needed; only read permission for the site directory.
 *
 * @example Usage
 * ```ts
 * import { dataValue } from "./read.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(dataValue({ wind: { mps: 2.1 } }, "wind.mps"), 2.1);
 * ```
 *
 * @module
 */

import { readEnv } from "../wire/address.ts";
import { checkEventType, formatTimestamp } from "../wire/event.ts";
import {
  parseTimeBound,
  readHistoryLines,
  type ReadHistoryOptions,
  readHistoryRegions,
  RunNotFoundError,
} from "../store/history.ts";
import { RUN_ID_PATTERN } from "../store/layout.ts";
import { readSiteIdentity } from "../store/site_identity.ts";
import { StorageError } from "../core/errors.ts";
import { csvRow, type CsvValue, eventCells } from "../wire/csv.ts";
import {
  type Aggregate,
  type HistoryBucket,
  parseAggregates,
  parseEvery,
} from "../wire/history.ts";
import { BucketSet } from "../core/buckets.ts";
import { BucketScan } from "../core/bucket_scan.ts";
import { loadTypes, NO_TYPES, TypesFileError, type TypesRegistry } from "../core/types_registry.ts";

// The cells of a data field, here since `read` had it first; wire/csv.ts owns it now.
export { dataValue } from "../wire/csv.ts";
import { printable, terminalJson } from "../wire/terminal_text.ts";
import { DEFAULT_SITE_DIR } from "./flags.ts";
import { Failure, HELP_OPTION, parse, printHelp, UsageError } from "./common.ts";

/** The `--help` text of `read`. */
export const READ_HELP: string = `Usage: obs-utils telemetry read [TYPE...] [options]

Print stored events with since <= ts < until, in file order, from the site
stream's files (or one run's), plain or compressed. No service is needed.

Options:
  --site-dir DIR       Telemetry directory [env OBS_TELEMETRY_SITE_DIR, default telemetry]
  --since T            From T (inclusive)
  --until T            Up to T (exclusive)
  --run RUN_ID         Read that run's stream instead of the site stream
  --format F           ndjson | csv | table [default ndjson]
  --fields A,B.C       Data fields for csv and table, or of buckets (dotted for nested)
                       [default: all data]
  --every D            Print buckets of width D (10s to 7d, aligned to the Unix epoch) per
                       type instead of events: count, and per numeric field the aggregates
  --agg A,B            Aggregates of --every buckets: mean, min, max, last, count
                       [default mean,min,max,last]
  --types FILE         Types registry of the service: with --every, "12.5 m/s" strings of
                       fields with that unit count as numbers [env OBS_TELEMETRY_TYPES]
  --tz ZONE            IANA zone of night dates [env OBS_TELEMETRY_TZ, default the zone
                       the site records in (its .site.json), else the system zone]
  -h, --help           Show this help

T is ISO 8601 with a zone (2026-05-10T03:00:00Z), a night's date (2026-05-10: from
that date's local noon in the zone above) or a duration back from now (90m, 12h, 7d).
`;

const FORMATS = ["ndjson", "csv", "table"] as const;
type Format = typeof FORMATS[number];

/**
 * Buffers text for stdout as bytes and writes it in large pieces; a closed pipe ends the output.
 * Each text is encoded as it comes into one reused buffer: keeping the strings until a flush kept
 * the file chunks they were cut from alive, and the process grew with the files' size.
 */
class Output {
  #encoder = new TextEncoder();
  #buffer = new Uint8Array(256 * 1024);
  #used = 0;
  closed = false;

  async write(text: string): Promise<void> {
    if (this.#used + text.length * 3 > this.#buffer.length) {
      await this.flush();
      if (text.length * 3 > this.#buffer.length) {
        return await this.#send(this.#encoder.encode(text));
      }
    }
    this.#used += this.#encoder.encodeInto(text, this.#buffer.subarray(this.#used)).written;
  }

  async flush(): Promise<void> {
    const bytes = this.#buffer.subarray(0, this.#used);
    this.#used = 0;
    await this.#send(bytes);
  }

  async #send(bytes: Uint8Array): Promise<void> {
    if (bytes.length === 0 || this.closed) return;
    try {
      for (let at = 0; at < bytes.length;) at += await Deno.stdout.write(bytes.subarray(at));
    } catch (err) {
      // `read ... | head` closes the pipe early: the reader has what it wanted.
      if (!(err instanceof Deno.errors.BrokenPipe)) throw err;
      this.closed = true;
    }
  }
}

/** A table streamed in blocks: the first rows set the column widths. */
class TableWriter {
  #out: Output;
  #headers: string[];
  #widths: number[] | undefined;
  #pending: string[][] = [];

  constructor(out: Output, headers: string[]) {
    this.#out = out;
    this.#headers = headers;
  }

  async row(cells: readonly CsvValue[]): Promise<void> {
    // A table is for a terminal: no cell may carry a control character (docs/cli.md).
    const shown = cells.map((c) => printable(typeof c === "string" ? c : String(c)));
    if (this.#widths) return await this.#out.write(this.#format(shown));
    this.#pending.push(shown);
    if (this.#pending.length >= 200) await this.end();
  }

  async end(): Promise<void> {
    if (this.#widths) return;
    const rows = [this.#headers.map(printable), ...this.#pending];
    this.#widths = this.#headers.map((_, i) =>
      Math.min(60, Math.max(...rows.map((r) => r[i]?.length ?? 0)))
    );
    for (const r of rows) await this.#out.write(this.#format(r));
    this.#pending = [];
  }

  #format(cells: string[]): string {
    const w = this.#widths!;
    return cells.map((c, i) => i === cells.length - 1 ? c : c.padEnd(w[i]!)).join("  ")
      .trimEnd() + "\n";
  }
}

/**
 * Runs `obs-utils telemetry read`.
 *
 * @param args The arguments after `telemetry read`.
 * @returns The exit code: 0 when the events were printed (also when none matched).
 * @throws {UsageError} For a bad flag, time, format, field list or type.
 * @throws {Failure} If the site directory or the run does not exist, or a file cannot be read.
 *
 * @example Usage
 * ```ts ignore
 * import { readCommand } from "./read.ts";
 * Deno.exit(await readCommand(["weather", "--since", "12h", "--format", "csv"]));
 * ```
 */
export async function readCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse("read", args, {
    ...HELP_OPTION,
    "site-dir": { type: "string" },
    since: { type: "string" },
    until: { type: "string" },
    run: { type: "string" },
    format: { type: "string" },
    fields: { type: "string" },
    tz: { type: "string" },
    every: { type: "string" },
    agg: { type: "string" },
    types: { type: "string" },
  }, true);
  if (values.help) return printHelp(READ_HELP);
  checkTypes(positionals);
  const format = formatOf(values.format);
  const buckets = bucketsOf(values.every, values.agg);
  const fields = fieldsOf(values.fields, buckets ? "csv" : format);
  const siteDir = values["site-dir"] ?? readEnv("OBS_TELEMETRY_SITE_DIR") ?? DEFAULT_SITE_DIR;
  const chosenZone = chosenTimeZone(values.tz, "read");
  if (values.run !== undefined && !RUN_ID_PATTERN.test(values.run)) {
    throw new UsageError(
      `--run "${values.run}" is not a run id; a run id matches ${RUN_ID_PATTERN.source}`,
      "read",
    );
  }
  await checkSiteDir(siteDir);
  const timeZone = chosenZone ?? await recordedTimeZone(siteDir);
  const { since, until } = timeBounds(values.since, values.until, timeZone, "read");
  const options = { types: positionals, since, until, run: values.run, timeZone };
  if (buckets) {
    const registry = await registryOf(values.types ?? readEnv("OBS_TELEMETRY_TYPES"));
    const unitOf = (type: string, path: string) => registry.get(type)?.fields[path]?.unit;
    return await printBuckets(
      siteDir,
      options,
      format,
      new BucketSet({ ...buckets, fields, unitOf }),
      buckets.everyMs,
    );
  }
  return await printEvents(siteDir, options, format, fields);
}

/** The types registry of `--types` (docs/types.md), whose units make `"12.5 m/s"` a number. */
async function registryOf(file: string | undefined): Promise<TypesRegistry> {
  if (file === undefined) return NO_TYPES;
  try {
    return await loadTypes(file);
  } catch (err) {
    if (err instanceof TypesFileError) throw new Failure(err.message);
    throw err;
  }
}

/** `--every` and `--agg`, checked; `undefined` without `--every`. */
function bucketsOf(
  every: string | undefined,
  agg: string | undefined,
): { everyMs: number; aggregates: Aggregate[] } | undefined {
  if (every === undefined) {
    if (agg !== undefined) throw new UsageError("--agg applies only with --every", "read");
    return undefined;
  }
  let everyMs: number;
  try {
    everyMs = parseEvery(every);
  } catch (err) {
    throw new UsageError(`--${(err as Error).message}`, "read");
  }
  try {
    return { everyMs, aggregates: parseAggregates(agg) };
  } catch (err) {
    throw new UsageError(`--${(err as Error).message}`, "read");
  }
}

function checkTypes(types: readonly string[]): void {
  for (const type of types) {
    const problem = checkEventType(type);
    if (problem) {
      throw new UsageError(`TYPE ${JSON.stringify(type)}: ${problem.replace(/\.$/, "")}`, "read");
    }
  }
}

function formatOf(value: string | undefined): Format {
  const format = (value ?? "ndjson") as Format;
  if (!FORMATS.includes(format)) {
    throw new UsageError(`--format must be ndjson, csv or table, not "${value}"`, "read");
  }
  return format;
}

/** The `--fields` list, checked; `undefined` when absent (csv and table then show all data). */
function fieldsOf(value: string | undefined, format: Format): string[] | undefined {
  if (value === undefined) return undefined;
  if (format === "ndjson") {
    throw new UsageError(
      "--fields applies to --format csv or table; ndjson prints whole lines",
      "read",
    );
  }
  const fields = value.split(",").map((f) => f.trim());
  if (fields.some((f) => f === "" || f.split(".").some((k) => k === ""))) {
    throw new UsageError(
      `--fields must be data field names separated by commas, dotted for nested ones (wind,wind.mps), not "${value}"`,
      "read",
    );
  }
  return fields;
}

/**
 * The zone `--tz` or `OBS_TELEMETRY_TZ` names, checked; `undefined` when neither does (the site's
 * recorded zone then decides, docs/history.md).
 *
 * @param flag The `--tz` flag, if given.
 * @param command The command, for the `--help` hint.
 * @returns The zone, or `undefined`.
 * @throws {UsageError} When it is not an IANA zone.
 *
 * @example Usage
 * ```ts
 * import { chosenTimeZone } from "./read.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(chosenTimeZone("America/Santiago", "read"), "America/Santiago");
 * ```
 */
export function chosenTimeZone(flag: string | undefined, command: string): string | undefined {
  const timeZone = flag ?? readEnv("OBS_TELEMETRY_TZ");
  if (timeZone !== undefined) {
    try {
      Temporal.Now.zonedDateTimeISO(timeZone);
    } catch {
      const source = flag !== undefined ? "--tz" : "OBS_TELEMETRY_TZ";
      throw new UsageError(
        `${source} "${timeZone}" is not an IANA zone such as "UTC" or "America/Santiago"`,
        command,
      );
    }
  }
  return timeZone;
}

/**
 * The zone the site records its nights in, from `<site_dir>/.site.json`; `undefined` (the
 * system zone) for a site that has none yet. A night date means that site's night wherever the
 * files are read.
 *
 * @param siteDir The site directory.
 * @returns The zone, or `undefined`.
 * @throws {Failure} When `.site.json` is damaged.
 *
 * @example Usage
 * ```ts ignore
 * import { recordedTimeZone } from "./read.ts";
 * console.log(await recordedTimeZone("./telemetry"));
 * ```
 */
export async function recordedTimeZone(siteDir: string): Promise<string | undefined> {
  try {
    return (await readSiteIdentity(siteDir))?.zone;
  } catch (err) {
    if (err instanceof StorageError) {
      throw new Failure(`${err.message}; or name the zone with --tz`);
    }
    throw err;
  }
}

/**
 * `--since` and `--until` as epoch milliseconds, both against the same "now".
 *
 * @param sinceText `--since`, if given.
 * @param untilText `--until`, if given.
 * @param timeZone The zone of night dates.
 * @param command The command, for the `--help` hint.
 * @returns The bounds.
 * @throws {UsageError} When a bound is not a time, or `--since` is not before `--until`.
 *
 * @example Usage
 * ```ts
 * import { timeBounds } from "./read.ts";
 * import assert from "node:assert/strict";
 *
 * const { since } = timeBounds("2026-05-10", undefined, "UTC", "read");
 * assert.equal(since, Date.parse("2026-05-10T12:00:00Z"));
 * ```
 */
export function timeBounds(
  sinceText: string | undefined,
  untilText: string | undefined,
  timeZone: string | undefined,
  command: string,
): { since: number | undefined; until: number | undefined } {
  const now = Date.now();
  const bound = (flag: "since" | "until", text: string | undefined) => {
    if (text === undefined) return undefined;
    try {
      return parseTimeBound(text, { timeZone, now: () => now });
    } catch (err) {
      if (err instanceof RangeError) throw new UsageError(`--${flag}: ${err.message}`, command);
      throw err;
    }
  };
  const since = bound("since", sinceText);
  const until = bound("until", untilText);
  if (since !== undefined && until !== undefined && since >= until) {
    throw new UsageError(
      `--since (${formatTimestamp(since)}) must be before --until (${formatTimestamp(until)})`,
      command,
    );
  }
  return { since, until };
}

async function checkSiteDir(siteDir: string): Promise<void> {
  try {
    const info = await Deno.stat(siteDir);
    if (!info.isDirectory) {
      throw new Failure(`${siteDir} is not a directory; pass the site directory with --site-dir`);
    }
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      throw new Failure(
        `The site directory ${siteDir} does not exist; pass it with --site-dir or OBS_TELEMETRY_SITE_DIR`,
      );
    }
    throw err;
  }
}

/** Streams the matching events to stdout in `format`; a closed pipe ends it early, quietly. */
async function printEvents(
  siteDir: string,
  options: ReadHistoryOptions,
  format: Format,
  fields: string[] | undefined,
): Promise<number> {
  const out = new Output();
  const headers = ["seq", "ts", "type", ...(fields ?? ["data"])];
  const table = format === "table"
    ? new TableWriter(out, headers.map((h) => h.toUpperCase()))
    : undefined;
  try {
    // Damage is named on stderr and passed over: the other nights are still printed.
    const lines = readHistoryLines(siteDir, {
      ...options,
      onDamage: warnDamage,
    });
    if (format === "csv") await out.write(csvRow(headers));
    // The lines exactly as stored, except on a terminal: there the same JSON values, with C1
    // and the other characters JSON leaves raw escaped (docs/cli.md).
    const tty = Deno.stdout.isTerminal();
    const asLine = tty ? terminalJson : (line: string) => line;
    // CSV cells too: a file gets them exact, a terminal gets them printable.
    const asCells = tty
      ? (cells: CsvValue[]) => cells.map((c) => typeof c === "string" ? printable(c) : c)
      : (cells: CsvValue[]) => cells;
    for await (const line of lines) {
      if (format === "ndjson") await out.write(asLine(line) + "\n");
      else {
        const cells = eventCells(line, fields);
        if (!cells) continue;
        if (table) await table.row(cells);
        else await out.write(csvRow(asCells(cells)));
      }
      if (out.closed) return 0;
    }
    await table?.end();
    await out.flush();
  } catch (err) {
    if (err instanceof RunNotFoundError) throw new Failure(err.message);
    throw err;
  }
  return 0;
}

/** Damage is named on stderr and passed over (docs/history.md, "Damaged files"). */
function warnDamage(damage: Error): void {
  // deno-lint-ignore no-console
  console.error(printable(`warning: ${damage.message}; what can be read of it is printed.`));
}

/**
 * The columns of buckets in csv and table: `t,type,count`, then `<field>.<agg>` for each field
 * the buckets have (in the order first met) and each aggregate asked for.
 */
function bucketColumns(buckets: readonly HistoryBucket[]): string[][] {
  const fields = new Map<string, string[]>();
  for (const b of buckets) {
    for (const [field, aggs] of Object.entries(b.fields)) {
      if (!fields.has(field)) fields.set(field, Object.keys(aggs));
    }
  }
  return [...fields].flatMap(([field, aggs]) => aggs.map((a) => [field, a]));
}

/** Counts the matching events into `set`, then prints its buckets in `format` (docs/history.md). */
async function printBuckets(
  siteDir: string,
  options: ReadHistoryOptions,
  format: Format,
  set: BucketSet,
  everyMs: number,
): Promise<number> {
  // Lines in the service's own layout are counted without parsing them whole (core/bucket_scan.ts);
  // a line that is no event (hand-damaged) is passed over.
  const scan = new BucketScan(set, { everyMs, strings: true });
  try {
    const raw = readHistoryRegions(siteDir, { ...options, onDamage: warnDamage });
    for await (const { bytes } of raw.regions) scan.addRegion(bytes, raw.filter);
  } catch (err) {
    if (err instanceof RunNotFoundError) throw new Failure(err.message);
    throw err;
  }
  const out = new Output();
  const tty = Deno.stdout.isTerminal();
  if (format === "ndjson") {
    for (const bucket of set.drain()) {
      const text = JSON.stringify(bucket);
      await out.write((tty ? terminalJson(text) : text) + "\n");
      if (out.closed) return 0;
    }
    await out.flush();
    return 0;
  }
  // csv and table need every column before the first row: the buckets are few (one per
  // width and type), so they are held here, never the events.
  const buckets = [...set.drain()];
  const columns = bucketColumns(buckets);
  const headers = ["t", "type", "count", ...columns.map(([f, a]) => `${f}.${a}`)];
  const rowOf = (b: HistoryBucket): CsvValue[] => [
    b.t,
    b.type,
    b.count,
    ...columns.map(([f, a]) => b.fields[f!]?.[a as Aggregate] ?? ""),
  ];
  if (format === "table") {
    const table = new TableWriter(out, headers.map((h) => h.toUpperCase()));
    for (const b of buckets) await table.row(rowOf(b));
    await table.end();
  } else {
    await out.write(csvRow(headers));
    for (const b of buckets) {
      const cells = rowOf(b);
      await out.write(
        csvRow(tty ? cells.map((c) => typeof c === "string" ? printable(c) : c) : cells),
      );
      if (out.closed) return 0;
    }
  }
  await out.flush();
  return 0;
}
