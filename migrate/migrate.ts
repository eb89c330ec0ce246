/**
 * The implementation behind the `migrate.ts` entry point; its module documentation is there.
 *
 * @module
 */

import { join, resolve } from "node:path";
import { checkEventType, daysInMonth, describe } from "../wire/event.ts";
import { LOCK_FILE, siteFileName } from "../store/layout.ts";
import { SiteInUseError } from "../core/errors.ts";
import { SiteLock } from "../store/lock.ts";
import { writeFull } from "../store/writer.ts";
import { buildTail, LINE_HEAD, LineSplitter, TAIL_TS_OFFSET } from "../wire/ndjson.ts";
import { exists } from "../store/fs.ts";
import { checkTimeZone, DayKeyer } from "../store/day_key.ts";

/** Name of the file, in the destination, that receives every input line that was not converted. */
export const REJECTS_FILE = "migrate-rejects.ndjson";

/** The value of `meta.migrated_from` on every migrated line (docs/migration.md). */
export const MIGRATED_FROM = "PanFileDB";

const TMP_PREFIX = ".migrate-tmp-";
// `meta` of a migrated line up to the value of `original_id`; a closing brace follows it.
const META_HEAD = `{"migrated_from":${JSON.stringify(MIGRATED_FROM)},"original_id":`;
const DEFAULT_CHUNK_BYTES = 1 << 20;
const DEFAULT_BUFFER_BYTES = 4 << 20;
const TYPE_CACHE_LIMIT = 10_000;

const encoder = new TextEncoder();

/** A stage of a migration, as reported to {@linkcode MigrateOptions.onProgress}. */
export type MigratePhase = "read" | "write" | "commit";

/**
 * Progress of a running migration. `read` reports input bytes and records; `write` reports site
 * files built in the temporary directory; `commit` reports output files renamed into place
 * (site files, then the rejects file).
 *
 * When the collections are merged by date (see the module documentation), site files are
 * sorted and written during `read`, and `write` counts them once the last one is on disk. When a
 * date goes back to a day already written, the migration starts over on the spill path: `read`
 * then begins again at 0 bytes.
 */
export interface MigrateProgress {
  /** The stage the migration is in. */
  readonly phase: MigratePhase;
  /** Input bytes read so far. */
  readonly bytesRead: number;
  /** Size of all input files together. */
  readonly totalBytes: number;
  /** Input lines read so far (records, rejects and blank lines). */
  readonly lines: number;
  /** Records converted so far. */
  readonly records: number;
  /** Lines sent to the rejects file so far. */
  readonly rejects: number;
  /** Output files done in this phase (always 0 while reading). */
  readonly filesDone: number;
  /** Output files of this phase (0 while reading, when it is not yet known). */
  readonly filesTotal: number;
}

/** Options of {@linkcode migrate}. */
export interface MigrateOptions {
  /**
   * Replace target files that already exist instead of failing with
   * {@linkcode MigrateConflictError}.
   * @default {false}
   */
  force?: boolean | undefined;
  /**
   * Read and convert everything, report what would be written, write nothing (the destination
   * is not even created). Existing targets do not fail a dry run: without `force`
   * {@linkcode MigrateSummary.conflicts} lists them (the real run would refuse), with `force`
   * {@linkcode MigrateSummary.replaced} does.
   * @default {false}
   */
  dryRun?: boolean | undefined;
  /**
   * How records are grouped into site files: `"date"`, the calendar date written in the
   * record's `date` (docs/migration.md, docs/migration.md); or `"night"`, the local-noon night of its `ts` in
   * `timeZone`, as the live service names its files (docs/storage.md, docs/history.md).
   * @default {"date"}
   */
  groupBy?: MigrateGroupBy | undefined;
  /**
   * IANA time zone of the nights, with `groupBy: "night"` only.
   * @default {the system zone}
   */
  timeZone?: string | undefined;
  /**
   * Called synchronously after every input chunk, every site file built and every file
   * committed, for example to draw a progress line (see {@linkcode MigrateProgress} for the
   * phases). An exception it throws aborts the run.
   */
  onProgress?: ((progress: MigrateProgress) => void) | undefined;
  /** Aborts the migration; the temporary directory is removed and `signal.reason` is thrown. */
  signal?: AbortSignal | undefined;
  /**
   * Bytes read from an input file at a time (at most 64 KiB while the collections are merged).
   * @default {1048576}
   */
  chunkBytes?: number | undefined;
  /**
   * Converted text (in UTF-16 code units, about bytes for ASCII) held in memory before it is
   * appended to the per-day spill files, or, while merging, rejected lines held before they are
   * appended to per-collection spill files. Memory grows with it, and with the largest output
   * day.
   * @default {4194304}
   */
  bufferBytes?: number | undefined;
}

/** How {@linkcode migrate} groups records into site files (see {@linkcode MigrateOptions.groupBy}). */
export type MigrateGroupBy = "date" | "night";

/** One line that was (or, in a dry run, would be) sent to the rejects file. */
export interface MigrateReject {
  /** Path of the input file relative to the source directory. */
  readonly file: string;
  /** 1-based line number in that file. */
  readonly line: number;
  /** Why it was not converted. */
  readonly reason: string;
}

/** How many rejected lines {@linkcode MigrateSummary.rejectSamples} keeps. */
export const REJECT_SAMPLES = 20;

/** What one input file contributed, in {@linkcode MigrateSummary.inputs}. */
export interface MigrateInputSummary {
  /** Path relative to the source directory, with `/` separators. */
  readonly path: string;
  /** Collection name: the file name without `.json`. */
  readonly collection: string;
  /** Size in bytes. */
  readonly bytes: number;
  /** Lines read, blank and rejected ones included. */
  readonly lines: number;
  /** Records converted. */
  readonly records: number;
  /** Lines sent to the rejects file. */
  readonly rejects: number;
  /** Blank lines skipped. */
  readonly blankLines: number;
}

/** One site file written (or, in a dry run, that would be written). */
export interface MigrateFileSummary {
  /** File name, `site_YYYYMMDD.ndjson`. */
  readonly name: string;
  /** Absolute path in the destination. */
  readonly path: string;
  /** Number of lines (events). */
  readonly lines: number;
}

/** A file or directory under the source that was not read, with the reason. */
export interface MigrateSkipped {
  /** Path relative to the source directory, with `/` separators. */
  readonly path: string;
  /** Why it was not read. */
  readonly reason: string;
}

/** The result of {@linkcode migrate}. */
export interface MigrateSummary {
  /** Absolute source directory. */
  readonly source: string;
  /** Absolute destination directory. */
  readonly dest: string;
  /** Whether this was a dry run (nothing written). */
  readonly dryRun: boolean;
  /** Records converted, all collections together. */
  readonly records: number;
  /** Records converted per collection name, keys in sorted order. */
  readonly collections: Readonly<Record<string, number>>;
  /** Every input file read, in processing order. */
  readonly inputs: readonly MigrateInputSummary[];
  /** Site files written, sorted by name. */
  readonly files: readonly MigrateFileSummary[];
  /** Lines sent to the rejects file. */
  readonly rejects: number;
  /** Absolute path of the rejects file (written even when empty, except in a dry run). */
  readonly rejectsFile: string;
  /** Blank lines skipped. */
  readonly blankLines: number;
  /** Files and directories under the source that were not read (`current_*.json`, ...). */
  readonly skipped: readonly MigrateSkipped[];
  /** Existing files replaced because of `force` (or that would be, in a dry run). */
  readonly replaced: readonly string[];
  /**
   * In a dry run without `force`: the existing target files a real run would refuse to
   * overwrite. Always empty otherwise (a real run throws {@linkcode MigrateConflictError}).
   */
  readonly conflicts: readonly string[];
  /** The first {@linkcode REJECT_SAMPLES} rejected lines, in reading order. */
  readonly rejectSamples: readonly MigrateReject[];
  /** How records were grouped into files. */
  readonly groupBy: MigrateGroupBy;
  /** Input bytes read. */
  readonly bytesRead: number;
  /** Wall-clock duration in milliseconds. */
  readonly elapsedMs: number;
  /** Records converted per second of `elapsedMs`. */
  readonly recordsPerSecond: number;
}

