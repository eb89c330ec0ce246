/**
 * The journal of idempotency keys (docs/storage.md, "Idempotency keys"): one line per request
 * sent with an `Idempotency-Key` and answered, holding the key, the hash of its body, when it was
 * answered, where its stored events end and the lines it was answered with. The service writes a
 * group's key lines in the same group write as its events, before them (`SiteStore.append` rolls
 * every file of a failed group back), and a start drops every key line whose events did not reach
 * their file, so after any crash a key is kept exactly when its events are.
 *
 * The journal is kept in generations (`.idempotency-<n>.ndjson`): a new one begins when the
 * current one's first key is older than the keys are kept (24 hours) or it holds
 * {@linkcode KEY_JOURNAL_GENERATION_BYTES}, and only the current one and the one before it are
 * kept, so the files hold at most two generations. Needs `--allow-read` and `--allow-write` for
 * the site directory.
 *
 * @example Usage
 * ```ts ignore
 * import { KeyJournal } from "./key_journal.ts";
 * const { journal, records } = await KeyJournal.open("/srv/telemetry", {
 *   fsync: "interval", warn: console.warn, now: Date.now(), maxAgeMs: 86_400_000,
 *   lastSeq: async () => 0,
 * });
 * console.log(records.length, journal.generation);
 * ```
 *
 * @module
 */

import { join } from "node:path";
import { KEY_JOURNAL_FILE, keyJournalName, openPlainWriter } from "./layout.ts";
import { type DamagedFileError, readLines, storedFile } from "./site_files.ts";
import { errorText } from "../core/errors.ts";
import { removeIfExists, syncDirectory } from "./fs.ts";
import type { FsyncMode, NdjsonWriter } from "./writer.ts";
import type { BatchSummary } from "../wire/event.ts";

/**
 * Bytes after which a generation of the journal is closed and a new one begun: the journal's files
 * hold at most about twice this. Past it, keys are kept for less than 24 hours (docs/storage.md).
 */
export const KEY_JOURNAL_GENERATION_BYTES: number = 32 * 1024 * 1024;

/** Where a request's stored events end: the night of its site file, or its run directory. */
export type KeyStored =
  | { night: string; seq: number }
  | { run: string; seq: number };

/** What the journal keeps of one answered request. */
export interface KeyRecord {
  /** The `Idempotency-Key`. */
  key: string;
  /** The hash of the request (its route and body). */
  hash: string;
  /** When it was answered, epoch milliseconds (the service's clock). */
  at: number;
  /** Where its last stored event is, or `null` when none of its events is stored. */
  stored: KeyStored | null;
  /**
   * The lines it was answered with, in order; `null` when it was answered with its
   * {@linkcode KeyRecord.minimal} answer alone (`Prefer: return=minimal`, docs/http-api.md).
   */
  lines: readonly string[] | null;
  /** The minimal answer it was answered with, when `lines` is `null`. */
  minimal?: BatchSummary | undefined;
}

/** A key's first answer as the journal keeps it: its lines, or its minimal answer alone. */
export type KeptAnswer =
  | { lines: readonly string[]; minimal?: undefined }
  | { lines?: undefined; minimal: BatchSummary };

/** Where a key line is in the journal: its generation, offset and length in bytes. */
export interface KeyRef {
  /** The generation. */
  gen: number;
  /** Byte offset of the line in its file. */
  offset: number;
  /** Bytes of the line, without its `\n`. */
  length: number;
}

/** A key line found when the journal was opened. */
export interface LoadedKey {
  /** The `Idempotency-Key`. */
  key: string;
  /** The hash of its request. */
  hash: string;
  /** When it was answered. */
  at: number;
  /** Where its line is. */
  ref: KeyRef;
}

/** Options of {@linkcode KeyJournal.open}. */
export interface KeyJournalOptions {
  /** When to fdatasync its file. */
  fsync: FsyncMode;
  /** Told about key lines dropped or unreadable. */
  warn: (message: string) => void;
  /** Now, epoch milliseconds (the service's clock). */
  now: number;
  /** How long keys are kept, in milliseconds; older lines are not loaded. */
  maxAgeMs: number;
  /**
   * The seq of the last line on disk of a site night's file or of a run's file: a key line whose
   * stored events end above it answered events that never reached their file.
   */
  lastSeq: (stored: KeyStored) => Promise<number>;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: true });
