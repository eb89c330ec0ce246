/**
 * Compression and retention of the stored files (docs/history.md): `--compress-after N` turns
 * site files whose night ended more than N nights ago, and the `telemetry.ndjson` of runs
 * stopped more than N nights ago, into `<name>.gz` (`compress.ts`); `--retain N` deletes site
 * files whose night ended more than N nights ago, never one that a forwarding cursor
 * (`forward_cursor.ts`) has not passed. "More than N nights ago" counts nights by their keys: with
 * N = 2 the current night and the two before it stay as they are, the third before it is the
 * first one touched, counted from the newest night that holds data when the clock is later, and
 * never one of the newest N + 1 nights that hold data ({@linkcode NightEvidence}). Never the
 * current night's file, a night the service has open, or the active run's file; run directories
 * are never deleted.
 *
 * A pass can be killed at any point: compression is crash-safe, and the next pass settles what
 * it left (a temporary file, both forms of a night).
 *
 * @example Usage
 * ```ts ignore
 * import { runRetentionPass } from "./retention.ts";
 * const report = await runRetentionPass({
 *   siteDir: "./telemetry", timeZone: "UTC", compressAfter: 2, retain: 30,
 * });
 * console.log(report.compressed, report.deleted);
 * ```
 *
 * @module
 */

import { dirname, join } from "node:path";
import { dateOfKey, dayKey } from "./day_key.ts";
import { errorText } from "../core/errors.ts";
import { syncDirectory } from "./fs.ts";
import { listCursors, sitePassed } from "./forward_cursor.ts";
import { chooseForms, type StoredFile, storedFile } from "./site_files.ts";
import { GZ_SUFFIX, RUN_FILE, STORED_SITE_FILE } from "./layout.ts";
import { readRunLog } from "./run_log.ts";
import { compressFile, gzSize, isCompressionTemp } from "./compress.ts";
import { nightOfIndexFile } from "./night_index.ts";

/** Options of {@linkcode runRetentionPass} and {@linkcode RetentionScheduler}. */
export interface RetentionOptions {
  /** The site directory (its real path). */
  siteDir: string;
  /** The site's IANA zone (nights). */
  timeZone: string;
  /**
   * Compress files whose night ended more than this many nights ago; 0 turns it off.
   * @default {2}
   */
  compressAfter?: number;
  /**
   * Delete site files whose night ended more than this many nights ago; 0 keeps them forever.
   * @default {0}
   */
  retain?: number;
  /**
   * The clock, epoch milliseconds.
   * @default {Date.now}
   */
  now?: () => number;
  /** Nights whose site file the service has open: never touched. */
  openNights?: () => Iterable<string>;
  /** The active run's directory: its file is never touched. */
  activeRunDir?: () => string | undefined;
  /** Told about what could not be done (once per pass and file). */
  warn?: (message: string) => void;
  /** Told what was compressed and deleted. */
  info?: (message: string) => void;
  /** Stops a pass between two steps (closing the service). */
  signal?: AbortSignal;
}

/** What one pass did. */
export interface RetentionReport {
  /** The `.gz` files written. */
  compressed: string[];
  /** The files deleted by retention (and originals whose `.gz` was already complete). */
  deleted: string[];
  /** Files retention kept because a forwarding cursor has not passed them. */
  heldByCursor: string[];
}

/**
 * The share of the time a pass spends compressing: gzip needs a whole core, and on a two-core
 * unit a core taken at full speed doubled the p99 of `POST /event`.
 */
const COMPRESS_DUTY = 0.5;

/**
 * Whether a night ended more than `n` nights before the current one.
 *
 * @param night The night's key.
 * @param current The current night's key.
 * @param n Nights.
 * @returns `true` when `night` is at least `n + 1` nights before `current`.
 *
 * @example Usage
 * ```ts
 * import { endedMoreThan } from "./retention.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(endedMoreThan("20260507", "20260510", 2), true);
 * assert.equal(endedMoreThan("20260508", "20260510", 2), false);
 * ```
 */
