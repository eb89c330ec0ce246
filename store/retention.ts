/**
 * The files' lifecycle (docs/history.md): `--compress-after N` turns site files whose night ended
 * more than N nights ago, and the `telemetry.ndjson` of runs stopped more than N nights ago,
 * into `<name>.gz`; `--retain N` deletes site files whose night ended more than N nights ago,
 * never one that a forwarding cursor (`_forward_cursor.ts`) has not passed. "More than N nights
 * ago" counts nights by their keys: with N = 2 the current night and the two before it stay as
 * they are, the third before it is the first one touched. Never the current night's file, a
 * night the service has open, or the active run's file; run directories are never deleted.
 *
 * Crash-safe at every point: the `.gz` is written under a temporary name beginning with a dot,
 * fsynced, renamed into place (the directory fsynced), and only then is the original removed.
 * A kill at any moment leaves the original, or the complete `.gz` (with or without the
 * original beside it), never neither and never a half `.gz`; the next pass finishes the job and
 * removes a left-over temporary file. Readers (`_site_files.ts`) read either form.
 *
 * Gzip's CPU time runs in a worker ({@linkcode GzipWorker}), 64 KiB at a time, while the file
 * work stays here, so the service keeps answering while a large night is compressed.
 *
 * @example Usage
 * ```ts ignore
 * import { runLifecycle } from "./retention.ts";
 * const report = await runLifecycle({
 *   siteDir: "./telemetry", timeZone: "UTC", compressAfter: 2, retain: 30,
 * });
 * console.log(report.compressed, report.deleted);
 * ```
 *
 * @module
 */

import { basename, dirname, join } from "node:path";
import { dayKey } from "./day_key.ts";
import { errorText } from "../core/errors.ts";
import { writeFull } from "./writer.ts";
import { syncDirectory } from "./fs.ts";
import { listCursors } from "../fleet/cursor.ts";
import { chooseForms, readLines, type StoredFile, storedFile } from "./site_files.ts";
import { GZ_SUFFIX, RUN_FILE, RUN_LOG_FILE, STORED_SITE_FILE } from "./layout.ts";

/** Options of {@linkcode runLifecycle} and {@linkcode Lifecycle}. */
export interface LifecycleOptions {
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
export interface LifecycleReport {
  /** The `.gz` files written. */
  compressed: string[];
  /** The files deleted by retention (and originals whose `.gz` was already complete). */
  deleted: string[];
  /** Files retention kept because a forwarding cursor has not passed them. */
  heldByCursor: string[];
}

/**
 * The share of the time the lifecycle spends compressing: gzip needs a whole core, and on a
 * two-core unit a core taken at full speed doubled the p99 of `POST /event`.
 */
const COMPRESS_DUTY = 0.5;
/** Bytes read and compressed per step. */
const CHUNK = 64 * 1024;
/** Temporary files of compressions: `.<name>.gz.tmp-<uuid>`. */
const TEMP_GZ = /^\.(.+\.ndjson\.gz)\.tmp-[0-9a-f-]{36}$/;

function keyToDate(key: string): Temporal.PlainDate {
  return Temporal.PlainDate.from(`${key.slice(0, 4)}-${key.slice(4, 6)}-${key.slice(6)}`);
}

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
  return keyToDate(night).until(keyToDate(current), { largestUnit: "days" }).days > n;
}

/** The uncompressed size of a `.gz` (read whole), or `undefined` when it is damaged. */
async function gzSize(path: string): Promise<number | undefined> {
  const file = await Deno.open(path, { read: true });
  let total = 0;
  try {
    // The readable closes the file when it ends or fails.
    for await (const chunk of file.readable.pipeThrough(new DecompressionStream("gzip"))) {
      total += chunk.length;
    }
    return total;
  } catch (err) {
    if (err instanceof TypeError) return undefined;
    throw err;
  }
}

/**
 * The worker's code: a `CompressionStream` fed with the chunks it is sent, answering each
 * compressed piece, `taken` when a chunk was consumed and `end` when the stream is finished. It
 * is plain JavaScript loaded from a `blob:` URL, so it needs no read permission for a module
 * file (the service runs with read access to its site directory only) and works the same from a
 * checkout, from JSR and from a compiled binary.
 */
