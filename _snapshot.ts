/**
 * The latest event of each type, kept as the stored lines themselves, and the rules that rebuild
 * it on start-up from the snapshot saved at the last clean shutdown and the stream files.
 *
 * @module
 */

import { isJsonObject, type JsonObject } from "./event.ts";

/** One type's latest event. */
interface Entry {
  /** The envelope line, exactly as stored and answered. */
  line: string;
  ts: string;
  data: JsonObject;
}

/** The snapshot as saved on a clean shutdown, with the seqs it reflects (CONTRACT 3). */
export interface SavedSnapshot {
  siteSeq: number;
  /** The run directory that was active when it was saved. */
  runDir: string | null;
  runSeq: number;
  /** The saved envelopes as lines. */
  current: string[];
}

/** How a line found on start-up enters the snapshot; see {@linkcode Snapshot.restore}. */
export interface RestoreOptions {
  /** The line comes from the saved snapshot. */
  saved?: boolean;
  /** The saved snapshot covers this stream up to `after`. */
  covered?: boolean;
  /** The stream's seq the saved snapshot reflects. */
  after?: number;
}

/**
 * The latest event per type. Answers `GET /current` by concatenating the stored lines, so an
 * answer is exactly the bytes on disk.
 */
export class Snapshot {
  #entries = new Map<string, Entry>();
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
   * The `GET /current` body: an object keyed by type, from the stored lines.
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

  /** Ends the start-up restore. */
  restored(): void {
    this.#savedTypes.clear();
  }

  /**
   * The record saved on a clean shutdown.
   *
   * @param siteSeq The site stream's seq.
   * @param runDir The active run's directory, or `null`.
   * @param runSeq The active run's seq, or 0.
   * @returns A JSON-serialisable value for {@linkcode parseSavedSnapshot}.
   */
  toSaved(siteSeq: number, runDir: string | null, runSeq: number): unknown {
    return {
      site_seq: siteSeq,
      run_dir: runDir,
      run_seq: runSeq,
      current: JSON.parse(this.json()),
    };
  }
}

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
