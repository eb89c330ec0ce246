/**
 * The latest event of each type, kept as the stored lines themselves, its checkpoint (the saved
 * `.snapshot.json` record) and the rules that restore it on start-up.
 *
 * The checkpoint is written at clean shutdown, at every run start and stop, at site-file
 * rotation and periodically while events arrive. It holds the snapshot and, for the site stream
 * and the active run, the file, byte offset and seq it covers. A restart loads it and applies
 * only the lines after those offsets, so after any restart each type shows the event acknowledged
 * last (by order of acknowledgment, not by `ts`, which clients may send) among those that reached
 * a file. Events posted with `store_permanently: false` never reach a file: one posted after the
 * last checkpoint does not survive a kill -9, and its type shows the newest stored (or
 * checkpointed) event instead. One posted with `make_current: false` after the last checkpoint
 * enters the snapshot after a kill -9, since its line does not say it was not meant to be current.
 *
 * @module
 */

import { isJsonObject, type JsonObject } from "../wire/event.ts";

/** One type's latest event. */
interface Entry {
  /** The envelope line, exactly as stored and answered. */
  line: string;
  ts: string;
  data: JsonObject;
  /** `"<type>":<line>`: this type's member of the `GET /current` object, made when first needed. */
  fragment?: string;
  /** The fragment's size in UTF-8 bytes, measured when the snapshot's size is next needed. */
  size?: number;
  /** `"<type>":`, the same string for every event of the type, and its size in UTF-8 bytes. */
  key?: string;
  keySize?: number;
  /** Until it is measured: the most it can take in the body (see `Entries.bytesAtMost`). */
  bound?: number;
}

/** The snapshot as saved on a clean shutdown, with the seqs it reflects (docs/storage.md). */
export interface SavedSnapshot {
  siteSeq: number;
  /** The run directory that was active when it was saved. */
  runDir: string | null;
  runSeq: number;
  /** The saved envelopes as lines. */
  current: string[];
}

/** The `format` of a checkpoint record; a 0.3 record has none. */
export const CHECKPOINT_FORMAT = "obs-telemetry-checkpoint/1";

/** Where a checkpoint stands in a stream: see {@linkcode Checkpoint}. */
export interface CheckpointCursor {
  /** Bytes of the file covered: the offset just after the last covered line. */
  offset: number;
  /** The seq of the line that ends at `offset` (0 when `offset` is 0). */
  seq: number;
}

/** A checkpoint: the saved snapshot plus where it stands in the site stream and the active run. */
export interface Checkpoint extends SavedSnapshot {
  /** The site file holding the last stored site line it covers, or `null` (none stored yet). */
  site: (CheckpointCursor & { file: string }) | null;
  /** The active run's file (in `runDir`) up to where it is covered, with the run's event count. */
  run: (CheckpointCursor & { events: number }) | null;
}

/** What a `.snapshot.json` turned out to be, from {@linkcode parseSavedRecord}. */
export type SavedRecord =
  | { kind: "checkpoint"; checkpoint: Checkpoint }
  | { kind: "legacy"; saved: SavedSnapshot }
  | { kind: "invalid"; reason: string }
  | { kind: "none" };

/** How a line found on start-up enters the snapshot; see {@linkcode Snapshot.restore}. */
export interface RestoreOptions {
  /** The line comes from the saved snapshot. */
  saved?: boolean;
  /** The saved snapshot covers this stream up to `after`. */
  covered?: boolean;
  /** The stream's seq the saved snapshot reflects. */
  after?: number;
}

const encoder = new TextEncoder();

/**
 * Characters per chunk of a snapshot body (a larger fragment is a chunk of its own): small
 * enough that making one chunk never holds the loop long.
 */
const BODY_CHUNK_CHARS = 64 * 1024;

