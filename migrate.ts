/**
 * Converts a legacy PanFileDB store (one `<collection>.json` NDJSON file per collection) into the
 * service's site files `site_YYYYMMDD.ndjson` (docs/migration.md).
 *
 * {@linkcode migrate} takes a source and a destination directory and returns a
 * {@linkcode MigrateSummary}; it never prints. How it behaves:
 *
 * - Every `<collection>.json` under the source, recursively, in sorted path order;
 *   `current_*.json` snapshot files are skipped and listed in the summary.
 * - Input is streamed line by line; memory is bounded by one output day, never by the input.
 *   Legacy collections are appended in time order, so the collections are read together, merged
 *   by written date, and each day is sorted and written as soon as every collection has moved
 *   past it. Collections whose dates go back to a day before the last one written, and stores of more than
 *   64 collections, are read one after the other instead, every record spilled to a per-day
 *   file in the temporary directory and sorted from there: slower, same output.
 * - Legacy dates `YYYY-MM-DDTHH:MM:SS[.f{1,9}]`, `T` or a space, optionally ending in `Z` or
 *   `±HH:MM`; a date without a zone is UTC. The envelope's `ts` is UTC, milliseconds, `Z`
 *   (extra fraction digits are truncated).
 * - A record goes to the file of the calendar date written in its `date` field, as written:
 *   `"2026-03-05T23:30:00-05:00"` goes to `site_20260305.ndjson` although its `ts` is
 *   `2026-03-06T04:30:00.000Z`. (The live service's noon rotation does not apply: docs/migration.md
 *   groups by calendar date.) With `groupBy: "night"` a record goes instead to the local-noon
 *   night of its `ts` in `timeZone`, as the live service would have filed it (docs/history.md).
 *   Within a file lines are sorted by `ts`, ties keep input order (sorted file path, then line
 *   number). `seq` is one sequence across all the files written, in night order, starting after
 *   the highest seq the destination already holds (its site files and seq mark), whose seq mark
 *   is raised over the migrated lines (docs/migration.md). The same input gives byte-identical
 *   output.
 * - Each line is `{"seq","ts","type","data","meta"}` exactly as the live service writes it, with
 *   `meta` = `{"migrated_from":"PanFileDB","original_id":<_id>}` (`null` when the record has no
 *   `_id`). `type` comes from the record, or from the collection name when the record has none;
 *   `data` that is not an object is kept as `{"value":<data>}`, a missing `data` becomes `{}`.
 * - Lines that are not JSON, records that are not objects, records whose date cannot be used
 *   and records the service would refuse (a `type`, nesting or number it refuses,
 *   docs/http-api.md) are written verbatim, with
 *   file, line number and reason, to `migrate-rejects.ndjson` in the destination. Blank lines are
 *   counted, not rejected. The rejects file is always written (empty when nothing was rejected).
 * - Nothing is overwritten unless `force` is set: a site file of a night written, plain or
 *   compressed (`.ndjson.gz`), or the rejects file. With `force`, a night whose stored lines
 *   come out the same, seqs included, is left as it is; the others are replaced, and numbered
 *   after every seq the destination holds, from the first night that differs on. A site file
 *   holding a line no migration wrote (no `meta.migrated_from`) is never replaced: the run
 *   throws {@linkcode MigrateError} instead. Output is built in a temporary directory
 *   `<dest>/.migrate-tmp-<random>/` and renamed into place, so an interrupted run never leaves a
 *   half-written site file. A later run removes stale temporary directories.
 * - While it writes, the migrator holds the destination's site lock (`<dest>/.lock`, docs/storage.md), so it cannot run into a directory a live telemetry server is using. It removes the
 *   lock file it created, so the destination ends up holding only the output files.
 * - A dry run reads everything and writes nothing; it reports the existing targets a real run
 *   would refuse ({@linkcode MigrateSummary.conflicts}) instead of failing on them.
 *
 * Needs `--allow-read=<source>,<dest>` and `--allow-write=<dest>`.
 *
 * @example Usage
 * ```ts ignore
 * import { migrate } from "@obs-utils/telemetry/migrate";
 *
 * const summary = await migrate("/data/legacy-db", "/data/telemetry", {
 *   onProgress: (p) => Deno.stderr.writeSync(new TextEncoder().encode(`\r${p.records} records`)),
 * });
 * console.log(`${summary.records} records into ${summary.files.length} files`);
 * ```
 *
 * @module
 */

export { migrate } from "./migrate/migrate.ts";
export { legacyDateToTs } from "./migrate/legacy_date.ts";
export { MigrateConflictError, MigrateError } from "./migrate/errors.ts";
export {
  MIGRATED_FROM,
  type MigrateFileSummary,
  type MigrateGroupBy,
  type MigrateInputSummary,
  type MigrateOptions,
  type MigratePhase,
  type MigrateProgress,
  type MigrateReject,
  type MigrateSkipped,
  type MigrateSummary,
  REJECT_SAMPLES,
  REJECTS_FILE,
} from "./migrate/types.ts";
