/**
 * The implementation behind the `migrate.ts` entry point; its module documentation is there.
 * This module runs a migration's stages: discover the inputs, open the destination, then merge
 * the inputs by date (`input_merge.ts`) or, failing that, spill them per day (`spill.ts`), write and
 * commit the site files (`write.ts`), and summarize.
 *
 * @module
 */

import { join, resolve } from "node:path";
import { checkTimeZone, DayKeyer } from "../store/day_key.ts";
import { Converter } from "./convert.ts";
import { checkSource, discover, type InputFile, noCollections } from "./discover.ts";
import { MigrateConflictError } from "./errors.ts";
import {
  MERGE_MAX_INPUTS,
  MERGE_READ_BYTES,
  mergeAll,
  type MergeContext,
  type MergeResult,
} from "./input_merge.ts";
import { DaySpill, planFiles, readAll, writeDays } from "./spill.ts";
import {
  type MigrateFileSummary,
  type MigrateGroupBy,
  type MigrateInputSummary,
  type MigrateOptions,
  type MigrateProgress,
  type MigrateSkipped,
  type MigrateSummary,
  REJECTS_FILE,
  type Report,
  type Settings,
} from "./types.ts";
import {
  checkReplaceable,
  commit,
  existingTargets,
  fileSummary,
  nightOfPath,
  Syncer,
  syncFile,
} from "./write.ts";
import { holdsStream, NightSeqs, raiseSeqMark, readSeqBase, type SeqBase } from "./seq_base.ts";
import {
  clearScratch,
  openWorkspace,
  releaseDest,
  removeTree,
  type Workspace,
} from "./workspace.ts";

const DEFAULT_CHUNK_BYTES = 1 << 20;
const DEFAULT_BUFFER_BYTES = 4 << 20;

/**
 * Converts every legacy `<collection>.json` under `source` into `site_YYYYMMDD.ndjson` files in
 * `dest` (docs/migration.md), plus `migrate-rejects.ndjson` for the lines it could not convert.
 * See the module documentation for the exact rules. Prints nothing; report progress through
 * `options.onProgress` and the result through the returned summary.
 *
 * Needs `--allow-read=<source>,<dest>` and `--allow-write=<dest>`.
 *
 * @param source The legacy database directory, searched recursively.
 * @param dest The site directory to write into; created when missing (not in a dry run).
 * @param options Force, dry run, progress callback, abort signal and buffer sizes.
 * @returns What was read, converted, rejected and written.
 * @throws {MigrateConflictError} If a target file (a site file this run would write, plain or
 * compressed, or the rejects file) already exists and `force` is not set; nothing is written.
 * @throws {MigrateError} If `source` is missing, not a directory or holds no `<collection>.json`,
 * `dest` is not a directory, a permission is missing (a Deno flag, named, or the operating
 * system's, said as such), a telemetry server holds the destination's lock, or `force` would
 * replace a site file holding a line no migration wrote (or a damaged one); nothing is written.
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
    // Read under the lock: no service writes the destination while the migration numbers after it.
    const base = await readSeqBase(dst);
    const conv = new Converter(
      work.tmp !== undefined,
      settings.groupBy === "night" ? new DayKeyer(settings.timeZone) : undefined,
    );
    const migration: Migration = {
      inputs,
      conv,
      dst,
      rejectsFile,
      settings,
      report: reporter(conv, totalBytes, settings.onProgress),
      base,
    };
    const done = (work.tmp !== undefined && inputs.length <= MERGE_MAX_INPUTS
      ? await migrateMerged(migration, work.tmp)
      : undefined) ?? await migrateSpilled(migration, work.tmp);
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

function positiveInteger(value: number | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new RangeError(`Cannot use ${name} ${value}: expected a positive integer`);
  }
  return value;
}

function reporter(
  conv: Converter,
  totalBytes: number,
  onProgress: ((progress: MigrateProgress) => void) | undefined,
): Report {
  return (phase, filesDone, filesTotal) =>
    onProgress?.({
      phase,
      bytesRead: conv.bytesRead,
      totalBytes,
      lines: conv.lines,
      records: conv.records,
      rejects: conv.rejects,
      filesDone,
      filesTotal,
    });
}

/** What a migration read and wrote, for {@linkcode summarize}. */
interface MigrationResult {
  readonly inputs: MigrateInputSummary[];
  readonly collections: Map<string, number>;
  readonly files: MigrateFileSummary[];
  readonly replaced: string[];
}

/** What both ways of running a migration work with. */
interface Migration {
  readonly inputs: readonly InputFile[];
  readonly conv: Converter;
  readonly dst: string;
  readonly rejectsFile: string;
  readonly settings: Settings;
  readonly report: Report;
  /** The site stream the destination holds already; migrated lines are numbered after it. */
  readonly base: SeqBase;
}