export function endedMoreThan(night: string, current: string, n: number): boolean {
  return dateOfKey(night).until(dateOfKey(current), { largestUnit: "days" }).days > n;
}

/**
 * The nights a pass may count as passed, judged by what the site directory holds as well as by
 * the clock (docs/history.md, "Compression and retention"): a clock years ahead (no RTC
 * battery, a GPS or NTP fault) is no evidence that stored data is old.
 */
export class NightEvidence {
  /** The nights whose site file holds data, ascending. */
  readonly #dataNights: string[];
  /** The current night by the clock. */
  readonly current: string;
  /** The current night by the clock or, when earlier, the newest night that holds data. */
  readonly reference: string;

  /**
   * Creates the evidence of one pass.
   *
   * @param current The current night's key by the clock.
   * @param dataNights The keys of the nights whose site file holds at least one byte.
   */
  constructor(current: string, dataNights: Iterable<string>) {
    this.current = current;
    this.#dataNights = [...new Set(dataNights)].sort();
    const newest = this.#dataNights.at(-1);
    this.reference = newest !== undefined && newest < current ? newest : current;
  }

  /**
   * Whether a night counts as passed by more than `n` nights: it ended more than `n` nights
   * before {@linkcode NightEvidence.reference}, and it is older than the newest `n + 1` nights
   * that hold data.
   *
   * @param night The night's key.
   * @param n Nights (`--retain` or `--compress-after`).
   * @returns `true` when the night is due.
   *
   * @example Usage
   * ```ts
   * import { NightEvidence } from "./retention.ts";
   * import assert from "node:assert/strict";
   *
   * // The clock says 2038; the newest data is of 20261127: only what that night passed is due.
   * const evidence = new NightEvidence("20380119", ["20261123", "20261125", "20261127"]);
   * assert.equal(evidence.passed("20261123", 1), true);
   * assert.equal(evidence.passed("20261125", 1), false);
   * assert.equal(evidence.passed("20261127", 1), false);
   * ```
   */
  passed(night: string, n: number): boolean {
    if (night >= this.current || !endedMoreThan(night, this.reference, n)) return false;
    const nights = this.#dataNights;
    let later = 0;
    for (let i = nights.length - 1; i >= 0 && nights[i]! > night; i--) later++;
    return later > n;
  }
}

/** One pass's settings and what it did so far. */
interface Pass {
  siteDir: string;
  timeZone: string;
  compressAfter: number;
  retain: number;
  /** The current night's key by the clock. */
  current: string;
  /** What the site directory says about which nights passed (set by the site files' step). */
  evidence: NightEvidence;
  warn: (message: string) => void;
  info: (message: string) => void;
  signal: AbortSignal | undefined;
  report: RetentionReport;
}

/** The forms of one night's site file found in the site directory. */
interface NightForms {
  plain?: StoredFile;
  gz?: StoredFile;
}

/**
 * Settles a file whose plain and `.gz` forms both exist (a pass killed between rename and
 * removal, or the night written again afterwards): the original is removed when the `.gz`
 * holds exactly its bytes; compressed again when it holds more; both are kept, with a warning,
 * when their lines differ.
 */
async function settleBoth(pass: Pass, plain: StoredFile, gz: StoredFile): Promise<void> {
  const forms = await chooseForms(plain, gz);
  if (forms.length === 2) {
    pass.warn(
      `${plain.path} and ${gz.path} hold different lines (the night was written again after it was compressed); both are kept and read, oldest first. Merge them by hand if you want one file.`,
    );
    return;
  }
  const size = (await Deno.lstat(plain.path)).size;
  if ((await gzSize(gz.path)) === size) {
    await Deno.remove(plain.path);
    await syncDirectory(dirname(plain.path));
    pass.report.deleted.push(plain.path);
    return;
  }
  const done = await compressFile(plain.path, { signal: pass.signal, duty: COMPRESS_DUTY });
  if (done) pass.report.compressed.push(done);
}

