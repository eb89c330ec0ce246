/**
 * Writing the output: each day's converted lines sorted by `ts` and numbered into a site file in
 * the temporary directory, fdatasynced in the background, then renamed into the destination
 * (docs/migration.md, docs/storage.md).
 *
 * @module
 */

import { basename, join } from "node:path";
import { GZ_SUFFIX, siteFileName, STORED_SITE_FILE } from "../store/layout.ts";
import { DamagedFileError, readLines } from "../store/site_files.ts";
import { writeFull } from "../store/writer.ts";
import { exists } from "../store/fs.ts";
import { LINE_HEAD, readSeqAndType, TAIL_TS_OFFSET } from "../wire/ndjson.ts";
import { MigrateError, withPermissionHint } from "./errors.ts";
import { daysFromCivil } from "./legacy_date.ts";
import type { NightSeqs } from "./seq_base.ts";
import { MIGRATED_FROM, type MigrateFileSummary, REJECTS_FILE, type Report } from "./types.ts";

const encoder = new TextEncoder();

/**
 * The site file name of a written date.
 *
 * @param date `YYYY-MM-DD`.
 * @returns `site_YYYYMMDD.ndjson`.
 *
 * @example Usage
 * ```ts
 * import { siteName } from "./write.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(siteName("2026-03-05"), "site_20260305.ndjson");
 * ```
 */
export function siteName(date: string): string {
  return siteFileName(date.replaceAll("-", ""));
}

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
export interface DayBuffers {
  /** A day's converted lines as read back from its spill file. */
  input: Uint8Array;
  /** A day's site file before it is written. */
  output: Uint8Array;
}

/**
 * Sorts one day's converted lines (tails ending in "\n", in input order) by `ts` (stable),
 * numbers them with the next seqs of `seqs` (the site stream is one sequence across nights,
 * docs/migration.md) and writes them to `<tmp>/site_YYYYMMDD.ndjson`, working on bytes only.
 * Returns the open file, written but not yet synced, so the caller can overlap the fdatasync
 * with the next day's work; or nothing, when the night came out as stored in the destination
 * and is left there as it is (a forced rerun, see {@linkcode NightSeqs}).
 *
 * @param tmp The temporary directory.
 * @param date The day, `YYYY-MM-DD`.
 * @param bytes The day's converted lines.
 * @param buffers Buffers reused from day to day.
 * @param seqs The migration's seq counter, advanced by the day's lines.
 * @returns The written file, still open; `undefined` when nothing needs writing.
 *
 * @example Usage
 * ```ts ignore
 * import { writeSorted } from "./write.ts";
 * import { NightSeqs } from "./seq_base.ts";
 *
 * const buffers = { input: new Uint8Array(0), output: new Uint8Array(0) };
 * const seqs = new NightSeqs({ seq: 0, mark: 0, nights: new Map() }, false);
 * const file = await writeSorted("/data/telemetry/.migrate-tmp-x", "2026-03-05", bytes, buffers, seqs);
 * await file?.syncData();
 * file?.close();
 * ```
 */
export async function writeSorted(
  tmp: string,
  date: string,
  bytes: Uint8Array,
  buffers: DayBuffers,
  seqs: NightSeqs,
): Promise<Deno.FsFile | undefined> {
  const starts: number[] = [];
  for (let p = 0; p < bytes.length;) {
    starts.push(p);
    p = bytes.indexOf(10, p) + 1; // every spilled line ends in "\n"
  }
  const order = tsOrder(bytes, starts);
  const n = starts.length;
  const need = bytes.length + n * (SEQ_HEAD.length + MAX_SEQ_DIGITS);
  if (buffers.output.length < need) buffers.output = new Uint8Array(Math.ceil(need * 1.25));
  const out = await seqs.number(date, n, (first) => {
    const out = buffers.output;
    let pos = 0;
    for (let i = 0; i < n; i++) {
      const line = order[i] as number;
      const start = starts[line] as number;
      const end = line + 1 < n ? starts[line + 1] as number : bytes.length;
      out.set(SEQ_HEAD, pos);
      pos += SEQ_HEAD.length;
      const seq = String(first + i + 1);
      for (let d = 0; d < seq.length; d++) out[pos++] = seq.charCodeAt(d);
      out.set(bytes.subarray(start, end), pos);
      pos += end - start;
    }
    return out.subarray(0, pos);
  });
  if (out === undefined) return undefined;
  const file = await Deno.open(join(tmp, siteName(date)), { write: true, createNew: true });
  try {
    await writeFull(file, out);
  } catch (err) {
    file.close();
    throw err;
  }
  return file;
}