/**
 * What every key line's head is followed by, before the lines it answered (`[`) or `null` when it
 * was answered with its minimal answer alone. A version before that answer looks for `,"lines":[`
 * and so skips a minimal key line: it does not know the key, and never replays a wrong answer.
 */
const LINES_FIELD = ',"lines":';

/**
 * A key line as written: its head (key, hash, time, where its events end, the minimal answer if
 * that was all it was answered with) and then the answered lines, last, so that a start reads the
 * head without parsing the lines.
 *
 * @param record What to keep.
 * @returns The line, without `\n`.
 *
 * @example Usage
 * ```ts
 * import { encodeKeyRecord } from "./key_journal.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(
 *   encodeKeyRecord({ key: "k1", hash: "h", at: 5, stored: null, lines: ["{}"] }),
 *   '{"key":"k1","hash":"h","at":5,"stored":null,"lines":["{}"]}',
 * );
 * assert.equal(
 *   encodeKeyRecord({
 *     key: "k2", hash: "h", at: 5, stored: null, lines: null,
 *     minimal: { accepted: 0, first_seq: null, last_seq: null },
 *   }),
 *   '{"key":"k2","hash":"h","at":5,"stored":null,"minimal":{"accepted":0,"first_seq":null,"last_seq":null},"lines":null}',
 * );
 * ```
 */
export function encodeKeyRecord(record: KeyRecord): string {
  const minimal = record.lines === null
    ? `,"minimal":${
      summaryJson(record.minimal ?? { accepted: 0, first_seq: null, last_seq: null })
    }`
    : "";
  return `{"key":${JSON.stringify(record.key)},"hash":${JSON.stringify(record.hash)},"at":${
    Number(record.at)
  },"stored":${JSON.stringify(record.stored)}${minimal}${LINES_FIELD}${
    record.lines === null ? "null" : JSON.stringify(record.lines)
  }}`;
}

/** A minimal answer as JSON, its fields in the documented order. */
function summaryJson(s: BatchSummary): string {
  return `{"accepted":${s.accepted},"first_seq":${s.first_seq},"last_seq":${s.last_seq}}`;
}

/** Whether a value read back is a minimal answer. */
function isSummary(value: unknown): value is BatchSummary {
  if (typeof value !== "object" || value === null) return false;
  const v = value as Record<string, unknown>;
  const seq = (x: unknown) => x === null || Number.isSafeInteger(x);
  return Number.isSafeInteger(v.accepted) && seq(v.first_seq) && seq(v.last_seq);
}

/** The head of a key line, or `undefined` when the line is not one. */
function parseHead(text: string): Omit<KeyRecord, "lines" | "minimal"> | undefined {
  // A `"` inside a JSON string is always escaped, so the first `,"lines":[` is the field.
  const end = text.indexOf(LINES_FIELD);
  if (end < 0) return undefined;
  try {
    const head = JSON.parse(text.slice(0, end) + "}");
    if (
      typeof head?.key !== "string" || typeof head.hash !== "string" ||
      !Number.isFinite(head.at) || !validStored(head.stored)
    ) return undefined;
    return head;
  } catch {
    return undefined;
  }
}

function validStored(stored: unknown): stored is KeyStored | null {
  if (stored === null) return true;
  if (typeof stored !== "object" || stored === undefined) return false;
  const s = stored as Record<string, unknown>;
  return Number.isSafeInteger(s.seq) &&
    (typeof s.night === "string" || typeof s.run === "string");
}

/**
 * The generations of the journal in a site directory and the writer of the newest.
 *
 * @example Usage
 * ```ts ignore
 * import { KeyJournal } from "./key_journal.ts";
 * const { journal } = await KeyJournal.open(siteDir, options);
 * const writer = await journal.writer();
 * ```
 */
export class KeyJournal {
  #siteDir: string;
  #fsync: FsyncMode;
  #warn: (message: string) => void;
  /** The generation written to now. */
  #gen: number;
  /** The generation before it, if its file is kept. */
  #previous: number | undefined;
  /** The writer of the current generation, opened at its first key line. */
  #writer: NdjsonWriter | undefined;
  /** When the current generation's first key was answered. */
  #firstAt: number | undefined;
  /** Bytes in the current generation's file. */
  #size = 0;