/** Compresses a file, or settles it with the `.gz` an interrupted pass left beside it. */
async function compressOne(pass: Pass, plain: StoredFile, gz: StoredFile | undefined) {
  if (gz) return await settleBoth(pass, plain, gz);
  const done = await compressFile(plain.path, { signal: pass.signal, duty: COMPRESS_DUTY });
  if (done) {
    pass.report.compressed.push(done);
    pass.info(
      `Compressed ${plain.path} to ${done} (--compress-after ${pass.compressAfter})${
        countedFrom(pass)
      }.`,
    );
  }
}

/** The runs recorded as stopped, with the night they stopped in. */
async function stoppedRuns(
  siteDir: string,
  timeZone: string,
  warn: (message: string) => void,
): Promise<Map<string, string>> {
  const stopped = new Map<string, string>(); // run_dir -> night it stopped
  const active = new Set<string>();
  const onDamage = (damage: Error) => warn(`${damage.message}; what can be read of it is read.`);
  // Every line naming a run directory counts, a record or not (store/run_log.ts).
  for (const { runDir, stoppedAt } of (await readRunLog(siteDir, { onDamage })).lines) {
    const ms = stoppedAt === undefined ? NaN : Date.parse(stoppedAt);
    if (Number.isNaN(ms)) {
      stopped.delete(runDir);
      active.add(runDir);
    } else {
      stopped.set(runDir, dayKey(ms, timeZone));
      active.delete(runDir);
    }
  }
  // Runs placed in the site directory before the run log: stopped when their file was last
  // written (a stopped run's file is never written again).
  for await (const entry of Deno.readDir(siteDir)) {
    if (!entry.isDirectory || entry.name.startsWith(".")) continue;
    const dir = join(siteDir, entry.name);
    if (stopped.has(dir) || active.has(dir)) continue;
    try {
      const info = await Deno.lstat(join(dir, RUN_FILE));
      if (info.isFile && info.mtime) stopped.set(dir, dayKey(info.mtime.getTime(), timeZone));
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) throw err;
    }
  }
  return stopped;
}

/**
 * Whether every cursor has passed a site file, every byte of it sent (`sitePassed()`: a clock
 * stepped back writes into earlier nights, docs/fleet.md); `false` when one cannot be read.
 */
async function passedByCursors(
  file: StoredFile,
  cursors: Awaited<ReturnType<typeof listCursors>>,
): Promise<boolean> {
  let size: number | undefined | null = null;
  for (const { cursor } of cursors) {
    if (!cursor) return false;
    size ??= file.compressed ? await gzSize(file.path) : (await Deno.lstat(file.path)).size;
    if (!sitePassed(cursor, file.name, size)) return false;
  }
  return true;
}

/**
 * The site directory's nights and the forms of their files, removing the temporary files of a
 * pass killed while writing (the original is still there: it goes only after the rename).
 */
async function siteNights(siteDir: string): Promise<Map<string, NightForms>> {
  const forms = new Map<string, NightForms>();
  const indexes: string[] = [];
  for await (const entry of Deno.readDir(siteDir)) {
    if (isCompressionTemp(entry.name) && entry.isFile) {
      await Deno.remove(join(siteDir, entry.name)).catch(() => {});
      continue;
    }
    if (nightOfIndexFile(entry.name) !== undefined && entry.isFile) {
      indexes.push(entry.name);
      continue;
    }
    const m = STORED_SITE_FILE.exec(entry.name);
    if (!m || !entry.isFile) continue; // a link is never compressed or deleted through
    const night = m[1]!;
    const slot = forms.get(night) ?? {};
    slot[m[2] ? "gz" : "plain"] = storedFile(join(siteDir, entry.name));
    forms.set(night, slot);
  }
  // A night's time index goes with its plain file (compressed or deleted), and a temporary one
  // a reader left (store/night_index.ts).
  for (const name of indexes) {
    if (name.includes(".tmp-") || !forms.get(nightOfIndexFile(name)!)?.plain) {
      await Deno.remove(join(siteDir, name)).catch(() => {});
    }
  }
  return forms;
}