/**
 * A migration that cannot start or go on: the source is missing or unreadable, the destination
 * is not a writable directory, or a telemetry server is using the destination.
 *
 * @example Usage
 * ```ts ignore
 * import { migrate, MigrateError } from "@obs-utils/telemetry/migrate";
 *
 * try {
 *   await migrate("./legacy", "./telemetry");
 * } catch (err) {
 *   if (!(err instanceof MigrateError)) throw err;
 *   console.error(err.message);
 * }
 * ```
 */
export class MigrateError extends Error {
  /**
   * Creates the error.
   *
   * @param message What failed and what to change.
   * @param options `cause`: the underlying error.
   */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "MigrateError";
  }
}

/**
 * Target files already exist in the destination and `force` was not set. Nothing was written.
 *
 * @example Usage
 * ```ts ignore
 * import { migrate, MigrateConflictError } from "@obs-utils/telemetry/migrate";
 *
 * try {
 *   await migrate("./legacy", "./telemetry");
 * } catch (err) {
 *   if (!(err instanceof MigrateConflictError)) throw err;
 *   console.error(`already there: ${err.files.join(", ")}`);
 * }
 * ```
 */
export class MigrateConflictError extends MigrateError {
  /** Absolute paths of the existing target files, sorted. */
  readonly files: readonly string[];

  /**
   * Creates the error, naming the first five files in the message.
   *
   * @param dest The destination directory.
   * @param files Absolute paths of the existing target files.
   */
  constructor(dest: string, files: readonly string[]) {
    const shown = files.slice(0, 5).map((f) => `"${f}"`).join(", ");
    const more = files.length > 5 ? ` and ${files.length - 5} more` : "";
    super(
      `Cannot migrate into "${dest}": ${files.length} target file${
        files.length === 1 ? "" : "s"
      } already exist${files.length === 1 ? "s" : ""} (${shown}${more}), move ${
        files.length === 1 ? "it" : "them"
      } away or rerun with --force (option force: true) to replace ${
        files.length === 1 ? "it" : "them"
      }`,
    );
    this.name = "MigrateConflictError";
    this.files = files;
  }
}

// --- legacy dates --------------------------------------------------------------------------------

const LEGACY_DATE = /^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})?$/;

interface DateProblem {
  readonly syntax: boolean;
  readonly reason: string;
}

function digits2(s: string, i: number): number {
  return (s.charCodeAt(i) - 48) * 10 + s.charCodeAt(i + 1) - 48;
}

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
function daysFromCivil(year: number, month: number, day: number): number {
  const y = month <= 2 ? year - 1 : year;
  const era = Math.floor(y / 400);
  const yoe = y - era * 400;
  const doy = Math.floor((153 * (month + (month > 2 ? -3 : 9)) + 2) / 5) + day - 1;
  const doe = yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy;
  return era * 146097 + doe - 719468;
}

function clip(text: string, max = 80): string {
  return text.length > max ? `${text.slice(0, max)}…` : text;
}

// The hot path: no Temporal, no Date for zone-less and UTC dates, no exceptions.
function convertDate(s: string): string | DateProblem {
  if (!LEGACY_DATE.test(s)) {
    return {
      syntax: true,
      reason: `date "${
        clip(s)
      }" is not YYYY-MM-DD[T ]HH:MM:SS[.fffffffff], optionally ending in Z or ±HH:MM`,
    };
  }
  const year = digits2(s, 0) * 100 + digits2(s, 2);
  const month = digits2(s, 5);
  const day = digits2(s, 8);
  if (year < 1 || month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) {
    return { syntax: false, reason: `date "${s}" is not a calendar date` };
  }
  const hour = digits2(s, 11), minute = digits2(s, 14), second = digits2(s, 17);
  if (hour > 23 || minute > 59 || second > 59) {
    return { syntax: false, reason: `date "${s}" has no such time of day` };
  }
  let end = 19;
  let millis = "000";
  if (s.charCodeAt(19) === 46) {
    end = 20;
    while (end < s.length && s.charCodeAt(end) >= 48 && s.charCodeAt(end) <= 57) end++;
    const fraction = s.slice(20, end);
    millis = fraction.length >= 3 ? fraction.slice(0, 3) : fraction.padEnd(3, "0");
  }
  const sign = s.charCodeAt(end); // NaN (no zone), Z, + or -
  if (sign === 43 || sign === 45) {
    const offH = digits2(s, end + 1), offM = digits2(s, end + 4);
    if (offH > 23 || offM > 59) {
      return { syntax: false, reason: `date "${s}" has an impossible UTC offset` };
    }
    const offset = (offH * 60 + offM) * 60_000;
    if (offset !== 0) {
      const epoch = daysFromCivil(year, month, day) * 86_400_000 + hour * 3_600_000 +
        minute * 60_000 + second * 1000 + Number(millis) - (sign === 45 ? -offset : offset);
      const ts = new Date(epoch).toISOString();
      if (ts.length !== 24 || ts < "0001") {
        return { syntax: false, reason: `date "${s}" is outside the years 0001 to 9999 in UTC` };
      }
      return ts;
    }
  }
  return `${s.slice(0, 10)}T${s.slice(11, 19)}.${millis}Z`;
}

/**
 * Converts a legacy `date` string into the envelope's `ts`: UTC, milliseconds, trailing `Z`.
 * Accepts `YYYY-MM-DDTHH:MM:SS[.f{1,9}]` with `T` or a space, optionally ending in `Z` or
 * `±HH:MM`; a date without a zone is UTC. Extra fraction digits are truncated.
 *
 * @param text The legacy date, for example `"2026-03-05 22:10:00.123456"`.
 * @returns The UTC timestamp, for example `"2026-03-05T22:10:00.123Z"`.
 * @throws {SyntaxError} If `text` does not have the legacy date shape.
 * @throws {RangeError} If it names a date, time of day or offset that does not exist
 * (February 30th, 24:00, +25:00) or falls outside the years 0001 to 9999 in UTC.
 *
 * @example Usage
 * ```ts
 * import { legacyDateToTs } from "@obs-utils/telemetry/migrate";
 * import assert from "node:assert/strict";
 *
 * assert.equal(legacyDateToTs("2026-03-05 22:10:00.123456"), "2026-03-05T22:10:00.123Z");
 * assert.equal(legacyDateToTs("2026-03-05T23:30:00-05:00"), "2026-03-06T04:30:00.000Z");
 * assert.throws(() => legacyDateToTs("2026-02-30T00:00:00"), RangeError);
 * ```
 */
export function legacyDateToTs(text: string): string {
  const result = convertDate(text);
  if (typeof result === "string") return result;
  const message = `Cannot convert legacy ${result.reason}`;
  throw result.syntax ? new SyntaxError(message) : new RangeError(message);
}

// --- file system helpers -------------------------------------------------------------------------

function isPermissionError(err: unknown): boolean {
  return err instanceof Deno.errors.NotCapable || err instanceof Deno.errors.PermissionDenied;
}

// Turns a permission failure into a MigrateError that says which kind it is: a Deno permission
// the command lacks (name the flag), or the operating system refusing (name the path; no Deno
// flag helps then). Anything else propagates.
async function withPermissionHint<T>(
  action: () => Promise<T>,
  what: string,
  flag: string,
): Promise<T> {
  try {
    return await action();
  } catch (err) {
    if (!isPermissionError(err)) throw err;
    throw permissionError(err, what, flag);
  }
}

function permissionError(err: unknown, what: string, flag: string): MigrateError {
  if (err instanceof Deno.errors.NotCapable) {
    return new MigrateError(`Cannot ${what}: permission denied, add ${flag}`, { cause: err });
  }
  return new MigrateError(
    `Cannot ${what}: the operating system denied access (${
      osDetail(err)
    }); check the owner and mode of that path (ls -ld) or run as a user who may use it`,
    { cause: err },
  );
}

/** An OS error's message without Deno's "(os error N)" noise: `Permission denied: readdir '/x'`. */
function osDetail(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return clip(message.replace(/\s*\(os error \d+\)/, ""), 200);
}

// --- discovery -----------------------------------------------------------------------------------

interface InputFile {
  readonly abs: string;
  readonly rel: string;
  readonly collection: string;
  readonly bytes: number;
}