const GZIP_WORKER_SOURCE = `
const stream = new CompressionStream("gzip");
const writer = stream.writable.getWriter();
const reader = stream.readable.getReader();
(async () => {
  try {
    while (true) {
      const { value, done } = await reader.read();
      if (done) break;
      self.postMessage({ out: value }, [value.buffer]);
    }
    self.postMessage({ end: true });
  } catch (err) {
    self.postMessage({ error: String(err) });
  }
})();
self.onmessage = async (event) => {
  try {
    if (event.data === null) await writer.close();
    else {
      await writer.write(event.data);
      self.postMessage({ taken: true });
    }
  } catch (err) {
    self.postMessage({ error: String(err) });
  }
};
`;

/** A gzip compressor: what {@linkcode compressFile} feeds and drains. */
interface Gzip {
  /** Feeds a chunk; resolves when it was taken (backpressure). */
  write(chunk: Uint8Array<ArrayBuffer>): Promise<void>;
  /** Ends the input; resolves after the last compressed piece was handed to `onOutput`. */
  close(): Promise<void>;
  /** Stops at once. */
  abort(): void;
}

/**
 * Gzip in a worker, so its CPU time never blocks the thread that answers requests (issue 17:
 * compressing a 1 GB night must not stall ingestion). Compressed pieces come back in order.
 */
export class GzipWorker implements Gzip {
  #worker: Worker;
  #url: string;
  #taken: PromiseWithResolvers<void> | undefined;
  #ended = Promise.withResolvers<void>();
  #failure: Error | undefined;
  #output: Promise<void> = Promise.resolve();

