/**
 * The shapes a migration is configured and reported with (docs/migration.md): the options of
 * `migrate`, its progress, its summary, and the names of what it writes.
 *
 * @module
 */

/**
 * Name of the file, in the destination, that receives every input line that was not converted.
 *
 * @example Usage
 * ```ts
 * import { REJECTS_FILE } from "./types.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(REJECTS_FILE, "migrate-rejects.ndjson");
 * ```
 */
export const REJECTS_FILE = "migrate-rejects.ndjson";

/**
 * The value of `meta.migrated_from` on every migrated line (docs/migration.md).
 *
 * @example Usage
 * ```ts
 * import { MIGRATED_FROM } from "./types.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(MIGRATED_FROM, "PanFileDB");
 * ```
 */
export const MIGRATED_FROM = "PanFileDB";

/** A stage of a migration, as reported to {@linkcode MigrateOptions.onProgress}. */
export type MigratePhase = "read" | "write" | "commit";

/**
 * Progress of a running migration. `read` reports input bytes and records; `write` reports site
 * files built in the temporary directory; `commit` reports output files renamed into place
 * (site files, then the rejects file).
 *
 * When the collections are merged by date (see the module documentation), site files are
 * sorted and written during `read`, and `write` counts them once the last one is on disk. When a
 * date goes back to a day before the last one written, the migration starts over on the spill
 * path: `read` then begins again at 0 bytes.
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
   * {@linkcode MigrateConflictError}. A night that comes out as stored, seqs included, is left
   * as it is, so the same input gives the same output; a site file holding a line no migration
   * wrote is never replaced (docs/migration.md).
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
   * record's `date` (docs/migration.md); or `"night"`, the local-noon night of its `ts` in
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

/**
 * How many rejected lines {@linkcode MigrateSummary.rejectSamples} keeps.
 *
 * @example Usage
 * ```ts
 * import { REJECT_SAMPLES } from "./types.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(REJECT_SAMPLES, 20);
 * ```
 */
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

/** {@linkcode MigrateOptions} with defaults applied and sizes checked. */
export interface Settings {
  readonly force: boolean;
  readonly dryRun: boolean;
  readonly groupBy: MigrateGroupBy;
  readonly timeZone: string;
  readonly chunkBytes: number;
  readonly bufferBytes: number;
  readonly onProgress: ((progress: MigrateProgress) => void) | undefined;
  readonly signal: AbortSignal | undefined;
}

/** Reports progress in a phase: files done and files of the phase. */
export type Report = (phase: MigratePhase, filesDone: number, filesTotal: number) => void;