/** How nights were counted, when not from the clock's night (docs/history.md). */
function countedFrom(pass: Pass): string {
  const { reference, current } = pass.evidence;
  // The night before the clock's is the usual reference until the current night holds data.
  return !endedMoreThan(reference, current, 1)
    ? ""
    : `, counted from night ${reference}, the newest that holds data (the clock is in night ${current})`;
}

/** An empty gzip member is 20 bytes: a `.gz` larger than that holds data. */
const EMPTY_GZ_BYTES = 20;

/** The nights whose site file (either form) holds data. */
async function nightsWithData(forms: Map<string, NightForms>): Promise<string[]> {
  const out: string[] = [];
  for (const [night, { plain, gz }] of forms) {
    for (const [file, empty] of [[plain, 0], [gz, EMPTY_GZ_BYTES]] as const) {
      if (!file) continue;
      const size = await Deno.lstat(file.path).then((i) => i.size, () => 0);
      if (size > empty) {
        out.push(night);
        break;
      }
    }
  }
  return out;
}

/**
 * Deletes a night's files when every cursor has passed them.
 *
 * @returns `false` when a cursor holds them (they stay, and may still be compressed).
 */
async function deleteNight(
  pass: Pass,
  files: StoredFile[],
  cursors: Awaited<ReturnType<typeof listCursors>>,
): Promise<boolean> {
  let held = false;
  for (const file of files) {
    if (!(await passedByCursors(file, cursors))) held = true;
  }
  if (held) {
    // Kept for the forwarder, and still compressed: it reads either form.
    pass.report.heldByCursor.push(...files.map((f) => f.path));
    return false;
  }
  for (const file of files) {
    await Deno.remove(file.path);
    pass.report.deleted.push(file.path);
    pass.info(
      `Deleted ${file.path}: its night ended more than ${pass.retain} nights ago (--retain)${
        countedFrom(pass)
      }.`,
    );
  }
  await syncDirectory(pass.siteDir);
  return true;
}

/** Deletes and compresses the site files that are due, night by night. */
async function settleSiteFiles(pass: Pass, open: Set<string>): Promise<void> {
  const { siteDir, current, retain, compressAfter, signal } = pass;
  const forms = await siteNights(siteDir);
  const evidence = new NightEvidence(current, await nightsWithData(forms));
  pass.evidence = evidence;
  const cursors = retain > 0 ? await listCursors(siteDir) : [];
  for (const { name, problem } of cursors) {
    if (problem) {
      pass.warn(
        `Retention deletes nothing while the forwarding cursor "${name}" cannot be read: ${problem}`,
      );
    }
  }
  for (const night of [...forms.keys()].sort()) {
    signal?.throwIfAborted();
    if (night >= current || open.has(night)) continue;
    const { plain, gz } = forms.get(night)!;
    try {
      if (retain > 0 && evidence.passed(night, retain)) {
        const files = [gz, plain].filter((f): f is StoredFile => f !== undefined);
        if (await deleteNight(pass, files, cursors)) continue;
      }
      if (compressAfter > 0 && evidence.passed(night, compressAfter) && plain) {
        await compressOne(pass, plain, gz);
      }
    } catch (err) {
      if (signal?.aborted) throw err;
      pass.warn(`Cannot settle the files of night ${night} in ${siteDir}: ${errorText(err)}`);
    }
  }
}

/** Compresses the files of runs stopped long enough ago, never the active run's. */
async function compressStoppedRuns(pass: Pass, activeRun: string | undefined): Promise<void> {
  const { signal } = pass;
  for (const [runDir, night] of await stoppedRuns(pass.siteDir, pass.timeZone, pass.warn)) {
    signal?.throwIfAborted();
    // Judged against the same reference night as the site files: a clock years ahead does not
    // make a run stopped minutes ago old.
    const { reference } = pass.evidence;
    if (runDir === activeRun || !endedMoreThan(night, reference, pass.compressAfter)) continue;
    const plain = storedFile(join(runDir, RUN_FILE));
    const gz = storedFile(join(runDir, RUN_FILE + GZ_SUFFIX));
    try {
      // Only regular files: a link planted in a run directory is not followed.
      if (!(await Deno.lstat(plain.path).then((i) => i.isFile, () => false))) continue;
      for await (const entry of Deno.readDir(runDir)) {
        if (!isCompressionTemp(entry.name) || !entry.isFile) continue;
        await Deno.remove(join(runDir, entry.name)).catch(() => {});
      }
      const hasGz = await Deno.lstat(gz.path).then((i) => i.isFile, () => false);
      await compressOne(pass, plain, hasGz ? gz : undefined);
    } catch (err) {
      if (signal?.aborted) throw err;
      pass.warn(`Cannot compress the file of the run in ${runDir}: ${errorText(err)}`);
    }
  }
}