/**
 * The entries, keeping their total size current on every change, whichever code path makes it (a
 * commit, the start-up restore, a removal). An entry is measured when the size is next asked for,
 * not when it is set: of a batch of 1,000 events of one type only the last is ever measured.
 */
class Entries extends Map<string, Entry> {
  /** Size of the `GET /current` body in bytes, without the entries not measured yet. */
  #bytes = 2;
  /** Types whose entry was set since the size was last asked for. */
  #unmeasured = new Set<string>();
  /** The most the entries not measured yet can add: 3 bytes per UTF-16 unit of each. */
  #unmeasuredBound = 0;

  /** Size of the `GET /current` body in bytes. */
  get bytes(): number {
    if (this.#unmeasured.size > 0) {
      for (const type of this.#unmeasured) {
        const entry = this.get(type);
        if (entry === undefined || entry.size !== undefined) continue;
        entry.keySize ??= utf8Length(entry.key!);
        entry.size = entry.keySize + utf8Length(entry.line);
        this.#bytes += entry.size;
      }
      this.#unmeasured.clear();
      this.#unmeasuredBound = 0;
    }
    return this.#bytes;
  }

  /**
   * At least {@linkcode Entries.bytes}, without measuring: what is not measured yet counts 3
   * bytes per UTF-16 code unit, the most UTF-8 takes for one.
   */
  get bytesAtMost(): number {
    return this.#bytes + this.#unmeasuredBound;
  }

  override set(type: string, entry: Entry): this {
    const old = this.get(type);
    if (entry.key === undefined) {
      // The key text is the same for every event of the type: made and measured once.
      entry.key = old?.key ?? JSON.stringify(type) + ":";
      if (old?.keySize !== undefined) entry.keySize = old.keySize;
    }
    // A new type adds its comma; a replaced entry that was measured leaves its size.
    if (old === undefined) this.#bytes += 1;
    else if (old.size !== undefined) this.#bytes -= old.size;
    else this.#unmeasuredBound -= old.bound!;
    if (entry.size === undefined) {
      this.#unmeasured.add(type);
      // Kept on the entry: taking it back when the entry is replaced reads no cold string.
      entry.bound = 3 * (entry.key!.length + entry.line.length);
      this.#unmeasuredBound += entry.bound;
    } else this.#bytes += entry.size;
    return super.set(type, entry);
  }

  override delete(type: string): boolean {
    const old = this.get(type);
    if (old) {
      this.#bytes -= (old.size ?? 0) + 1;
      if (old.size === undefined) this.#unmeasuredBound -= old.bound!;
    }
    return super.delete(type);
  }

  override clear(): void {
    this.#bytes = 2;
    this.#unmeasured.clear();
    this.#unmeasuredBound = 0;
    super.clear();
  }
}

/** A pattern that matches at the first character of a fragment (its key's quote), only there. */
const FRAGMENT_START = /^"/;

/**
 * An entry's `"<type>":<line>` as one piece of text rather than a tree of pieces: a line is built
 * by concatenation (the envelope's parts), and every `GET /current` copies each fragment into its
 * chunks, which costs half as much again from a tree (10,000 types: 2.5 ms of CPU per body
 * against 1.4 ms). A regular expression runs on a flat string, so V8 flattens the tree in place;
 * unlike an unused read of a character, its test is not optimized away. Done when the fragment is
 * first needed, not when the entry is set: of a batch of events of one type only the last one's
 * is ever made (measuring an entry's size used to flatten its line as a side effect, and the
 * admission no longer measures every entry).
 */
function fragmentOf(entry: Entry): string {
  const fragment = entry.key! + entry.line;
  FRAGMENT_START.test(fragment);
  return fragment;
}

// deno-lint-ignore no-control-regex -- the class is every ASCII character, controls included
const NON_ASCII = /[^\x00-\x7f]/;