/** The order of a day's lines by `ts`; ties keep input order (sorted file path, then line number). */
function tsOrder(bytes: Uint8Array, starts: readonly number[]): number[] {
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
  if (!sorted) order.sort((a, b) => (keys[a] as number) - (keys[b] as number) || a - b);
  return order;
}

/**
 * fdatasyncs and closes files in the background, at most `limit` at a time, so the disk flushes
 * one day while the next is being sorted. {@linkcode Syncer.drain} rethrows the first failure.
 *
 * @example Usage
 * ```ts ignore
 * import { Syncer, writeSorted } from "./write.ts";
 *
 * const syncer = new Syncer(4);
 * await syncer.add(await writeSorted(tmp, "2026-03-05", bytes, buffers, { last: 0 }));
 * await syncer.drain();
 * ```
 */
export class Syncer {
  #pending: Promise<void>[] = [];
  #error: { err: unknown } | undefined;
  #limit: number;

  /**
   * Creates a syncer.
   *
   * @param limit Files synced at the same time, at most.
   */
  constructor(limit: number) {
    this.#limit = limit;
  }

  /**
   * Syncs and closes a file in the background, first waiting for the oldest sync when `limit`
   * are under way.
   *
   * @param file A written file; the syncer closes it.
   * @throws If an earlier sync failed.
   */
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