async function checkSource(source: string): Promise<void> {
  let info: Deno.FileInfo;
  try {
    info = await Deno.stat(source);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      throw new MigrateError(
        `Cannot migrate from "${source}": no such directory, pass the legacy database directory with --source`,
        { cause: err },
      );
    }
    if (isPermissionError(err)) {
      throw permissionError(err, `read "${source}"`, `--allow-read=${source}`);
    }
    throw err;
  }
  if (!info.isDirectory) {
    throw new MigrateError(
      `Cannot migrate from "${source}": it is a file, not a directory, pass the directory that holds the <collection>.json files with --source`,
    );
  }
}

async function discover(
  source: string,
): Promise<{ inputs: InputFile[]; skipped: MigrateSkipped[] }> {
  const inputs: InputFile[] = [];
  const skipped: MigrateSkipped[] = [];
  function consider(abs: string, rel: string, name: string, bytes: number): void {
    if (!name.endsWith(".json")) return;
    if (name.startsWith("current_")) {
      skipped.push({ path: rel, reason: "legacy snapshot file (current_*.json), ignored" });
      return;
    }
    inputs.push({ abs, rel, collection: name.slice(0, -".json".length), bytes });
  }
  async function walk(dir: string, prefix: string): Promise<void> {
    const entries: Deno.DirEntry[] = [];
    for await (const entry of Deno.readDir(dir)) entries.push(entry);
    for (const entry of entries) {
      const abs = join(dir, entry.name);
      const rel = prefix === "" ? entry.name : `${prefix}/${entry.name}`;
      if (entry.isDirectory) {
        // A crashed run's scratch space is never input (it holds only .ndjson, but be sure).
        if (!entry.name.startsWith(TMP_PREFIX)) await walk(abs, rel);
      } else if (entry.isFile) {
        if (entry.name.endsWith(".json")) {
          consider(abs, rel, entry.name, (await Deno.stat(abs)).size);
        }
      } else if (entry.isSymlink) {
        let info: Deno.FileInfo;
        try {
          info = await Deno.stat(abs);
        } catch (err) {
          if (!(err instanceof Deno.errors.NotFound)) throw err;
          if (entry.name.endsWith(".json")) {
            skipped.push({ path: rel, reason: "broken symbolic link" });
          }
          continue;
        }
        if (info.isDirectory) {
          // Not followed: a link back up the tree would loop, and the target may be read twice.
          skipped.push({ path: rel, reason: "symbolic link to a directory, not followed" });
        } else if (info.isFile) {
          consider(abs, rel, entry.name, info.size);
        }
      }
    }
  }
  await withPermissionHint(
    () => walk(source, ""),
    `read "${source}"`,
    `--allow-read=${source}`,
  );
  // Code-unit order of the relative paths: the same on every machine and file system.
  inputs.sort((a, b) => (a.rel < b.rel ? -1 : a.rel > b.rel ? 1 : 0));
  skipped.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  return { inputs, skipped };
}

// --- converting lines ----------------------------------------------------------------------------

async function appendBytes(path: string, chunks: readonly Uint8Array[]): Promise<void> {
  const file = await Deno.open(path, { append: true, create: true });
  try {
    for (const chunk of chunks) await writeFull(file, chunk);
  } finally {
    file.close();
  }
}

/**
 * Converted lines on their way to one file. Lines are joined into a short rope and encoded
 * every {@linkcode ENCODE_CHARS} code units: encoding a long rope once is several times cheaper
 * than encoding each line, and short-lived ropes die young instead of growing V8's old
 * generation (which would show as resident memory).
 */
interface Sink {
  text: string;
  chunks: Uint8Array[];
}

const ENCODE_CHARS = 1 << 16;

interface FileCounts {
  lines: number;
  records: number;
  rejects: number;
  blankLines: number;
}

/** A type's JSON text when the service accepts it, else why not. */
type TypeVerdict = string | { readonly reason: string };

/** What the lines of one input file are converted with, and where its counts and rejects go. */
interface FileState {
  readonly rel: string;
  readonly collectionType: TypeVerdict;
  readonly counts: FileCounts;
  readonly rejects: Sink;
}

function fileState(input: InputFile, rejects: Sink): FileState {
  const problem = checkEventType(input.collection);
  return {
    rel: input.rel,
    collectionType: problem === undefined
      ? JSON.stringify(input.collection)
      : { reason: `record has no "type" and the collection name is not a usable type: ${problem}` },
    counts: { lines: 0, records: 0, rejects: 0, blankLines: 0 },
    rejects,
  };
}

/**
 * Converts lines one at a time and counts everything. {@linkcode Converter.line} returns whether
 * the line was a record; if so `day` and `tail` describe it until the next call. Rejects go
 * to the selected file's sink (or are only counted, when tails are not built: a dry run).
 */
class Converter {
  records = 0;
  rejects = 0;
  blankLines = 0;
  lines = 0;
  bytesRead = 0;
  /** UTF-16 code units appended to sinks since the owner last reset it after a flush. */
  pending = 0;
  /** The last record's written date, `YYYY-MM-DD`. */
  day = "";
  /** The last record's line without its `{"seq":N` head, newline included; "" if not built. */
  tail = "";
  readonly build: boolean;
  /** The first rejected lines, for the summary. */
  readonly samples: MigrateReject[] = [];
  #types: Map<string, TypeVerdict> = new Map();
  #file: FileState | undefined;
  #nights: DayKeyer | undefined;

  /**
   * @param build Whether to build tails and reject lines, or only count (dry run).
   * @param nights Group by the local-noon night of `ts` in this keyer's zone; by written date
   *   when `undefined`.
   */
  constructor(build: boolean, nights?: DayKeyer) {
    this.build = build;
    this.#nights = nights;
  }

  /** Zeroes every count, for a run that starts over. */
  reset(): void {
    this.records =
      this.rejects =
      this.blankLines =
      this.lines =
      this.bytesRead =
      this.pending =
        0;
    this.samples.length = 0;
  }

  /** Sets the file whose lines come next. */
  select(file: FileState): void {
    this.#file = file;
  }

  append(sink: Sink, line: string): void {
    sink.text += line;
    this.pending += line.length;
    if (sink.text.length >= ENCODE_CHARS) {
      sink.chunks.push(encoder.encode(sink.text));
      sink.text = "";
    }
  }

  line(text: string, lineNo: number): boolean {
    const counts = (this.#file as FileState).counts;
    this.lines++;
    counts.lines++;
    if (isBlank(text)) {
      this.blankLines++;
      counts.blankLines++;
      return false;
    }
    const record = parseRecord(text);
    if (typeof record === "string") return this.#reject(text, lineNo, record);
    const date = record.date;
    if (typeof date !== "string") {
      return this.#reject(
        text,
        lineNo,
        date === undefined ? `record has no "date"` : `"date" is ${describe(date)}, not a string`,
      );
    }
    const ts = convertDate(date);
    if (typeof ts !== "string") return this.#reject(text, lineNo, ts.reason);
    const typeJson = this.#typeJson(record.type);
    if (typeof typeJson !== "string") return this.#reject(text, lineNo, typeJson.reason);
    this.records++;
    counts.records++;
    this.day = this.#nights === undefined ? date.slice(0, 10) : nightOf(this.#nights, ts);
    this.tail = this.build ? `${migratedTail(record, ts, typeJson)}\n` : "";
    return true;
  }

  /** The record's `type` as JSON, the collection's when it has none; or why it is refused. */
  #typeJson(type: unknown): TypeVerdict {
    if (type === undefined || type === null) return (this.#file as FileState).collectionType;
    if (typeof type === "string") return this.#types.get(type) ?? this.#checkType(type);
    return { reason: `"type" is ${describe(type)}, not a string` };
  }

  #checkType(type: string): TypeVerdict {
    const problem = checkEventType(type);
    const verdict: TypeVerdict = problem === undefined
      ? JSON.stringify(type)
      : { reason: `"type" cannot be used: ${problem}` };
    if (this.#types.size < TYPE_CACHE_LIMIT) this.#types.set(type, verdict);
    return verdict;
  }