  private constructor(
    siteDir: string,
    options: KeyJournalOptions,
    gen: number,
    previous: number | undefined,
  ) {
    this.#siteDir = siteDir;
    this.#fsync = options.fsync;
    this.#warn = options.warn;
    this.#gen = gen;
    this.#previous = previous;
  }

  /**
   * Opens the journal of a site directory: reads the key lines of the last `maxAgeMs` from its
   * two newest generations (older generations are deleted), and drops, by truncating its file
   * there, every key line whose stored events end above the last line of their file: the
   * service stopped between the two writes of its group, so the events were never answered.
   *
   * @param siteDir The site directory (its real path), held by the caller.
   * @param options The fsync mode, the clock, the age of keys and how to find a file's last seq.
   * @returns The journal, and the keys found, oldest first.
   * @throws {Deno.errors.NotCapable} If read or write permission for the directory is missing.
   */
  static async open(
    siteDir: string,
    options: KeyJournalOptions,
  ): Promise<{ journal: KeyJournal; records: LoadedKey[] }> {
    const gens: number[] = [];
    for await (const entry of Deno.readDir(siteDir)) {
      const m = entry.isFile ? KEY_JOURNAL_FILE.exec(entry.name) : null;
      if (m) gens.push(Number(m[1]));
    }
    gens.sort((a, b) => a - b);
    for (const gen of gens.slice(0, -2)) await removeIfExists(join(siteDir, keyJournalName(gen)));
    const kept = gens.slice(-2);
    const current = kept.at(-1) ?? 1;
    const journal = new KeyJournal(
      siteDir,
      options,
      current,
      kept.length > 1 ? kept[0] : undefined,
    );
    const records: LoadedKey[] = [];
    for (const gen of kept) {
      const found = await journal.#load(gen, options);
      records.push(...found.records);
      if (gen === current) {
        journal.#firstAt = found.firstAt;
        journal.#size = found.size;
      }
    }
    return { journal, records };
  }