/** Options of {@linkcode Snapshot.body}. */
export interface SnapshotBodyOptions {
  /** Only these types; all when absent. */
  types?: ReadonlySet<string>;
  /** Text before the JSON object, such as an SSE message's `event: snapshot\ndata: `. */
  prefix?: string;
  /** Text after the JSON object, such as the `\n\n` that ends an SSE message. */
  suffix?: string;
}

/**
 * The UTF-8 length of a text without encoding it.
 *
 * @param text Any string.
 * @returns Its size in bytes as UTF-8 (a lone surrogate counts 3, as `TextEncoder` writes it).
 */
export function utf8Length(text: string): number {
  // Almost every line is ASCII: one native scan says so, about 3x faster than the loop below.
  if (!NON_ASCII.test(text)) return text.length;
  let n = text.length;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) continue;
    if (c < 0x800) n += 1;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        n += 2; // a pair: 2 code units, 4 bytes
        i++;
      } else n += 2;
    } else n += 2;
  }
  return n;
}

/**
 * A JSON object body streamed from ready-made `"<key>":<value>` fragments, in chunks of about
 * 64 KiB, each made when the consumer asks for it: a snapshot of any size is served without ever
 * being one string, and no chunk holds the event loop for long.
 *
 * @param fragments The members.
 * @param prefix Text before the opening brace.
 * @param suffix Text after the closing brace.
 * @returns The body.
 */
function objectStream(
  fragments: string[],
  prefix: string,
  suffix: string,
): ReadableStream<Uint8Array> {
  let i = 0;
  let done = false;
  return new ReadableStream<Uint8Array>({
    pull(controller) {
      if (done) return;
      let out = i === 0 ? prefix + "{" : "";
      // Whole fragments (and their commas) up to the chunk size, at least one.
      do {
        if (i === fragments.length) {
          out += "}" + suffix;
          done = true;
          break;
        }
        out += (i > 0 ? "," : "") + fragments[i++];
      } while (out.length < BODY_CHUNK_CHARS);
      controller.enqueue(encoder.encode(out));
      if (done) controller.close();
    },
  }, { highWaterMark: 0 });
}

/**
 * The latest event per type. Answers `GET /current` by concatenating the stored lines, so an
 * answer is exactly the bytes on disk.
 */
export class Snapshot {
  #entries = new Entries();
  /** Types whose entry came from the saved snapshot, while restoring. */
  #savedTypes = new Set<string>();

  /** Number of types held. */
  get size(): number {
    return this.#entries.size;
  }

  /**
   * Whether a type has an entry.
   *
   * @param type The event type.
   * @returns `true` when it has.
   */
  has(type: string): boolean {
    return this.#entries.has(type);
  }

  /**
   * The latest line of a type.
   *
   * @param type The event type.
   * @returns The line, or `undefined`.
   */
  line(type: string): string | undefined {
    return this.#entries.get(type)?.line;
  }

  /**
   * Makes an accepted event the latest of its type.
   *
   * @param type The event type.
   * @param line The envelope line.
   * @param ts Its normalised `ts`.
   * @param data Its parsed `data`.
   */
  set(type: string, line: string, ts: string, data: JsonObject): void {
    this.#entries.set(type, { line, ts, data });
  }