  /**
   * Starts the worker.
   *
   * @param onOutput Receives each compressed piece, in order; awaited one at a time.
   */
  constructor(onOutput: (piece: Uint8Array) => Promise<void>) {
    this.#url = URL.createObjectURL(
      new Blob([GZIP_WORKER_SOURCE], { type: "application/javascript" }),
    );
    this.#worker = new Worker(this.#url, { type: "module" });
    this.#ended.promise.catch(() => {});
    this.#worker.onmessage = (
      event: MessageEvent<{ out?: Uint8Array; taken?: true; end?: true; error?: string }>,
    ) => {
      const { out, taken, end, error } = event.data;
      if (out) {
        this.#output = this.#output.then(() => onOutput(out));
        this.#output.catch((err) => this.#fail(err));
      } else if (taken) this.#taken?.resolve();
      else if (end) this.#output.then(() => this.#ended.resolve(), () => {});
      else if (error !== undefined) this.#fail(new Error(`gzip failed: ${error}`));
    };
    this.#worker.onerror = (event) => {
      event.preventDefault();
      this.#fail(new Error(`the gzip worker failed: ${event.message}`));
    };
  }

  #fail(err: unknown): void {
    this.#failure ??= err instanceof Error ? err : new Error(String(err));
    this.#taken?.reject(this.#failure);
    this.#ended.reject(this.#failure);
  }

  /**
   * Feeds a chunk (transferred: the caller must not reuse it).
   *
   * @param chunk Bytes of the original.
   * @returns When the worker took it.
   */
  async write(chunk: Uint8Array<ArrayBuffer>): Promise<void> {
    if (this.#failure) throw this.#failure;
    this.#taken = Promise.withResolvers<void>();
    this.#worker.postMessage(chunk, [chunk.buffer]);
    await this.#taken.promise;
  }

  /**
   * Ends the input and waits for the last compressed piece to be written.
   *
   * @returns When everything was handed to `onOutput`.
   */
  async close(): Promise<void> {
    if (this.#failure) throw this.#failure;
    this.#worker.postMessage(null);
    try {
      await this.#ended.promise;
    } finally {
      this.abort();
    }
  }

  /** Terminates the worker. */
  abort(): void {
    this.#worker.terminate();
    URL.revokeObjectURL(this.#url);
  }
}

/** Gzip on this thread: the fallback where a worker cannot be started. */
function gzipHere(onOutput: (piece: Uint8Array) => Promise<void>): Gzip {
  const stream = new CompressionStream("gzip");
  const writer = stream.writable.getWriter();
  const drain = (async () => {
    for await (const piece of stream.readable) await onOutput(piece);
  })();
  // A failed drain (disk full) must stop the feeding rather than leave it waiting.
  drain.catch(() => writer.abort().catch(() => {}));
  return {
    write: (chunk) => writer.write(chunk),
    close: async () => {
      await writer.close();
      await drain;
    },
    abort: () => void writer.abort().catch(() => {}),
  };
}

/**
 * Compresses one stream file crash-safely: `.<name>.gz.tmp-<uuid>` written and fsynced, renamed
 * to `<name>.gz`, the directory fsynced, then the original removed. When the original changed
 * while it was read (the service wrote to it), nothing is renamed and the original stays.
 *
 * @param path The plain file, which must be a regular file.
 * @param options `signal` stops between two steps (the temporary file is removed); `worker:
 *   false` compresses on this thread (default: in a {@linkcode GzipWorker}); `duty` is the
 *   share of the time spent compressing, resting in between (default 1: no rest).
 * @returns The `.gz` path, or `undefined` when the original changed and was left as it is.
 * @throws {Error} What the file system threw; the original is untouched then.
 *
 * @example Usage
 * ```ts ignore
 * import { compressFile } from "./retention.ts";
 * await compressFile("./telemetry/site_20260501.ndjson");
 * ```
 */
export async function compressFile(
  path: string,
  options: { signal?: AbortSignal | undefined; worker?: boolean; duty?: number } = {},
): Promise<string | undefined> {
  const duty = options.duty ?? 1;
  let owed = 0; // milliseconds of rest owed to the rest of the machine
  const gz = path + GZ_SUFFIX;
  const dir = dirname(path);
  const tmp = join(dir, `.${basename(gz)}.tmp-${crypto.randomUUID()}`);
  const before = await Deno.lstat(path);
  if (!before.isFile) throw new Error(`Cannot compress ${path}: it is not a regular file`);
  const input = await Deno.open(path, { read: true });
  let output: Deno.FsFile | undefined;
  let gzip: Gzip | undefined;
  let read = 0;
  try {
    output = await Deno.open(tmp, { write: true, createNew: true });
    const out = output;
    const write = (piece: Uint8Array) => writeFull(out, piece);
    try {
      gzip = options.worker === false ? gzipHere(write) : new GzipWorker(write);
    } catch {
      gzip = gzipHere(write); // no Worker in this runtime
    }
    while (true) {
      options.signal?.throwIfAborted();
      const buf = new Uint8Array(CHUNK); // transferred to the worker: a new one each time
      const n = await input.read(buf);
      if (n === null) break;
      read += n;
      const began = performance.now();
      await gzip.write(n === CHUNK ? buf : buf.slice(0, n));
      // Pacing: on a small machine gzip at full speed competes with the service for the CPU even
      // in a worker; resting (1 / duty - 1) times as long as each step worked keeps it polite.
      owed += (performance.now() - began) * (1 / duty - 1);
      if (owed >= 5) {
        await new Promise((resolve) => setTimeout(resolve, owed));
        owed = 0;
      }
    }
    await gzip.close();
    gzip = undefined;
    await out.sync();
    out.close();
    output = undefined;
    const after = await Deno.lstat(path);
    if (
      !after.isFile || after.size !== read || after.size !== before.size ||
      after.mtime?.getTime() !== before.mtime?.getTime()
    ) {
      await Deno.remove(tmp);
      return undefined;
    }
    options.signal?.throwIfAborted();
    await Deno.rename(tmp, gz);
  } catch (err) {
    gzip?.abort();
    output?.close();
    await Deno.remove(tmp).catch(() => {});
    throw err;
  } finally {
    input.close();
  }
  await syncDirectory(dir);
  await Deno.remove(path);
  await syncDirectory(dir);
  return gz;
}

/**
 * Settles a file whose plain and `.gz` forms both exist (a pass killed between rename and
 * removal, or the night written again afterwards): the original is removed when the `.gz`
 * holds exactly its bytes; compressed again when it holds more; both are kept, with a warning,
 * when their lines differ.
 */
async function settleBoth(
  plain: StoredFile,
  gz: StoredFile,
  report: LifecycleReport,
  warn: (message: string) => void,
  signal: AbortSignal | undefined,
): Promise<void> {
  const forms = await chooseForms(plain, gz);
  if (forms.length === 2) {
    warn(
      `${plain.path} and ${gz.path} hold different lines (the night was written again after it was compressed); both are kept and read, oldest first. Merge them by hand if you want one file.`,
    );
    return;
  }
  const size = (await Deno.lstat(plain.path)).size;
  if ((await gzSize(gz.path)) === size) {
    await Deno.remove(plain.path);
    await syncDirectory(dirname(plain.path));
    report.deleted.push(plain.path);
    return;
  }
  const done = await compressFile(plain.path, { signal, duty: COMPRESS_DUTY });
  if (done) report.compressed.push(done);
}

/** The runs recorded as stopped, with the night they stopped in. */
async function stoppedRuns(
  siteDir: string,
  timeZone: string,
): Promise<Map<string, string>> {
  const stopped = new Map<string, string>(); // run_dir -> night it stopped
  const active = new Set<string>();
  try {
    for await (const batch of readLines(storedFile(join(siteDir, RUN_LOG_FILE)))) {
      for (const { text } of batch) {
        try {
          const record = JSON.parse(text);
          if (typeof record?.run_dir !== "string") continue;
          const ms = typeof record.stopped_at === "string" ? Date.parse(record.stopped_at) : NaN;
          if (Number.isNaN(ms)) {
            stopped.delete(record.run_dir);
            active.add(record.run_dir);
          } else {
            stopped.set(record.run_dir, dayKey(ms, timeZone));
            active.delete(record.run_dir);
          }
        } catch {
          // a damaged line of the log names no run
        }
      }
    }
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
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

/** Whether every cursor has passed a site file; `false` when one cannot be read. */
async function passedByCursors(
  file: StoredFile,
  cursors: Awaited<ReturnType<typeof listCursors>>,
): Promise<boolean> {
  for (const { cursor } of cursors) {
    if (!cursor || !cursor.site) return false;
    const at = STORED_SITE_FILE.exec(cursor.site.file)?.[1];
    if (at === undefined) return false;
    if (at > file.night!) continue;
    if (at < file.night!) return false;
    // The cursor is in this very file: passed only when it stands at its end.
    const size = file.compressed ? await gzSize(file.path) : (await Deno.lstat(file.path)).size;
    if (size === undefined || cursor.site.offset < size) return false;
  }
  return true;
}

/**
 * One pass of the lifecycle over a site directory: removes left-over temporary files, settles
 * files found in both forms, compresses and deletes what is due (see the module doc).
 *
 * @param options The directory, the nights and what the service holds open.
 * @returns What was done.
 *
 * @example Usage
 * ```ts ignore
 * import { runLifecycle } from "./retention.ts";
 * await runLifecycle({ siteDir: "./telemetry", timeZone: "UTC", compressAfter: 2 });
 * ```
 */
export async function runLifecycle(options: LifecycleOptions): Promise<LifecycleReport> {
  const { siteDir, timeZone, signal } = options;
  const compressAfter = options.compressAfter ?? 2;
  const retain = options.retain ?? 0;
  const warn = options.warn ?? (() => {});
  const info = options.info ?? (() => {});
  const report: LifecycleReport = { compressed: [], deleted: [], heldByCursor: [] };
  const current = dayKey((options.now ?? Date.now)(), timeZone);
  const open = new Set(options.openNights?.() ?? []);
  const activeRun = options.activeRunDir?.();

  const forms = new Map<string, { plain?: StoredFile; gz?: StoredFile }>();
  for await (const entry of Deno.readDir(siteDir)) {
    const temp = TEMP_GZ.exec(entry.name);
    if (temp && entry.isFile) {
      // A pass killed while writing: the original is still there (it goes only after rename).
      await Deno.remove(join(siteDir, entry.name)).catch(() => {});
      continue;
    }
    const m = STORED_SITE_FILE.exec(entry.name);
    if (!m || !entry.isFile) continue; // a link is never compressed or deleted through
    const night = m[1]!;
    const slot = forms.get(night) ?? {};
    slot[m[2] ? "gz" : "plain"] = storedFile(join(siteDir, entry.name));
    forms.set(night, slot);
  }
  const cursors = retain > 0 ? await listCursors(siteDir) : [];
  for (const { name, problem } of cursors) {
    if (problem) {
      warn(
        `Retention deletes nothing while the forwarding cursor "${name}" cannot be read: ${problem}`,
      );
    }
  }
  /** Compresses a file, or settles it with the `.gz` an interrupted pass left beside it. */
  const compressOne = async (plain: StoredFile, gz: StoredFile | undefined) => {
    if (gz) return await settleBoth(plain, gz, report, warn, signal);
    const done = await compressFile(plain.path, { signal, duty: COMPRESS_DUTY });
    if (done) {
      report.compressed.push(done);
      info(`Compressed ${plain.path} to ${done} (--compress-after ${compressAfter}).`);
    }
  };
  for (const night of [...forms.keys()].sort()) {
    signal?.throwIfAborted();
    if (night >= current || open.has(night)) continue;
    const { plain, gz } = forms.get(night)!;
    try {
      if (retain > 0 && endedMoreThan(night, current, retain)) {
        const files = [gz, plain].filter((f): f is StoredFile => f !== undefined);
        let held = false;
        for (const file of files) {
          if (!(await passedByCursors(file, cursors))) held = true;
        }
        if (held) {
          // Kept for the forwarder, and still compressed below: it reads either form.
          report.heldByCursor.push(...files.map((f) => f.path));
        } else {
          for (const file of files) {
            await Deno.remove(file.path);
            report.deleted.push(file.path);
            info(
              `Deleted ${file.path}: its night ended more than ${retain} nights ago (--retain).`,
            );
          }
          await syncDirectory(siteDir);
          continue;
        }
      }
      if (compressAfter > 0 && endedMoreThan(night, current, compressAfter) && plain) {
        await compressOne(plain, gz);
      }
    } catch (err) {
      if (signal?.aborted) throw err;
      warn(`Cannot settle the files of night ${night} in ${siteDir}: ${errorText(err)}`);
    }
  }
  if (compressAfter > 0) {
    for (const [runDir, night] of await stoppedRuns(siteDir, timeZone)) {
      signal?.throwIfAborted();
      if (runDir === activeRun || !endedMoreThan(night, current, compressAfter)) continue;
      const plain = storedFile(join(runDir, RUN_FILE));
      const gz = storedFile(join(runDir, RUN_FILE + GZ_SUFFIX));
      try {
        // Only regular files: a link planted in a run directory is not followed.
        if (!(await Deno.lstat(plain.path).then((i) => i.isFile, () => false))) continue;
        for await (const entry of Deno.readDir(runDir)) {
          if (!TEMP_GZ.test(entry.name) || !entry.isFile) continue;
          await Deno.remove(join(runDir, entry.name)).catch(() => {});
        }
        const hasGz = await Deno.lstat(gz.path).then((i) => i.isFile, () => false);
        await compressOne(plain, hasGz ? gz : undefined);
      } catch (err) {
        if (signal?.aborted) throw err;
        warn(`Cannot compress the file of the run in ${runDir}: ${errorText(err)}`);
      }
    }
  }
  return report;
}

/**
 * Runs lifecycle passes in the background for a service, one at a time: at start-up and after
 * each rotation ({@linkcode Lifecycle.schedule}); a request during a pass runs one more pass
 * after it. A pass's failure is warned, never thrown.
 *
 * @example Usage
 * ```ts ignore
 * import { Lifecycle } from "./retention.ts";
 * const lifecycle = new Lifecycle({ siteDir: "./telemetry", timeZone: "UTC", compressAfter: 2 });
 * lifecycle.schedule();
 * await lifecycle.close();
 * ```
 */
export class Lifecycle {
  #options: LifecycleOptions;
  #abort = new AbortController();
  #running: Promise<void> | undefined;
  #again = false;

  /**
   * Creates the scheduler; nothing runs before {@linkcode Lifecycle.schedule}.
   *
   * @param options As for {@linkcode runLifecycle} (its `signal` is the scheduler's own).
   */
  constructor(options: LifecycleOptions) {
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
          await runLifecycle({ ...this.#options, signal: this.#abort.signal });
        } catch (err) {
          if (this.#abort.signal.aborted) return;
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