  #reject(text: string, lineNo: number, reason: string): false {
    const file = this.#file as FileState;
    this.rejects++;
    file.counts.rejects++;
    if (this.samples.length < REJECT_SAMPLES) {
      this.samples.push({ file: file.rel, line: lineNo, reason });
    }
    if (!this.build) return false;
    this.append(
      file.rejects,
      `{"file":${JSON.stringify(file.rel)},"line":${lineNo},"reason":${
        JSON.stringify(reason)
      },"text":${JSON.stringify(text)}}\n`,
    );
    return false;
  }
}

/** The night of a converted `ts` as `YYYY-MM-DD`, the form the written-date grouping uses. */
function nightOf(keyer: DayKeyer, ts: string): string {
  const key = keyer.keyFor(Date.parse(ts));
  return `${key.slice(0, 4)}-${key.slice(4, 6)}-${key.slice(6, 8)}`;
}

// Blank: empty or whitespace only; the first character decides cheaply for almost every line.
function isBlank(text: string): boolean {
  const first = text.charCodeAt(0);
  return (first <= 32 || first === 0xfeff || Number.isNaN(first)) && text.trim() === "";
}

/** A line's record, or why it is not one (a string). */
function parseRecord(text: string): Record<string, unknown> | string {
  let rec: unknown;
  try {
    rec = JSON.parse(text);
  } catch (err) {
    if (!(err instanceof SyntaxError)) throw err;
    return `line is not valid JSON: ${clip(err.message, 120)}`;
  }
  if (typeof rec !== "object" || rec === null || Array.isArray(rec)) {
    return `record is ${describe(rec)}, not a JSON object`;
  }
  return rec as Record<string, unknown>;
}

/** The tail of a migrated line (see {@linkcode buildTail}): its `data` and `meta` per docs/migration.md. */
function migratedTail(record: Record<string, unknown>, ts: string, typeJson: string): string {
  const data = record.data;
  const dataJson = typeof data === "object" && data !== null && !Array.isArray(data)
    ? JSON.stringify(data)
    : data === undefined
    ? "{}"
    : `{"value":${JSON.stringify(data)}}`;
  const id = record._id;
  const idJson = id === undefined ? "null" : JSON.stringify(id);
  return buildTail(ts, typeJson, dataJson, `${META_HEAD}${idJson}}`);
}

async function drain(sink: Sink, path: string): Promise<void> {
  if (sink.text !== "") {
    sink.chunks.push(encoder.encode(sink.text));
    sink.text = "";
  }
  if (sink.chunks.length === 0) return;
  const chunks = sink.chunks;
  sink.chunks = [];
  await appendBytes(path, chunks);
}

function siteName(date: string): string {
  return siteFileName(date.replaceAll("-", ""));
}

function openInput(input: InputFile): Promise<Deno.FsFile> {
  return withPermissionHint(
    () => Deno.open(input.abs, { read: true }),
    `read "${input.abs}"`,
    `--allow-read=${input.abs}`,
  );
}

// --- the spill path: read every input in turn, spill per day, then sort each day ----------------

interface Bucket extends Sink {
  /** `YYYY-MM-DD` as written in the records' `date`. */
  readonly date: string;
  lines: number;
}

/**
 * Groups converted lines by written date and spills them to `spill-YYYY-MM-DD.ndjson` files (or
 * only counts, in a dry run). Used when the inputs cannot be merged by date: a dry run, too many
 * inputs to keep open together, or dates that go back to a day already written.
 */
class Collector {
  readonly buckets: Map<string, Bucket> = new Map();
  readonly conv: Converter;
  #spillDir: string | undefined;
  #budget: number;
  #rejects: Sink = { text: "", chunks: [] };
  #lastDate = "";
  #lastBucket: Bucket | undefined;

  /**
   * @param conv Converts the lines; builds tails only when `spillDir` is set.
   * @param spillDir Where to spill converted lines; `undefined` to count only (dry run).
   * @param budget UTF-16 code units of converted text held before a flush is due.
   */
  constructor(conv: Converter, spillDir: string | undefined, budget: number) {
    this.conv = conv;
    this.#spillDir = spillDir;
    this.#budget = budget;
  }

  get flushDue(): boolean {
    return this.conv.pending >= this.#budget;
  }

  /** Appends every day's pending text to its spill file, and the rejects to theirs. */
  async flush(): Promise<void> {
    const dir = this.#spillDir;
    if (dir === undefined) return;
    for (const bucket of this.buckets.values()) await drain(bucket, spillPath(dir, bucket.date));
    await drain(this.#rejects, join(dir, REJECTS_FILE));
    this.conv.pending = 0;
  }

  startFile(input: InputFile): FileCounts {
    const file = fileState(input, this.#rejects);
    this.conv.select(file);
    return file.counts;
  }

  line(text: string, lineNo: number): void {
    const conv = this.conv;
    if (!conv.line(text, lineNo)) return;
    const bucket = this.#bucket(conv.day);
    bucket.lines++;
    if (conv.build) conv.append(bucket, conv.tail);
  }

  /** The bucket of a written date, `YYYY-MM-DD`; consecutive records mostly share one. */
  #bucket(key: string): Bucket {
    let bucket = this.#lastBucket;
    if (key !== this.#lastDate || bucket === undefined) {
      bucket = this.buckets.get(key);
      if (bucket === undefined) {
        bucket = { date: key, lines: 0, text: "", chunks: [] };
        this.buckets.set(key, bucket);
      }
      this.#lastDate = key;
      this.#lastBucket = bucket;
    }
    return bucket;
  }
}

function spillPath(dir: string, date: string): string {
  return join(dir, `spill-${date}.ndjson`);
}

interface ReadContext {
  readonly collector: Collector;
  readonly buffer: Uint8Array;
  readonly progress: () => void;
  readonly signal: AbortSignal | undefined;
}

async function readInput(input: InputFile, ctx: ReadContext): Promise<FileCounts> {
  const { collector, buffer } = ctx;
  const counts = collector.startFile(input);
  const file = await openInput(input);
  try {
    // Non-fatal decoding: the legacy writer emitted ASCII-only JSON (Python's ensure_ascii), so a
    // stray invalid byte can only sit in a line that is broken anyway.
    const splitter = new LineSplitter();
    const onLine = (line: string, lineNo: number) => collector.line(line, lineNo);
    while (true) {
      ctx.signal?.throwIfAborted();
      const n = await file.read(buffer);
      if (n === null) break;
      collector.conv.bytesRead += n;
      splitter.push(buffer.subarray(0, n), onLine);
      if (collector.flushDue) await collector.flush();
      ctx.progress();
    }
    splitter.end(onLine);
  } finally {
    file.close();
  }
  return counts;
}

// --- pass 2: sort each day and write it ----------------------------------------------------------

const SEQ_HEAD = encoder.encode(LINE_HEAD);
// Digits of the largest seq a line can have (Number.MAX_SAFE_INTEGER).
const MAX_SEQ_DIGITS = 16;

function digit(bytes: Uint8Array, i: number): number {
  return (bytes[i] as number) - 48;
}

function twoDigits(bytes: Uint8Array, i: number): number {
  return digit(bytes, i) * 10 + digit(bytes, i + 1);
}

/**
 * Byte buffers reused from one day to the next: fresh ones per day would be external memory that
 * V8 frees only lazily.
 */
interface DayBuffers {
  input: Uint8Array;
  output: Uint8Array;
}

async function readInto(path: string, buffers: DayBuffers): Promise<Uint8Array> {
  const file = await Deno.open(path, { read: true });
  try {
    const size = (await file.stat()).size;
    if (buffers.input.length < size) buffers.input = new Uint8Array(Math.ceil(size * 1.25));
    const bytes = buffers.input.subarray(0, size);
    let done = 0;
    while (done < size) {
      const n = await file.read(bytes.subarray(done));
      if (n === null) throw new Error(`Cannot read "${path}": it shrank while being read`);
      done += n;
    }
    return bytes;
  } finally {
    file.close();
  }
}

/** Sorts and writes one day from its spill file (see {@linkcode writeSorted}), then removes it. */
async function writeDay(tmp: string, date: string, buffers: DayBuffers): Promise<Deno.FsFile> {
  const spill = spillPath(tmp, date);
  const file = await writeSorted(tmp, date, await readInto(spill, buffers), buffers);
  await Deno.remove(spill);
  return file;
}

/**
 * Sorts one day's converted lines (tails ending in "\n", in input order) by `ts` (stable) and
 * writes them with `seq` 1..n to `<tmp>/site_YYYYMMDD.ndjson`, working on bytes only. Returns the
 * open file, written but not yet synced, so the caller can overlap the fdatasync with the next
 * day's work.
 */
async function writeSorted(
  tmp: string,
  date: string,
  bytes: Uint8Array,
  buffers: DayBuffers,
): Promise<Deno.FsFile> {
  const starts: number[] = [];
  for (let p = 0; p < bytes.length;) {
    starts.push(p);
    p = bytes.indexOf(10, p) + 1; // every spilled line ends in "\n"
  }
  const n = starts.length;
  // Epoch milliseconds from the fixed-width `YYYY-MM-DDTHH:MM:SS.mmmZ` near each tail's head.
  const keys = new Float64Array(n);
  let sorted = true;
  for (let i = 0; i < n; i++) {
    const s = (starts[i] as number) + TAIL_TS_OFFSET;
    const year = twoDigits(bytes, s) * 100 + twoDigits(bytes, s + 2);
    const key = daysFromCivil(year, twoDigits(bytes, s + 5), twoDigits(bytes, s + 8)) * 86_400_000 +
      twoDigits(bytes, s + 11) * 3_600_000 + twoDigits(bytes, s + 14) * 60_000 +
      twoDigits(bytes, s + 17) * 1000 + digit(bytes, s + 20) * 100 + digit(bytes, s + 21) * 10 +
      digit(bytes, s + 22);
    keys[i] = key;
    if (sorted && i > 0 && key < (keys[i - 1] as number)) sorted = false;
  }
  const order: number[] = new Array(n);
  for (let i = 0; i < n; i++) order[i] = i;
  if (!sorted) {
    // Ties keep input order (sorted file path, then line number).
    order.sort((a, b) => (keys[a] as number) - (keys[b] as number) || a - b);
  }
  const need = bytes.length + n * (SEQ_HEAD.length + MAX_SEQ_DIGITS);
  if (buffers.output.length < need) buffers.output = new Uint8Array(Math.ceil(need * 1.25));
  const out = buffers.output;
  let pos = 0;
  for (let i = 0; i < n; i++) {
    const line = order[i] as number;
    const start = starts[line] as number;
    const end = line + 1 < n ? starts[line + 1] as number : bytes.length;
    out.set(SEQ_HEAD, pos);
    pos += SEQ_HEAD.length;
    const seq = String(i + 1);
    for (let d = 0; d < seq.length; d++) out[pos++] = seq.charCodeAt(d);
    out.set(bytes.subarray(start, end), pos);
    pos += end - start;
  }
  const file = await Deno.open(join(tmp, siteName(date)), { write: true, createNew: true });
  try {
    await writeFull(file, out.subarray(0, pos));
  } catch (err) {
    file.close();
    throw err;
  }
  return file;
}

/**
 * fdatasyncs and closes files in the background, at most `limit` at a time, so the disk flushes
 * one day while the next is being sorted. {@linkcode Syncer.drain} rethrows the first failure.
 */
class Syncer {
  #pending: Promise<void>[] = [];
  #error: { err: unknown } | undefined;
  #limit: number;