  /** Reads one generation; see {@linkcode KeyJournal.open}. */
  async #load(
    gen: number,
    options: KeyJournalOptions,
  ): Promise<{ records: LoadedKey[]; firstAt: number | undefined; size: number }> {
    const path = this.#path(gen);
    const records: LoadedKey[] = [];
    let firstAt: number | undefined;
    let size = 0;
    let cut: { offset: number; dropped: number } | undefined;
    const seqs = new Map<string, number>();
    const lastSeq = async (stored: KeyStored) => {
      const where = "night" in stored ? `night:${stored.night}` : `run:${stored.run}`;
      let seq = seqs.get(where);
      if (seq === undefined) seqs.set(where, seq = await options.lastSeq(stored));
      return seq;
    };
    const onDamage = (damage: DamagedFileError) =>
      options.warn(`${damage.message}; the keys in it are not kept (docs/storage.md).`);
    try {
      for await (const batch of readLines(storedFile(path), { onDamage })) {
        for (const line of batch) {
          if (cut) {
            cut.dropped++;
            continue;
          }
          const text = line.text;
          const length = encoder.encode(text).length;
          const start = line.end - length - 1;
          size = line.end;
          const head = parseHead(text);
          if (head === undefined) continue;
          firstAt ??= head.at;
          // Past its 24 hours a key is never loaded, so its events need no looking up.
          if (head.at <= options.now - options.maxAgeMs) continue;
          if (head.stored !== null && await lastSeq(head.stored) < head.stored.seq) {
            cut = { offset: start, dropped: 1 };
            continue;
          }
          records.push({
            key: head.key,
            hash: head.hash,
            at: head.at,
            ref: { gen, offset: start, length },
          });
        }
      }
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) return { records, firstAt, size };
      throw err;
    }
    if (cut) {
      // Before anything new is written: a seq of those events may be handed out again, and the
      // key line must not then seem to name the new line.
      const file = await Deno.open(path, { write: true });
      try {
        await file.truncate(cut.offset);
        await file.syncData();
      } finally {
        file.close();
      }
      size = cut.offset;
      options.warn(
        `Dropped ${cut.dropped} idempotency key line(s) from ${path}: the service stopped before the events they answered reached their file, so those requests were never answered and a retry stores them (docs/storage.md).`,
      );
    }
    return { records, firstAt, size };
  }

  #path(gen: number): string {
    return join(this.#siteDir, keyJournalName(gen));
  }

  /** The generation written to now. */
  get generation(): number {
    return this.#gen;
  }

  /** The writers open now (for the periodic sync and the check that files are in place). */
  get writers(): NdjsonWriter[] {
    return this.#writer ? [this.#writer] : [];
  }

  /**
   * Begins a new generation when the current one's first key is `maxAgeMs` old or its file holds
   * {@linkcode KEY_JOURNAL_GENERATION_BYTES}; the generation before the current one is deleted.
   *
   * @param now Now, epoch milliseconds.
   * @param maxAgeMs How long keys are kept.
   * @returns The generation deleted (every key in it and before it is gone), or `undefined`.
   */
  async rotateIfDue(now: number, maxAgeMs: number): Promise<number | undefined> {
    const size = this.#writer?.size ?? this.#size;
    const old = this.#firstAt !== undefined && now - this.#firstAt >= maxAgeMs;
    if (!old && size < KEY_JOURNAL_GENERATION_BYTES) return undefined;
    const writer = this.#writer;
    this.#writer = undefined;
    await writer?.close().catch((e) =>
      this.#warn(`Cannot close ${writer.path} after its generation ended: ${errorText(e)}`)
    );
    const dropped = this.#previous;
    this.#previous = this.#gen;
    this.#gen++;
    this.#firstAt = undefined;
    this.#size = 0;
    if (dropped !== undefined) {
      await removeIfExists(this.#path(dropped)).catch((e) =>
        this.#warn(`Cannot delete ${this.#path(dropped)}: ${errorText(e)}`)
      );
    }
    return dropped;
  }

  /**
   * The writer of the current generation, opening (creating) its file at its first key line.
   *
   * @returns The writer.
   * @throws {WriteError} If the file cannot be opened.
   */
  async writer(): Promise<NdjsonWriter> {
    if (this.#writer) return this.#writer;
    const path = this.#path(this.#gen);
    this.#writer = await openPlainWriter(path, this.#fsync, this.#warn);
    // A new file's name must survive a power cut as its lines do.
    if (this.#writer.size === 0 && this.#fsync !== "never") await syncDirectory(this.#siteDir);
    return this.#writer;
  }

  /**
   * Where the key lines just appended through {@linkcode KeyJournal.writer} are: the last bytes of
   * the file, in order.
   *
   * @param sizes The key lines' sizes in bytes, as appended (each followed by `\n`).
   * @param at When the first of them was answered.
   * @returns Their places, in order.
   */
  placed(sizes: readonly number[], at: number): KeyRef[] {
    let offset = (this.#writer?.size ?? 0) - sizes.reduce((sum, n) => sum + n + 1, 0);
    this.#firstAt ??= at;
    return sizes.map((length) => {
      const ref = { gen: this.#gen, offset, length };
      offset += length + 1;
      return ref;
    });
  }

  /**
   * Reads back the answer of a key.
   *
   * @param ref Where its line is.
   * @param key The key, checked against the line found there.
   * @returns The lines it was answered with, or the minimal answer when that was all it was
   *   answered with; `undefined` when the line is gone (its file deleted or cut since).
   */
  async read(ref: KeyRef, key: string): Promise<KeptAnswer | undefined> {
    let file: Deno.FsFile;
    try {
      file = await Deno.open(this.#path(ref.gen), { read: true });
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) return undefined;
      throw err;
    }
    const bytes = new Uint8Array(ref.length);
    try {
      await file.seek(ref.offset, Deno.SeekMode.Start);
      let filled = 0;
      while (filled < bytes.length) {
        const n = await file.read(bytes.subarray(filled));
        if (n === null) return undefined;
        filled += n;
      }
    } finally {
      file.close();
    }
    try {
      const record = JSON.parse(decoder.decode(bytes));
      if (record?.key !== key) return undefined;
      if (record.lines === null) {
        return isSummary(record.minimal) ? { minimal: record.minimal } : undefined;
      }
      if (!Array.isArray(record.lines)) return undefined;
      return record.lines.every((l: unknown) => typeof l === "string")
        ? { lines: record.lines }
        : undefined;
    } catch {
      return undefined;
    }
  }

  /** Closes the current generation's file (fdatasyncing it unless `fsync` is `never`). */
  async close(): Promise<void> {
    const writer = this.#writer;
    this.#writer = undefined;
    await writer?.close();
  }
}