  /**
   * Removes a type (docs/http-api.md, `DELETE /current/{type}`).
   *
   * @param type The event type.
   * @returns A function that puts the entry back (when forgetting could not be made durable),
   *   or `undefined` when the type had no entry.
   */
  forget(type: string): (() => void) | undefined {
    const entry = this.#entries.get(type);
    if (!entry) return undefined;
    this.#entries.delete(type);
    return () => {
      if (!this.#entries.has(type)) this.#entries.set(type, entry);
    };
  }

  /** Size in bytes of the `GET /current` body (UTF-8, all types). */
  get bytes(): number {
    return this.#entries.bytes;
  }

  /**
   * At least {@linkcode Snapshot.bytes}, found without measuring the entries set since the size
   * was last asked for: an admission that fits even this bound needs no exact size.
   *
   * @returns Bytes.
   */
  get bytesAtMost(): number {
    return this.#entries.bytesAtMost;
  }

  /**
   * Size in bytes of one type's member of the `GET /current` body, with its comma.
   *
   * @param type The event type.
   * @returns The size, or 0 when the type has no entry.
   */
  bytesOf(type: string): number {
    const entry = this.#entries.get(type);
    if (entry === undefined) return 0;
    if (entry.size === undefined) void this.#entries.bytes; // measures it
    return entry.size! + 1;
  }

  /**
   * The `GET /current` body as a stream of chunks, as the snapshot is at the time of the call:
   * built from the stored lines, never as one string, so any size is served.
   *
   * @param options Optional type filter, and text around the object.
   * @returns The body.
   */
  body(options: SnapshotBodyOptions = {}): ReadableStream<Uint8Array> {
    const { types, prefix = "", suffix = "" } = options;
    const fragments: string[] = [];
    // In the snapshot's order, filtered or not, so that both bodies list types alike.
    for (const [type, entry] of this.#entries) {
      if (!types || types.has(type)) fragments.push(entry.fragment ??= fragmentOf(entry));
    }
    return objectStream(fragments, prefix, suffix);
  }

  /**
   * The `GET /current` body as one string: only for a snapshot within a string's size (the
   * service's snapshot budget keeps it there); answers stream {@linkcode Snapshot.body}.
   *
   * @returns A JSON object text.
   */
  json(): string {
    let out = "{";
    for (const [type, entry] of this.#entries) {
      if (out.length > 1) out += ",";
      out += JSON.stringify(type) + ":" + entry.line;
    }
    return out + "}";
  }

  /**
   * The latest `data` of each type.
   *
   * @returns Pairs of type and data (read-only).
   */
  *data(): Iterable<[string, JsonObject]> {
    for (const [type, entry] of this.#entries) yield [type, entry.data];
  }

  /**
   * Puts one stored line into the snapshot on start-up. For a stream the saved snapshot covers
   * (`covered`), only lines with a seq above what it reflects (`after`) count, and they replace
   * the saved entry; otherwise, and between the site and the run file, the later `ts` wins.
   * A line that does not parse was never acknowledged in this form and is skipped.
   *
   * @param line A stored envelope line.
   * @param options Where it comes from.
   */
  restore(line: string, options: RestoreOptions = {}): void {
    let env: unknown;
    try {
      env = JSON.parse(line);
    } catch {
      return;
    }
    if (!isJsonObject(env) || typeof env.type !== "string" || !isJsonObject(env.data)) return;
    if (options.covered && !(Number(env.seq) > (options.after ?? 0))) return;
    const existing = this.#entries.get(env.type);
    const ts = String(env.ts);
    if (options.saved) this.#savedTypes.add(env.type);
    else if (options.covered && this.#savedTypes.delete(env.type)) {
      // written after the saved snapshot: newer whatever its ts
    } else if (existing && existing.ts > ts) return;
    this.#entries.set(env.type, { line, ts, data: env.data });
  }

  /**
   * Puts a line written after the checkpoint into the snapshot: it was acknowledged after
   * everything the checkpoint holds, so it replaces the entry whatever its `ts`.
   *
   * @param line A stored envelope line.
   */
  apply(line: string): void {
    let env: unknown;
    try {
      env = JSON.parse(line);
    } catch {
      return;
    }
    if (!isJsonObject(env) || typeof env.type !== "string" || !isJsonObject(env.data)) return;
    this.#entries.set(env.type, { line, ts: String(env.ts), data: env.data });
  }

  /** Forgets every entry: a restore that must start over. */
  clear(): void {
    this.#entries.clear();
    this.#savedTypes.clear();
  }

  /** Ends the start-up restore. */
  restored(): void {
    this.#savedTypes.clear();
  }
}

/**
 * The checkpoint record as written to `.snapshot.json`: a 0.3 saved snapshot (so a 0.3 reader
 * still finds its fields) plus `format` and the cursors.
 *
 * @param checkpoint What it covers, with `current` as the `GET /current` body text.
 * @returns A JSON-serialisable value for {@linkcode parseSavedRecord}.
 */
export function checkpointRecord(
  checkpoint: Omit<Checkpoint, "current"> & { currentJson: string },
): unknown {
  return {
    format: CHECKPOINT_FORMAT,
    site_seq: checkpoint.siteSeq,
    run_dir: checkpoint.runDir,
    run_seq: checkpoint.runSeq,
    site: checkpoint.site,
    run: checkpoint.run,
    current: JSON.parse(checkpoint.currentJson),
  };
}

function isCount(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 0;
}

function parseCheckpointCursor(value: unknown): CheckpointCursor | null | undefined {
  if (value === null) return null;
  if (!isJsonObject(value) || !isCount(value.offset) || !isCount(value.seq)) return undefined;
  return { offset: value.offset, seq: value.seq };
}

/**
 * Tells a checkpoint from a 0.3 saved snapshot and from anything else.
 *
 * @param value The parsed `.snapshot.json`, or `undefined` when there was none.
 * @returns The record by kind; `invalid` says why it cannot be used.
 */
export function parseSavedRecord(value: unknown): SavedRecord {
  if (value === undefined) return { kind: "none" };
  if (!isJsonObject(value)) return { kind: "invalid", reason: "it is not a JSON object" };
  if (value.format === undefined) {
    const saved = parseSavedSnapshot(value);
    return saved
      ? { kind: "legacy", saved }
      : { kind: "invalid", reason: "it lacks site_seq, run_dir, run_seq or current" };
  }
  if (value.format !== CHECKPOINT_FORMAT) {
    return {
      kind: "invalid",
      reason: `its format ${JSON.stringify(value.format)} is not ${CHECKPOINT_FORMAT}`,
    };
  }
  const saved = parseSavedSnapshot(value);
  const site = parseCheckpointCursor(value.site);
  const run = parseCheckpointCursor(value.run);
  const siteFile = isJsonObject(value.site) ? value.site.file : undefined;
  const runEvents = isJsonObject(value.run) ? value.run.events : undefined;
  if (
    !saved || !isCount(saved.siteSeq) || !isCount(saved.runSeq) || site === undefined ||
    run === undefined ||
    (site !== null && (typeof siteFile !== "string" || !SITE_NAME.test(siteFile))) ||
    (run !== null && (!isCount(runEvents) || saved.runDir === null)) ||
    (run === null && saved.runDir !== null)
  ) {
    return { kind: "invalid", reason: "its fields do not have the checkpoint's shape" };
  }
  return {
    kind: "checkpoint",
    checkpoint: {
      ...saved,
      site: site && { ...site, file: siteFile as string },
      run: run && { ...run, events: runEvents as number },
    },
  };
}

/** A site file name (a checkpoint never names anything else in the site directory). */
const SITE_NAME = /^site_\d{8}\.ndjson$/;

/**
 * Reads a saved snapshot record.
 *
 * @param value The parsed file, or `undefined` when there was none.
 * @returns The saved snapshot, or `undefined` when absent or not of the saved shape.
 */
export function parseSavedSnapshot(value: unknown): SavedSnapshot | undefined {
  if (
    !isJsonObject(value) || typeof value.site_seq !== "number" || !isJsonObject(value.current) ||
    typeof value.run_seq !== "number" ||
    !(value.run_dir === null || typeof value.run_dir === "string")
  ) return undefined;
  return {
    siteSeq: value.site_seq,
    runDir: value.run_dir,
    runSeq: value.run_seq,
    // JSON.parse keeps key order, so re-serialising gives back the canonical line.
    current: Object.values(value.current).map((envelope) => JSON.stringify(envelope)),
  };
}