  constructor(limit: number) {
    this.#limit = limit;
  }

  async add(file: Deno.FsFile): Promise<void> {
    const task = (async () => {
      try {
        await file.syncData();
      } finally {
        file.close();
      }
    })().catch((err) => {
      this.#error ??= { err };
    });
    this.#pending.push(task);
    if (this.#pending.length >= this.#limit) await this.#pending.shift();
    this.#throwIfFailed();
  }

  async drain(): Promise<void> {
    await Promise.all(this.#pending);
    this.#pending = [];
    this.#throwIfFailed();
  }

  #throwIfFailed(): void {
    if (this.#error !== undefined) throw this.#error.err;
  }
}

async function syncFile(path: string): Promise<void> {
  const file = await Deno.open(path, { write: true });
  try {
    await file.syncData();
  } finally {
    file.close();
  }
}

// --- the merge path: read the inputs together, day by day ----------------------------------------

/**
 * Inputs merged at most: each holds an open file and up to one read of decoded lines. A store
 * with more collections takes the spill path.
 */
const MERGE_MAX_INPUTS = 64;
/**
 * Bytes read from a merged input at a time, at most. The lines of a read wait until the merge
 * reaches their day; small reads let them die young instead of being promoted to V8's old
 * generation, which kept peak RSS 60 MiB higher with 1 MiB reads.
 */
const MERGE_READ_BYTES = 64 << 10;

/**
 * One day's converted lines in input order (sorted file path, then line number), encoded as they
 * come: a rope of tails is encoded every {@linkcode ENCODE_CHARS} code units into a buffer reused
 * from day to day, so the tails die young instead of piling up in V8's old generation.
 */
interface DayText {
  text: string;
  bytes: Uint8Array;
  length: number;
  lines: number;
}

function appendToDay(day: DayText, tail: string): void {
  day.text += tail;
  day.lines++;
  if (day.text.length >= ENCODE_CHARS) encodeDay(day);
}

function encodeDay(day: DayText): Uint8Array {
  // encodeInto writes at most 3 bytes per UTF-16 code unit.
  const need = day.length + day.text.length * 3;
  if (day.bytes.length < need) {
    const grown = new Uint8Array(Math.ceil(need * 1.25));
    grown.set(day.bytes.subarray(0, day.length));
    day.bytes = grown;
  }
  day.length += encoder.encodeInto(day.text, day.bytes.subarray(day.length)).written;
  day.text = "";
  return day.bytes.subarray(0, day.length);
}

interface MergeContext {
  readonly conv: Converter;
  /** Bytes each input reads at a time. */
  readonly readBytes: number;
  readonly progress: () => void;
  readonly signal: AbortSignal | undefined;
}

/**
 * One input of the merge: its lines of the last read, converted on demand, and its next record
 * (the head). The next read is always under way while the last one is converted, so the merge
 * rarely waits for the disk. The file is closed as soon as it is read to the end.
 */
class InputReader {
  readonly input: InputFile;
  readonly state: FileState;
  /** Where this input's rejects were spilled, if they outgrew the buffer. */
  readonly rejectsPart: string;
  rejectsSpilled = false;
  hasHead = false;
  day = "";
  #tail = "";
  #file: Deno.FsFile | undefined;
  #buffer = new Uint8Array(0);
  #reading: Promise<number | null> | undefined;
  #splitter = new LineSplitter();
  #lines: string[] = [];
  #pos = 0;
  #firstLineNo = 1;
  #onLine = (line: string) => {
    this.#lines.push(line);
  };

  constructor(input: InputFile, index: number, tmp: string) {
    this.input = input;
    this.state = fileState(input, { text: "", chunks: [] });
    this.rejectsPart = join(tmp, `rejects-${index}.part`);
  }

  async open(ctx: MergeContext): Promise<void> {
    this.#file = await openInput(this.input);
    this.#buffer = new Uint8Array(ctx.readBytes);
    this.#read();
  }

  /** Closes the file once its read under way, if any, has ended. */
  async close(): Promise<void> {
    const reading = this.#reading;
    this.#reading = undefined;
    await reading?.catch(() => {});
    this.#file?.close();
    this.#file = undefined;
  }

  #read(): void {
    const reading = (this.#file as Deno.FsFile).read(this.#buffer);
    // Awaited by #fill or close; until then a failure must not count as unhandled.
    reading.catch(() => {});
    this.#reading = reading;
  }

  /** Moves to the next record, reading as needed; `hasHead` is false at the end. */
  async next(ctx: MergeContext): Promise<void> {
    ctx.conv.select(this.state);
    while (!this.#advance(ctx.conv)) {
      if (this.#file === undefined) {
        this.hasHead = false;
        return;
      }
      await this.#fill(ctx);
    }
  }

  /** Moves every record of `day` from here on into `out`, up to the first of another day. */
  async take(day: string, out: DayText, ctx: MergeContext): Promise<void> {
    const conv = ctx.conv;
    conv.select(this.state);
    while (this.hasHead && this.day === day) {
      appendToDay(out, this.#tail);
      if (!this.#advance(conv)) await this.next(ctx);
    }
  }

  // Converts the lines already read up to the next record; false when they ran out first.
  #advance(conv: Converter): boolean {
    const lines = this.#lines;
    while (this.#pos < lines.length) {
      const i = this.#pos++;
      if (conv.line(lines[i] as string, this.#firstLineNo + i)) {
        this.hasHead = true;
        this.day = conv.day;
        this.#tail = conv.tail;
        return true;
      }
    }
    return false;
  }

  async #fill(ctx: MergeContext): Promise<void> {
    ctx.signal?.throwIfAborted();
    this.#lines.length = 0;
    this.#pos = 0;
    this.#firstLineNo = this.#splitter.lines + 1;
    const n = await this.#reading;
    this.#reading = undefined;
    if (n === null || n === undefined) {
      await this.close();
      this.#splitter.end(this.#onLine);
      return;
    }
    ctx.conv.bytesRead += n;
    // The splitter decodes (copies) the bytes, so the buffer is free for the next read.
    this.#splitter.push(this.#buffer.subarray(0, n), this.#onLine);
    this.#read();
    ctx.progress();
  }
}

function smallestDay(readers: readonly InputReader[]): string | undefined {
  let day: string | undefined;
  for (const r of readers) if (r.hasHead && (day === undefined || r.day < day)) day = r.day;
  return day;
}

/** Appends each reader's buffered rejects to its part file. */
async function spillRejects(readers: readonly InputReader[]): Promise<void> {
  for (const r of readers) {
    const sink = r.state.rejects;
    if (sink.text === "" && sink.chunks.length === 0) continue;
    r.rejectsSpilled = true;
    await drain(sink, r.rejectsPart);
  }
}

/** Builds the rejects file from every reader's part file and buffer, in input order. */
async function writeRejects(tmp: string, readers: readonly InputReader[]): Promise<void> {
  const out = await Deno.open(join(tmp, REJECTS_FILE), { append: true });
  try {
    const buffer = new Uint8Array(1 << 20);
    for (const r of readers) {
      if (r.rejectsSpilled) {
        const part = await Deno.open(r.rejectsPart, { read: true });
        try {
          for (let n = await part.read(buffer); n !== null; n = await part.read(buffer)) {
            await writeFull(out, buffer.subarray(0, n));
          }
        } finally {
          part.close();
        }
        await Deno.remove(r.rejectsPart);
      }
      const { text, chunks } = r.state.rejects;
      for (const chunk of chunks) await writeFull(out, chunk);
      if (text !== "") await writeFull(out, encoder.encode(text));
    }
  } finally {
    out.close();
  }
}

/** What the merge read and wrote. */
interface MergeResult {
  readonly inputs: MigrateInputSummary[];
  readonly collections: Map<string, number>;
  /** Lines of each day written, by written date. */
  readonly days: Map<string, number>;
}

/**
 * Reads every input together, in order of written date: takes the smallest date any input is
 * at, moves every input's records of that date (in input order) into one day, and writes it,
 * with no spill. Returns `undefined`, having written the days it could, as soon as an input goes
 * back to a day already written (see {@linkcode migrateMerged}).
 */
async function mergeAll(
  inputs: readonly InputFile[],
  ctx: MergeContext,
  tmp: string,
  bufferBytes: number,
  syncer: Syncer,
): Promise<MergeResult | undefined> {
  const readers = inputs.map((input, index) => new InputReader(input, index, tmp));
  const days = new Map<string, number>();
  const day: DayText = { text: "", bytes: new Uint8Array(0), length: 0, lines: 0 };
  const buffers: DayBuffers = { input: new Uint8Array(0), output: new Uint8Array(0) };
  try {
    for (const r of readers) await r.open(ctx);
    for (const r of readers) await r.next(ctx);
    for (let date = smallestDay(readers); date !== undefined; date = smallestDay(readers)) {
      if (days.has(date)) return undefined;
      for (const r of readers) await r.take(date, day, ctx);
      ctx.signal?.throwIfAborted();
      await syncer.add(await writeSorted(tmp, date, encodeDay(day), buffers));
      days.set(date, day.lines);
      day.length = day.lines = 0;
      if (ctx.conv.pending >= bufferBytes) {
        await spillRejects(readers);
        ctx.conv.pending = 0;
      }
    }
  } finally {
    for (const r of readers) await r.close();
  }
  await writeRejects(tmp, readers);
  const collections = new Map<string, number>();
  const summaries = readers.map(({ input, state }) => {
    const c = state.counts;
    collections.set(input.collection, (collections.get(input.collection) ?? 0) + c.records);
    return { path: input.rel, collection: input.collection, bytes: input.bytes, ...c };
  });
  return { inputs: summaries, collections, days };
}

// --- destination ---------------------------------------------------------------------------------

// Checks that `dest` is a directory, creating it when missing unless `create` is false.
async function prepareDest(dest: string, create: boolean): Promise<void> {
  let info: Deno.FileInfo | undefined;
  try {
    info = await Deno.stat(dest);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      if (!create) return;
      await withPermissionHint(
        () => Deno.mkdir(dest, { recursive: true }),
        `create "${dest}"`,
        `--allow-write=${dest}`,
      );
      return;
    }
    if (isPermissionError(err)) {
      throw new MigrateError(`Cannot read "${dest}": permission denied, add --allow-read=${dest}`, {
        cause: err,
      });
    }
    throw err;
  }
  if (!info.isDirectory) {
    throw new MigrateError(
      `Cannot migrate into "${dest}": it is a file, not a directory, pass a directory with --dest`,
    );
  }
}

async function lockDest(dest: string): Promise<SiteLock> {
  try {
    return await withPermissionHint(
      () => SiteLock.acquire(dest),
      `write "${dest}"`,
      `--allow-write=${dest}`,
    );
  } catch (err) {
    if (!(err instanceof SiteInUseError)) throw err;
    throw new MigrateError(
      `Cannot migrate into "${dest}": a telemetry server or another migration is using it, stop it (obs-utils telemetry stop) or choose another --dest`,
      { cause: err },
    );
  }
}

// Runs only while holding the site lock, so no other migration can own these directories.
async function removeStaleTemp(dest: string): Promise<void> {
  const stale: string[] = [];
  for await (const entry of Deno.readDir(dest)) {
    if (entry.isDirectory && entry.name.startsWith(TMP_PREFIX)) stale.push(entry.name);
  }
  for (const name of stale) await Deno.remove(join(dest, name), { recursive: true });
}

async function removeTree(path: string): Promise<void> {
  try {
    await Deno.remove(path, { recursive: true });
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  }
}

function positiveInteger(value: number | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new RangeError(`Cannot use ${name} ${value}: expected a positive integer`);
  }
  return value;
}

// --- the migration -------------------------------------------------------------------------------

/**
 * Converts every legacy `<collection>.json` under `source` into `site_YYYYMMDD.ndjson` files in
 * `dest` (docs/migration.md, docs/migration.md), plus `migrate-rejects.ndjson` for the lines it could not convert.
 * See the module documentation for the exact rules. Prints nothing; report progress through
 * `options.onProgress` and the result through the returned summary.
 *
 * Needs `--allow-read=<source>,<dest>` and `--allow-write=<dest>`.
 *
 * @param source The legacy database directory, searched recursively.
 * @param dest The site directory to write into; created when missing (not in a dry run).
 * @param options Force, dry run, progress callback, abort signal and buffer sizes.
 * @returns What was read, converted, rejected and written.
 * @throws {MigrateConflictError} If a target file (a site file this run would write, or the
 * rejects file) already exists and `force` is not set; nothing is written.
 * @throws {MigrateError} If `source` is missing, not a directory or holds no `<collection>.json`,
 * `dest` is not a directory, a permission is missing (a Deno flag, named, or the operating
 * system's, said as such), or a telemetry server holds the destination's lock.
 * @throws {RangeError} If `chunkBytes` or `bufferBytes` is not a positive integer, `groupBy` is
 * neither `"date"` nor `"night"`, or `timeZone` is not an IANA zone.
 *
 * @example Migrate a legacy store
 * ```ts ignore
 * import { migrate } from "@obs-utils/telemetry/migrate";
 *
 * const summary = await migrate("/data/legacy-db", "/data/telemetry");
 * for (const file of summary.files) console.log(`${file.name}: ${file.lines} events`);
 * if (summary.rejects > 0) console.log(`${summary.rejects} lines in ${summary.rejectsFile}`);
 * ```
 *
 * @example Preview without writing
 * ```ts ignore
 * import { migrate } from "@obs-utils/telemetry/migrate";
 *
 * const preview = await migrate("/data/legacy-db", "/data/telemetry", { dryRun: true });
 * console.log(`${preview.records} records would go to ${preview.files.length} files`);
 * ```
 */
export async function migrate(
  source: string,
  dest: string,
  options: MigrateOptions = {},
): Promise<MigrateSummary> {
  const started = performance.now();
  const settings = settingsOf(options);
  const src = resolve(source);
  const dst = resolve(dest);
  const rejectsFile = join(dst, REJECTS_FILE);

  await checkSource(src);
  const { inputs, skipped } = await discover(src);
  if (inputs.length === 0) throw noCollections(src, skipped);
  const totalBytes = inputs.reduce((sum, input) => sum + input.bytes, 0);

  const work: Workspace = { lock: undefined, tmp: undefined };
  try {
    await openWorkspace(work, dst, rejectsFile, settings);
    const conv = new Converter(
      work.tmp !== undefined,
      settings.groupBy === "night" ? new DayKeyer(settings.timeZone) : undefined,
    );
    const run: Run = {
      inputs,
      conv,
      dst,
      rejectsFile,
      settings,
      report: reporter(conv, totalBytes, settings.onProgress),
    };
    const done = (work.tmp !== undefined && inputs.length <= MERGE_MAX_INPUTS
      ? await migrateMerged(run, work.tmp)
      : undefined) ?? await migrateSpilled(run, work.tmp);
    return summarize(started, conv, {
      source: src,
      dest: dst,
      dryRun: settings.dryRun,
      force: settings.force,
      groupBy: settings.groupBy,
      ...done,
      rejectsFile,
      skipped,
    });
  } finally {
    if (work.tmp !== undefined) await removeTree(work.tmp);
    await releaseDest(work);
  }
}

/**
 * Releases the destination's lock, and removes the lock file when this run created it: the
 * destination then holds nothing but the output files, and a rerun finds it as this run left it
 * (issue 14). A `.lock` that was there before (a site directory a server used) stays.
 */
async function releaseDest(work: Workspace): Promise<void> {
  if (work.lock === undefined) return;
  if (work.createdLock !== undefined) {
    // Removed while still held, so no other process can take a lock on the old file.
    await Deno.remove(work.createdLock).catch(() => {});
  }
  await work.lock.release();
}

/** The second line of a lock file a migration holds (a server writes its URL there). */
const MIGRATION_MARK = "migrate";

/** Whether a lock file was written by a migration (one that was killed, if nobody holds it). */
async function isMigrationLock(path: string): Promise<boolean> {
  try {
    const text = await Deno.readTextFile(path);
    return text.split("\n")[1] === MIGRATION_MARK;
  } catch {
    return false;
  }
}

/** "No collection files", with what was found instead, so the operator can fix `--source`. */
function noCollections(src: string, skipped: readonly MigrateSkipped[]): MigrateError {
  const seen = skipped.length === 0
    ? ""
    : ` (skipped ${skipped.length}: ${
      skipped.slice(0, 3).map((s) => `${s.path}, ${s.reason}`).join("; ")
    }${skipped.length > 3 ? "; ..." : ""})`;
  return new MigrateError(
    `Cannot migrate from "${src}": it holds no collection files (<collection>.json, searched recursively)${seen}; pass the legacy database directory with --source`,
  );
}

/** {@linkcode MigrateOptions} with defaults applied and sizes checked. */
interface Settings {
  readonly force: boolean;
  readonly dryRun: boolean;
  readonly groupBy: MigrateGroupBy;
  readonly timeZone: string;
  readonly chunkBytes: number;
  readonly bufferBytes: number;
  readonly onProgress: ((progress: MigrateProgress) => void) | undefined;
  readonly signal: AbortSignal | undefined;
}

function settingsOf(options: MigrateOptions): Settings {
  return {
    force: options.force ?? false,
    dryRun: options.dryRun ?? false,
    groupBy: groupByOf(options.groupBy),
    timeZone: options.timeZone === undefined
      ? Temporal.Now.timeZoneId()
      : checkTimeZone(options.timeZone),
    chunkBytes: positiveInteger(options.chunkBytes, DEFAULT_CHUNK_BYTES, "chunkBytes"),
    bufferBytes: positiveInteger(options.bufferBytes, DEFAULT_BUFFER_BYTES, "bufferBytes"),
    onProgress: options.onProgress,
    signal: options.signal,
  };
}

function groupByOf(value: string | undefined): MigrateGroupBy {
  if (value === undefined || value === "date" || value === "night") return value ?? "date";
  throw new RangeError(`groupBy must be "date" or "night", not ${JSON.stringify(value)}`);
}

/** What a migration holds in the destination; released by {@linkcode migrate} in any case. */
interface Workspace {
  lock: SiteLock | undefined;
  /** The lock file's path when this run created it (removed again at the end). */
  createdLock?: string | undefined;
  /** The temporary directory; `undefined` in a dry run or when the run is bound to conflict. */
  tmp: string | undefined;
}

// Fills `work` step by step, so whatever was taken before a failure is still released.
async function openWorkspace(
  work: Workspace,
  dst: string,
  rejectsFile: string,
  settings: Settings,
): Promise<void> {
  await prepareDest(dst, !settings.dryRun);
  if (settings.dryRun) return;
  const lockPath = join(dst, LOCK_FILE);
  // A lock file left by a migration that was killed is ours to clean up; any other is kept.
  const before = await Deno.lstat(lockPath).catch(() => undefined);
  let hadLock = before !== undefined && !await isMigrationLock(lockPath);
  work.lock = await lockDest(dst);
  // Another migration's lock file, seen before its mark was written, may have been removed
  // since and the one we now hold created by us. Its inode number proves nothing (a file made
  // right after a removal often gets the same one), but a lock file anyone held has its pid in
  // it: one that was empty when we took it is ours.
  if (hadLock && !work.lock.hadContent) hadLock = false;
  if (!hadLock) {
    work.createdLock = lockPath;
    // Only a lock file this run created is marked: a later run may then remove it.
    await work.lock.record(MIGRATION_MARK);
  }
  // A rejects file from an earlier run means this run must fail without force: read in
  // counting mode only, to list every conflicting file without spilling anything.
  const doomed = !settings.force && await exists(rejectsFile);
  if (doomed) return;
  await withPermissionHint(
    async () => {
      await removeStaleTemp(dst);
      work.tmp = join(dst, `${TMP_PREFIX}${crypto.randomUUID()}`);
      await Deno.mkdir(work.tmp);
      await Deno.writeFile(join(work.tmp, REJECTS_FILE), new Uint8Array());
    },
    `write "${dst}"`,
    `--allow-write=${dst}`,
  );
}

/** Reports progress in a phase: files done and files of the phase. */
type Report = (phase: MigratePhase, filesDone: number, filesTotal: number) => void;

function reporter(
  collector: Converter,
  totalBytes: number,
  onProgress: ((progress: MigrateProgress) => void) | undefined,
): Report {
  return (phase, filesDone, filesTotal) =>
    onProgress?.({
      phase,
      bytesRead: collector.bytesRead,
      totalBytes,
      lines: collector.lines,
      records: collector.records,
      rejects: collector.rejects,
      filesDone,
      filesTotal,
    });
}

/** What a run read and wrote, for {@linkcode summarize}. */
interface RunResult {
  readonly inputs: MigrateInputSummary[];
  readonly collections: Map<string, number>;
  readonly files: MigrateFileSummary[];
  readonly replaced: string[];
}

/** What both ways of running a migration work with. */
interface Run {
  readonly inputs: readonly InputFile[];
  readonly conv: Converter;
  readonly dst: string;
  readonly rejectsFile: string;
  readonly settings: Settings;
  readonly report: Report;
}

/**
 * Merges the inputs by written date and writes each day as soon as it is complete (see
 * {@linkcode mergeAll}), then checks the targets, waits for the fdatasyncs and commits. Returns
 * `undefined`, with the temporary directory emptied and the counts zeroed, when a record goes
 * back to a day already written: the caller then starts over on the spill path, which orders
 * such records as docs/migration.md wants. Legacy collections are appended in time order, so that is
 * rare, and starting over keeps one ordering algorithm for it instead of two.
 */
async function migrateMerged(run: Run, tmp: string): Promise<RunResult | undefined> {
  const { inputs, conv, settings, report } = run;
  const syncer = new Syncer(4);
  const ctx: MergeContext = {
    conv,
    readBytes: Math.min(settings.chunkBytes, MERGE_READ_BYTES),
    progress: () => report("read", 0, 0),
    signal: settings.signal,
  };
  let merged: MergeResult | undefined;
  let files: MigrateFileSummary[] = [];
  let replaced: string[] = [];
  try {
    merged = await mergeAll(inputs, ctx, tmp, settings.bufferBytes, syncer);
    if (merged !== undefined) {
      const days = merged.days;
      files = [...days.keys()].sort().map((date) => fileSummary(run.dst, date, days));
      replaced = await checkTargets(files, run);
    }
  } catch (err) {
    // The first failure is the one to report; the files are closed either way.
    await syncer.drain().catch(() => {});
    throw err;
  }
  await syncer.drain();
  if (merged === undefined) {
    await clearScratch(tmp);
    conv.reset();
    return undefined;
  }
  // Each day was written while reading; this phase waits for the last fdatasyncs.
  for (let i = 0; i < files.length; i++) report("write", i + 1, files.length);
  await syncFile(join(tmp, REJECTS_FILE));
  await commit(tmp, files, run.dst, report);
  return { inputs: merged.inputs, collections: merged.collections, files, replaced };
}

/** Removes everything but the (still empty) rejects file from the temporary directory. */
async function clearScratch(tmp: string): Promise<void> {
  const names: string[] = [];
  for await (const entry of Deno.readDir(tmp)) {
    if (entry.name !== REJECTS_FILE) names.push(entry.name);
  }
  for (const name of names) await Deno.remove(join(tmp, name));
}

/**
 * Reads every input in turn, spilling converted lines per day, then sorts and writes each day.
 * Without `tmp` (a dry run, or a run bound to conflict) it only counts.
 */
async function migrateSpilled(run: Run, tmp: string | undefined): Promise<RunResult> {
  const collector = new Collector(run.conv, tmp, run.settings.bufferBytes);
  const read = await readAll(run.inputs, collector, run.settings, run.report);
  const plan = planFiles(collector, run.dst);
  const replaced = await checkTargets(plan.files, run);
  if (tmp !== undefined) {
    await writeDays(tmp, plan.dates, run.settings.signal, run.report);
    await commit(tmp, plan.files, run.dst, run.report);
  }
  return { ...read, files: plan.files, replaced };
}

/** The targets that exist; throws {@linkcode MigrateConflictError} if any does, without force. */
async function checkTargets(files: readonly MigrateFileSummary[], run: Run): Promise<string[]> {
  const existing = await existingTargets(files, run.rejectsFile, run.dst);
  if (existing.length > 0 && !run.settings.force && !run.settings.dryRun) {
    throw new MigrateConflictError(run.dst, existing);
  }
  return existing;
}

function fileSummary(
  dst: string,
  date: string,
  days: ReadonlyMap<string, number>,
): MigrateFileSummary {
  return { name: siteName(date), path: join(dst, siteName(date)), lines: days.get(date) as number };
}

/** The spill path's pass 1 over every input; returns what each contributed. */
async function readAll(
  inputs: readonly InputFile[],
  collector: Collector,
  settings: Settings,
  report: Report,
): Promise<{ inputs: MigrateInputSummary[]; collections: Map<string, number> }> {
  const ctx: ReadContext = {
    collector,
    buffer: new Uint8Array(settings.chunkBytes),
    progress: () => report("read", 0, 0),
    signal: settings.signal,
  };
  const summaries: MigrateInputSummary[] = [];
  const collections = new Map<string, number>();
  for (const input of inputs) {
    const counts = await readInput(input, ctx);
    summaries.push({
      path: input.rel,
      collection: input.collection,
      bytes: input.bytes,
      ...counts,
    });
    collections.set(input.collection, (collections.get(input.collection) ?? 0) + counts.records);
  }
  await collector.flush();
  return { inputs: summaries, collections };
}

/** The site files to write, one per written date, both sorted. */
function planFiles(
  collector: Collector,
  dst: string,
): { dates: string[]; files: MigrateFileSummary[] } {
  const dates = [...collector.buckets.keys()].sort();
  const lines = new Map(dates.map((date) => [date, (collector.buckets.get(date) as Bucket).lines]));
  return { dates, files: dates.map((date) => fileSummary(dst, date, lines)) };
}

/** The target files that already exist, sorted. */
async function existingTargets(
  files: readonly MigrateFileSummary[],
  rejectsFile: string,
  dst: string,
): Promise<string[]> {
  const existing: string[] = [];
  await withPermissionHint(
    async () => {
      for (const path of [...files.map((f) => f.path), rejectsFile]) {
        if (await exists(path)) existing.push(path);
      }
    },
    `read "${dst}"`,
    `--allow-read=${dst}`,
  );
  return existing.sort();
}

/** Pass 2: sorts and writes every day into `workDir`, fdatasyncing in the background. */
async function writeDays(
  workDir: string,
  dates: readonly string[],
  signal: AbortSignal | undefined,
  report: Report,
): Promise<void> {
  const syncer = new Syncer(4);
  const buffers: DayBuffers = { input: new Uint8Array(0), output: new Uint8Array(0) };
  try {
    for (let i = 0; i < dates.length; i++) {
      signal?.throwIfAborted();
      await syncer.add(await writeDay(workDir, dates[i] as string, buffers));
      report("write", i + 1, dates.length);
    }
  } catch (err) {
    // The first failure is the one to report; the files are closed either way.
    await syncer.drain().catch(() => {});
    throw err;
  }
  await syncer.drain();
  await syncFile(join(workDir, REJECTS_FILE));
}

/** Renames the finished site files, then the rejects file, from `workDir` into `dst`. */
async function commit(
  workDir: string,
  files: readonly MigrateFileSummary[],
  dst: string,
  report: Report,
): Promise<void> {
  // Every file is complete before the first rename: an interrupted commit leaves each
  // target either absent or whole (docs/migration.md).
  const names = [...files.map((f) => f.name), REJECTS_FILE];
  for (let i = 0; i < names.length; i++) {
    const name = names[i] as string;
    await Deno.rename(join(workDir, name), join(dst, name));
    report("commit", i + 1, names.length);
  }
}

/** The parts of a {@linkcode MigrateSummary} that {@linkcode summarize} does not count itself. */
interface SummaryParts {
  readonly source: string;
  readonly dest: string;
  readonly dryRun: boolean;
  readonly groupBy: MigrateGroupBy;
  readonly inputs: readonly MigrateInputSummary[];
  readonly collections: ReadonlyMap<string, number>;
  readonly files: readonly MigrateFileSummary[];
  readonly rejectsFile: string;
  readonly skipped: readonly MigrateSkipped[];
  readonly replaced: readonly string[];
  readonly force: boolean;
}

function summarize(started: number, collector: Converter, parts: SummaryParts): MigrateSummary {
  const elapsedMs = performance.now() - started;
  const collections: Record<string, number> = {};
  for (const name of [...parts.collections.keys()].sort()) {
    collections[name] = parts.collections.get(name) as number;
  }
  return {
    source: parts.source,
    dest: parts.dest,
    dryRun: parts.dryRun,
    records: collector.records,
    collections,
    inputs: parts.inputs,
    files: parts.files,
    rejects: collector.rejects,
    rejectsFile: parts.rejectsFile,
    blankLines: collector.blankLines,
    skipped: parts.skipped,
    // A dry run without force lists the existing targets as conflicts, not as replaced.
    replaced: parts.dryRun && !parts.force ? [] : parts.replaced,
    conflicts: parts.dryRun && !parts.force ? parts.replaced : [],
    rejectSamples: [...collector.samples],
    groupBy: parts.groupBy,
    bytesRead: collector.bytesRead,
    elapsedMs,
    recordsPerSecond: elapsedMs > 0
      ? Math.round(collector.records / (elapsedMs / 1000))
      : collector.records,
  };
}
