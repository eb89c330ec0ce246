/**
 * Compressing one stream file into `<name>.gz` (docs/history.md), for the retention passes
 * (`retention.ts`) that decide which files are due.
 *
 * Crash-safe at every point: the `.gz` is written under a temporary name beginning with a dot,
 * fsynced, renamed into place (the directory fsynced), and only then is the original removed.
 * A kill at any moment leaves the original, or the complete `.gz` (with or without the
 * original beside it), never neither and never a half `.gz`; the next pass finishes the job and
 * removes a left-over temporary file ({@linkcode isCompressionTemp}). Readers (`site_files.ts`)
 * read either form.
 *
 * Gzip's CPU time runs in a worker ({@linkcode GzipWorker}), 64 KiB at a time, while the file
 * work stays here, so the service keeps answering while a large night is compressed.
 *
 * @example Usage
 * ```ts ignore
 * import { compressFile } from "./compress.ts";
 * const gz = await compressFile("./telemetry/site_20260501.ndjson", { duty: 0.5 });
 * console.log(gz ?? "the file changed while it was read; left as it is");
 * ```
 *
 * @module
 */

import { basename, dirname, join } from "node:path";
import { syncDirectory } from "./fs.ts";
import { GZ_SUFFIX, STORED_SITE_FILE } from "./layout.ts";
import { removeNightIndex } from "./night_index.ts";
import { writeFull } from "./writer.ts";

/** Bytes read and compressed per step. */
const CHUNK = 64 * 1024;
/** Temporary files of compressions: `.<name>.gz.tmp-<uuid>`. */
const TEMP_GZ = /^\.(.+\.ndjson\.gz)\.tmp-[0-9a-f-]{36}$/;

/**
 * Whether a name is that of a compression's temporary file, which a pass killed while writing
 * leaves behind (the original is still there: it goes only after the rename).
 *
 * @param name A file name.
 * @returns `true` for `.<name>.ndjson.gz.tmp-<uuid>`.
 *
 * @example Usage
 * ```ts
 * import { isCompressionTemp } from "./compress.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(isCompressionTemp(".site_20260501.ndjson.gz.tmp-" + crypto.randomUUID()), true);
 * assert.equal(isCompressionTemp("site_20260501.ndjson.gz"), false);
 * ```
 */
export function isCompressionTemp(name: string): boolean {
  return TEMP_GZ.test(name);
}

/**
 * The uncompressed size of a `.gz`, read whole.
 *
 * @param path The compressed file.
 * @returns Bytes, or `undefined` when it is damaged.
 *
 * @example Usage
 * ```ts ignore
 * import { gzSize } from "./compress.ts";
 * console.log(await gzSize("./telemetry/site_20260501.ndjson.gz"));
 * ```
 */
export async function gzSize(path: string): Promise<number | undefined> {
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
 *
 * @example Usage
 * ```ts ignore
 * import { GzipWorker } from "./compress.ts";
 * const pieces: Uint8Array[] = [];
 * const gzip = new GzipWorker((piece) => Promise.resolve(void pieces.push(piece)));
 * await gzip.write(new TextEncoder().encode("{\"seq\":1}\n"));
 * await gzip.close();
 * ```
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
 * import { compressFile } from "./compress.ts";
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
  // A night's time index covers the plain file only (store/night_index.ts).
  const night = STORED_SITE_FILE.exec(basename(path))?.[1];
  if (night !== undefined) await removeNightIndex(dir, night).catch(() => {});
  return gz;
}