  /**
   * Waits for every sync under way.
   *
   * @throws The first failure, if any sync failed.
   */
  async drain(): Promise<void> {
    await Promise.all(this.#pending);
    this.#pending = [];
    this.#throwIfFailed();
  }

  #throwIfFailed(): void {
    if (this.#error !== undefined) throw this.#error.err;
  }
}

/**
 * fdatasyncs a file that is already written and closed.
 *
 * @param path The file.
 *
 * @example Usage
 * ```ts ignore
 * import { syncFile } from "./write.ts";
 *
 * await syncFile("/data/telemetry/.migrate-tmp-x/migrate-rejects.ndjson");
 * ```
 */
export async function syncFile(path: string): Promise<void> {
  const file = await Deno.open(path, { write: true });
  try {
    await file.syncData();
  } finally {
    file.close();
  }
}

/**
 * The summary of the site file of a written date.
 *
 * @param dst The destination directory.
 * @param date The day, `YYYY-MM-DD`.
 * @param days Lines of each day, by date.
 * @returns Its name, path in the destination and lines.
 *
 * @example Usage
 * ```ts
 * import { fileSummary } from "./write.ts";
 * import assert from "node:assert/strict";
 *
 * const file = fileSummary("/dst", "2026-03-05", new Map([["2026-03-05", 3]]));
 * assert.deepEqual(file, {
 *   name: "site_20260305.ndjson",
 *   path: "/dst/site_20260305.ndjson",
 *   lines: 3,
 * });
 * ```
 */
export function fileSummary(
  dst: string,
  date: string,
  days: ReadonlyMap<string, number>,
): MigrateFileSummary {
  return { name: siteName(date), path: join(dst, siteName(date)), lines: days.get(date) as number };
}

/**
 * The target files that already exist, sorted: each site file in either stored form
 * (`site_YYYYMMDD.ndjson` or, once the service compressed it, `.ndjson.gz`, docs/storage.md),
 * and the rejects file.
 *
 * @param files The site files a run writes.
 * @param rejectsFile The rejects file's path in the destination.
 * @param dst The destination directory.
 * @returns Absolute paths of the existing targets.
 * @throws {MigrateError} If the destination may not be read.
 *
 * @example Usage
 * ```ts ignore
 * import { existingTargets } from "./write.ts";
 *
 * const existing = await existingTargets(files, "/dst/migrate-rejects.ndjson", "/dst");
 * ```
 */
export async function existingTargets(
  files: readonly MigrateFileSummary[],
  rejectsFile: string,
  dst: string,
): Promise<string[]> {
  const existing: string[] = [];
  await withPermissionHint(
    async () => {
      const paths = files.flatMap((f) => [f.path, f.path + GZ_SUFFIX]);
      for (const path of [...paths, rejectsFile]) {
        if (await exists(path)) existing.push(path);
      }
    },
    `read "${dst}"`,
    `--allow-read=${dst}`,
  );
  return existing.sort();
}

/**
 * The night key of a site file, plain or compressed, by its name or path.
 *
 * @param path The file's name or path.
 * @returns `YYYYMMDD`, or `undefined` for a file that is no site file.
 *
 * @example Usage
 * ```ts
 * import { nightOfPath } from "./write.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(nightOfPath("/dst/site_20240301.ndjson.gz"), "20240301");
 * assert.equal(nightOfPath("/dst/migrate-rejects.ndjson"), undefined);
 * ```
 */
export function nightOfPath(path: string): string | undefined {
  return STORED_SITE_FILE.exec(basename(path))?.[1];
}

/**
 * Checks that a forced run may replace the existing targets: every site file it replaces, but
 * the nights left as stored, holds only lines a migration wrote (`meta.migrated_from`,
 * docs/migration.md). A line the service recorded would be lost, so it refuses instead.
 *
 * @param existing The existing targets (see {@linkcode existingTargets}).
 * @param kept The night keys left as stored (see `NightSeqs.kept`).
 * @param dst The destination directory.
 * @throws {MigrateError} Naming the first file and line that a migration did not write, or a
 *   damaged file, or a missing permission.
 *
 * @example Usage
 * ```ts ignore
 * import { checkReplaceable } from "./write.ts";
 *
 * await checkReplaceable(["/dst/site_20240301.ndjson"], new Set(), "/dst");
 * ```
 */
export async function checkReplaceable(
  existing: readonly string[],
  kept: ReadonlySet<string>,
  dst: string,
): Promise<void> {
  await withPermissionHint(
    async () => {
      for (const path of existing) {
        const night = nightOfPath(path);
        if (night !== undefined && !kept.has(night)) await checkMigratedOnly(path, night, dst);
      }
    },
    `read "${dst}"`,
    `--allow-read=${dst}`,
  );
}

async function checkMigratedOnly(path: string, night: string, dst: string): Promise<void> {
  // A link named like a site file is no stored night (docs/storage.md): never read through it.
  if (!(await Deno.lstat(path)).isFile) return;
  const file = { path, name: basename(path), compressed: path.endsWith(GZ_SUFFIX), night };
  let lineNo = 0;
  try {
    for await (const batch of readLines(file)) {
      for (const { text } of batch) {
        lineNo++;
        if (text.trim() === "" || isMigratedLine(text)) continue;
        const seq = readSeqAndType(text)?.seq;
        throw new MigrateError(
          `Cannot replace "${path}": its line ${lineNo}${
            seq === undefined ? "" : ` (seq ${seq})`
          } was not written by a migration (no "migrated_from": ${
            JSON.stringify(MIGRATED_FROM)
          } in its meta), and --force replaces only migrated lines; move the file out of "${dst}", or leave that night's records out of a copy of --source`,
        );
      }
    }
  } catch (err) {
    if (!(err instanceof DamagedFileError)) throw err;
    throw new MigrateError(
      `Cannot replace "${path}": ${err.message}; it may hold lines the service recorded, so move it out of "${dst}" first`,
      { cause: err },
    );
  }
}

function isMigratedLine(text: string): boolean {
  try {
    const line = JSON.parse(text);
    return line?.meta?.migrated_from === MIGRATED_FROM;
  } catch {
    return false;
  }
}

/**
 * Renames the finished site files, then the rejects file, from `workDir` into `dst`, and removes
 * the compressed form of each night it replaced. Nights left as stored are not touched.
 *
 * @param workDir The temporary directory holding the finished files.
 * @param files The site files.
 * @param dst The destination directory.
 * @param report Told of each file committed.
 * @param replaced The existing targets (see {@linkcode existingTargets}), replaced with force.
 * @param kept The night keys left as stored (see `NightSeqs.kept`).
 *
 * @example Usage
 * ```ts ignore
 * import { commit } from "./write.ts";
 *
 * await commit("/dst/.migrate-tmp-x", files, "/dst", () => {}, [], new Set());
 * ```
 */
export async function commit(
  workDir: string,
  files: readonly MigrateFileSummary[],
  dst: string,
  report: Report,
  replaced: readonly string[],
  kept: ReadonlySet<string>,
): Promise<void> {
  // Every file is complete before the first rename: an interrupted commit leaves each
  // target either absent or whole (docs/migration.md).
  const written = files.filter((f) => !kept.has(nightOfPath(f.name) as string));
  const names = [...written.map((f) => f.name), REJECTS_FILE];
  for (let i = 0; i < names.length; i++) {
    const name = names[i] as string;
    await Deno.rename(join(workDir, name), join(dst, name));
    report("commit", i + 1, names.length);
  }
  // Only after its new plain form is in place: interrupted here, a night is read from the
  // plain form alone when both begin alike (docs/storage.md), and nothing is lost otherwise.
  for (const path of replaced) {
    const night = nightOfPath(path);
    if (path.endsWith(GZ_SUFFIX) && night !== undefined && !kept.has(night)) {
      await Deno.remove(path);
    }
  }
}