/**
 * Merges the inputs by written date and writes each day as soon as it is complete (see
 * {@linkcode mergeAll}), then checks the targets, waits for the fdatasyncs and commits. Returns
 * `undefined`, with the temporary directory emptied and the counts zeroed, when a record goes
 * back to a day before the last one written: the caller then starts over on the spill path,
 * which orders such records as docs/migration.md wants. Legacy collections are appended in time order, so that is
 * rare, and starting over keeps one ordering algorithm for it instead of two.
 */
async function migrateMerged(
  migration: Migration,
  tmp: string,
): Promise<MigrationResult | undefined> {
  const { inputs, conv, settings, report } = migration;
  const syncer = new Syncer(4);
  const ctx: MergeContext = {
    conv,
    readBytes: Math.min(settings.chunkBytes, MERGE_READ_BYTES),
    progress: () => report("read", 0, 0),
    signal: settings.signal,
    seqs: new NightSeqs(migration.base, settings.force),
  };
  let merged: MergeResult | undefined;
  let files: MigrateFileSummary[] = [];
  let replaced: string[] = [];
  try {
    merged = await mergeAll(inputs, ctx, tmp, settings.bufferBytes, syncer);
    if (merged !== undefined) {
      const days = merged.days;
      files = [...days.keys()].sort().map((date) => fileSummary(migration.dst, date, days));
      replaced = await checkTargets(files, migration);
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
  await finish(migration, tmp, files, replaced, ctx.seqs);
  return { inputs: merged.inputs, collections: merged.collections, files, replaced };
}

/**
 * Reads every input in turn, spilling converted lines per day, then sorts and writes each day.
 * Without `tmp` (a dry run, or a migration bound to conflict) it only counts.
 */
async function migrateSpilled(
  migration: Migration,
  tmp: string | undefined,
): Promise<MigrationResult> {
  const spill = new DaySpill(migration.conv, tmp, migration.settings.bufferBytes);
  const read = await readAll(migration.inputs, spill, migration.settings, migration.report);
  const plan = planFiles(spill, migration.dst);
  const replaced = await checkTargets(plan.files, migration);
  if (tmp !== undefined) {
    const seqs = new NightSeqs(migration.base, migration.settings.force);
    await writeDays(tmp, plan.dates, migration.settings.signal, migration.report, seqs);
    await finish(migration, tmp, plan.files, replaced, seqs);
  }
  return { ...read, files: plan.files, replaced };
}

/**
 * Commits the written nights (docs/migration.md): checks that what a forced run replaces holds
 * only migrated lines, raises the seq mark over the seqs handed out afresh, renames the files
 * into place.
 */
async function finish(
  migration: Migration,
  tmp: string,
  files: readonly MigrateFileSummary[],
  replaced: readonly string[],
  seqs: NightSeqs,
): Promise<void> {
  const { dst, base } = migration;
  await checkReplaceable(replaced, seqs.kept, dst);
  const written = new Set(files.map((f) => nightOfPath(f.name) as string));
  await raiseSeqMark(dst, base, seqs.fresh, holdsStream(base, written));
  await commit(tmp, files, dst, migration.report, replaced, seqs.kept);
}

/** The targets that exist; throws {@linkcode MigrateConflictError} if any does, without force. */
async function checkTargets(
  files: readonly MigrateFileSummary[],
  migration: Migration,
): Promise<string[]> {
  const existing = await existingTargets(files, migration.rejectsFile, migration.dst);
  if (existing.length > 0 && !migration.settings.force && !migration.settings.dryRun) {
    throw new MigrateConflictError(migration.dst, existing);
  }
  return existing;
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

function summarize(started: number, conv: Converter, parts: SummaryParts): MigrateSummary {
  const elapsedMs = performance.now() - started;
  const collections: Record<string, number> = {};
  for (const name of [...parts.collections.keys()].sort()) {
    collections[name] = parts.collections.get(name) as number;
  }
  return {
    source: parts.source,
    dest: parts.dest,
    dryRun: parts.dryRun,
    records: conv.records,
    collections,
    inputs: parts.inputs,
    files: parts.files,
    rejects: conv.rejects,
    rejectsFile: parts.rejectsFile,
    blankLines: conv.blankLines,
    skipped: parts.skipped,
    // A dry run without force lists the existing targets as conflicts, not as replaced.
    replaced: parts.dryRun && !parts.force ? [] : parts.replaced,
    conflicts: parts.dryRun && !parts.force ? parts.replaced : [],
    rejectSamples: [...conv.samples],
    groupBy: parts.groupBy,
    bytesRead: conv.bytesRead,
    elapsedMs,
    recordsPerSecond: elapsedMs > 0 ? Math.round(conv.records / (elapsedMs / 1000)) : conv.records,
  };
}