/**
 * One pass of compression and retention over a site directory: removes left-over temporary
 * files, settles files found in both forms, compresses and deletes what is due (see the module
 * doc).
 *
 * @param options The directory, the nights and what the service holds open.
 * @returns What was done.
 *
 * @example Usage
 * ```ts ignore
 * import { runRetentionPass } from "./retention.ts";
 * await runRetentionPass({ siteDir: "./telemetry", timeZone: "UTC", compressAfter: 2 });
 * ```
 */
export async function runRetentionPass(options: RetentionOptions): Promise<RetentionReport> {
  const current = dayKey((options.now ?? Date.now)(), options.timeZone);
  const pass: Pass = {
    siteDir: options.siteDir,
    timeZone: options.timeZone,
    compressAfter: options.compressAfter ?? 2,
    retain: options.retain ?? 0,
    current,
    evidence: new NightEvidence(current, []),
    warn: options.warn ?? (() => {}),
    info: options.info ?? (() => {}),
    signal: options.signal,
    report: { compressed: [], deleted: [], heldByCursor: [] },
  };
  const open = new Set(options.openNights?.() ?? []);
  const activeRun = options.activeRunDir?.();
  await settleSiteFiles(pass, open);
  if (pass.compressAfter > 0) await compressStoppedRuns(pass, activeRun);
  return pass.report;
}

/**
 * Runs retention passes in the background for a service, one at a time: at start-up and after
 * each rotation ({@linkcode RetentionScheduler.schedule}); a request during a pass runs one more
 * pass after it. A pass's failure is warned, never thrown.
 *
 * @example Usage
 * ```ts ignore
 * import { RetentionScheduler } from "./retention.ts";
 * const retention = new RetentionScheduler({
 *   siteDir: "./telemetry", timeZone: "UTC", compressAfter: 2,
 * });
 * retention.schedule();
 * await retention.close();
 * ```
 */
export class RetentionScheduler {
  #options: RetentionOptions;
  #abort = new AbortController();
  #running: Promise<void> | undefined;
  #again = false;

  /**
   * Creates the scheduler; nothing runs before {@linkcode RetentionScheduler.schedule}.
   *
   * @param options As for {@linkcode runRetentionPass} (its `signal` is the scheduler's own).
   */
  constructor(options: RetentionOptions) {
    this.#options = options;
  }

  /** Whether passes do anything (compression or retention is on). */
  get enabled(): boolean {
    return (this.#options.compressAfter ?? 2) > 0 || (this.#options.retain ?? 0) > 0;
  }

  /** The pass running now, if any (tests wait for it). */
  get idle(): Promise<void> {
    return this.#running ?? Promise.resolve();
  }

  /** Starts a pass now, or one more after the running one. */
  schedule(): void {
    if (!this.enabled || this.#abort.signal.aborted) return;
    if (this.#running) {
      this.#again = true;
      return;
    }
    this.#running = (async () => {
      do {
        this.#again = false;
        try {
          await runRetentionPass({ ...this.#options, signal: this.#abort.signal });
        } catch (err) {
          if (this.#abort.signal.aborted) return;
          // The wording of this log line predates the module's name; operators may match it.
          this.#options.warn?.(`The file lifecycle pass failed: ${errorText(err)}`);
        }
      } while (this.#again && !this.#abort.signal.aborted);
    })().finally(() => this.#running = undefined);
  }

  /** Stops a running pass between two steps and waits for it. */
  async close(): Promise<void> {
    this.#abort.abort();
    await this.#running;
  }
}
