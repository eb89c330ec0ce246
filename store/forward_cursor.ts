/**
 * The forwarding cursor (docs/fleet.md): how far a forwarder named `<name>` has sent each stream,
 * kept in `<site_dir>/.forward/<name>.json` and written by temporary file, fsync and rename. Per
 * stream (the site stream, and each run by id) it holds the stored file (its plain name: offsets
 * count uncompressed bytes, so compressing the file does not move the cursor), the byte offset
 * just after the last line sent, and that line's seq. Retention (`store/retention.ts`) reads every
 * cursor and never deletes a file one of them has not passed.
 *
 * ```json
 * {"version":1,"site":{"file":"site_20260510.ndjson","offset":5120,"seq":41},
 *  "runs":{"night-1":{"run_dir":"/srv/telemetry/night-1","file":"telemetry.ndjson","offset":880,"seq":7}}}
 * ```
 *
 * @example Usage
 * ```ts ignore
 * import { readCursor, writeCursor } from "./forward_cursor.ts";
 * const cursor = await readCursor("./telemetry", "fleet") ?? emptyCursor();
 * cursor.site = { file: "site_20260510.ndjson", offset: 5120, seq: 41 };
 * await writeCursor("./telemetry", "fleet", cursor);
 * ```
 *
 * @module
 */

import { join } from "node:path";
import { readJsonFile, writeJsonAtomic } from "./fs.ts";
import { isJsonObject } from "../wire/event.ts";
import { FORWARD_DIR } from "./layout.ts";
import { plainName } from "./site_files.ts";

/** Where a forwarder stands in one stream. */
export interface StreamPosition {
  /** The plain name of the stored file it reads, for example `site_20260510.ndjson`. */
  file: string;
  /** The offset just after the last line sent, in the file's uncompressed bytes. */
  offset: number;
  /** The seq of that line (0 when `offset` is 0). */
  seq: number;
}

/** Where a forwarder stands in one run's stream. */
export interface RunPosition extends StreamPosition {
  /** The run's directory, as the run log records it. */
  run_dir: string;
}

/** A stored file the forwarder passed over because it cannot be read to its end. */
export interface DamagedFile {
  /** `site` or `run`. */
  stream: "site" | "run";
  /** The run's id, `""` for the site stream. */
  run_id: string;
  /** The file's name, for example `site_20260510.ndjson.gz`. */
  file: string;
  /** How far it was read and sent, in uncompressed bytes. */
  offset: number;
  /** Why it could not be read further. */
  reason: string;
  /** Its size on disk then: a file replaced since (mended) is read again. */
  bytes?: number;
}

/** A forwarder's cursor: the site stream and each run by id. */
export interface ForwardCursor {
  /** The format's version. */
  version: 1;
  /** The site stream's latest position sent (`seq`: the highest seq sent), or `null`. */
  site: StreamPosition | null;
  /**
   * The offset sent through in every site file read so far, by plain name (a night written
   * again after its `.gz` was made keeps the `.gz` under its own name). A clock stepped back
   * writes new lines into an earlier night (docs/fleet.md): a file is passed only when its
   * entry reaches its end. Absent in cursors written before 0.6: then every file before
   * `site.file` counts as passed.
   */
  site_files?: Record<string, number>;
  /** Files passed over because they are damaged (docs/fleet.md). */
  damaged?: DamagedFile[];
  /** Each run by `run_id`. */
  runs: Record<string, RunPosition>;
}

/** Names of forwarders: they name a file, so no path separators and no leading dot. */
export const CURSOR_NAME: RegExp = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;

/**
 * A cursor that has sent nothing yet.
 *
 * @returns A new cursor.
 *
 * @example Usage
 * ```ts
 * import { emptyCursor } from "./forward_cursor.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(emptyCursor(), { version: 1, site: null, runs: {} });
 * ```
 */
export function emptyCursor(): ForwardCursor {
  return { version: 1, site: null, runs: {} };
}

/**
 * The path of a forwarder's cursor.
 *
 * @param siteDir The site directory.
 * @param name The forwarder's name (`--name`).
 * @returns `<siteDir>/.forward/<name>.json`.
 * @throws {RangeError} If the name could lead elsewhere or is not a plain word.
 *
 * @example Usage
 * ```ts
 * import { cursorPath } from "./forward_cursor.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(cursorPath("/srv/t", "fleet"), "/srv/t/.forward/fleet.json");
 * assert.throws(() => cursorPath("/srv/t", "../x"), RangeError);
 * ```
 */
export function cursorPath(siteDir: string, name: string): string {
  if (!CURSOR_NAME.test(name)) {
    throw new RangeError(
      `Cannot use forwarder name "${name}": use letters, digits, "-" and "_" (at most 64), for example "fleet"`,
    );
  }
  return join(siteDir, FORWARD_DIR, `${name}.json`);
}

/**
 * The path of the advisory lock a forwarder named `name` holds while it runs, so that two
 * forwarders with one name never race on one cursor.
 *
 * @param siteDir The site directory.
 * @param name The forwarder's name (`--name`).
 * @returns `<siteDir>/.forward/<name>.lock`.
 * @throws {RangeError} If the name could lead elsewhere or is not a plain word.
 *
 * @example Usage
 * ```ts
 * import { cursorLockPath } from "./forward_cursor.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(cursorLockPath("/srv/t", "fleet"), "/srv/t/.forward/fleet.lock");
 * ```
 */
export function cursorLockPath(siteDir: string, name: string): string {
  return cursorPath(siteDir, name).replace(/\.json$/, ".lock");
}

function position(value: unknown): StreamPosition | undefined {
  if (!isJsonObject(value)) return undefined;
  const { file, offset, seq } = value;
  if (
    typeof file !== "string" || file !== plainName(file) || file.includes("/") ||
    !Number.isSafeInteger(offset) || (offset as number) < 0 ||
    !Number.isSafeInteger(seq) || (seq as number) < 0
  ) return undefined;
  return { file, offset: offset as number, seq: seq as number };
}

/**
 * Checks a parsed forwarding cursor file (`<site_dir>/.forward/<name>.json`).
 *
 * @param value The parsed JSON.
 * @returns The cursor.
 * @throws {SyntaxError} If it is not a cursor of this version; the message names the field.
 *
 * @example A cursor file of another version is refused
 * ```ts
 * import { parseForwardCursor } from "./forward_cursor.ts";
 * import assert from "node:assert/strict";
 *
 * const site = { file: "site_20260510.ndjson", offset: 10, seq: 1 };
 * assert.deepEqual(parseForwardCursor({ version: 1, site, runs: {} }).site, site);
 * assert.throws(() => parseForwardCursor({ version: 2 }), SyntaxError);
 * ```
 */
export function parseForwardCursor(value: unknown): ForwardCursor {
  if (!isJsonObject(value) || value.version !== 1) {
    throw new SyntaxError("not a forwarding cursor of version 1");
  }
  const site = value.site === null ? null : position(value.site);
  if (site === undefined) throw new SyntaxError('its "site" is not {file, offset, seq} or null');
  if (!isJsonObject(value.runs)) throw new SyntaxError('its "runs" is not an object');
  const runs: Record<string, RunPosition> = {};
  for (const [runId, entry] of Object.entries(value.runs)) {
    const at = position(entry);
    const runDir = isJsonObject(entry) ? entry.run_dir : undefined;
    if (at === undefined || typeof runDir !== "string") {
      throw new SyntaxError(`its run "${runId}" is not {run_dir, file, offset, seq}`);
    }
    runs[runId] = { run_dir: runDir, ...at };
  }
  const out: ForwardCursor = { version: 1, site, runs };
  if (value.site_files !== undefined) {
    const files = value.site_files;
    if (
      !isJsonObject(files) ||
      Object.entries(files).some(([name, offset]) =>
        name.includes("/") || !Number.isSafeInteger(offset) || (offset as number) < 0
      )
    ) throw new SyntaxError('its "site_files" is not an object of file names and offsets');
    out.site_files = { ...files } as Record<string, number>;
  }
  if (value.damaged !== undefined) {
    if (!Array.isArray(value.damaged) || !value.damaged.every(isDamaged)) {
      throw new SyntaxError(
        'its "damaged" is not a list of {stream, run_id, file, offset, reason}',
      );
    }
    out.damaged = value.damaged as DamagedFile[];
  }
  return out;
}

function isDamaged(value: unknown): boolean {
  if (!isJsonObject(value)) return false;
  const { stream, run_id, file, offset, reason } = value;
  return (stream === "site" || stream === "run") && typeof run_id === "string" &&
    typeof file === "string" && Number.isSafeInteger(offset) && typeof reason === "string" &&
    (value.bytes === undefined || Number.isSafeInteger(value.bytes));
}

/**
 * Whether a forwarder's cursor has sent every byte of a site file: retention
 * (`store/retention.ts`) deletes no file a cursor has not passed (docs/fleet.md). With
 * `site_files`, only a file whose entry reaches its end is passed, whatever night the cursor
 * reads now: a clock stepped back writes into earlier nights. An older cursor without it passes
 * the files of nights before its file, and its own file once it stands at its end.
 *
 * @param cursor The cursor.
 * @param name The file's name (plain or `.gz`).
 * @param size The file's size in uncompressed bytes, or `undefined` when it cannot be known (a
 *   damaged `.gz`: never passed).
 * @returns Whether the file may be deleted as far as this cursor is concerned.
 *
 * @example Usage
 * ```ts
 * import { sitePassed } from "./forward_cursor.ts";
 * import assert from "node:assert/strict";
 *
 * const cursor = {
 *   version: 1 as const,
 *   site: { file: "site_20260512.ndjson", offset: 10, seq: 9 },
 *   site_files: { "site_20260510.ndjson": 500, "site_20260512.ndjson": 10 },
 *   runs: {},
 * };
 * assert.equal(sitePassed(cursor, "site_20260510.ndjson.gz", 500), true);
 * assert.equal(sitePassed(cursor, "site_20260510.ndjson", 620), false); // grew after a clock step
 * assert.equal(sitePassed(cursor, "site_20260511.ndjson", 80), false); // never read
 * ```
 */
export function sitePassed(
  cursor: ForwardCursor,
  name: string,
  size: number | undefined,
): boolean {
  if (size === undefined || cursor.site === null) return false;
  if (cursor.site_files !== undefined) {
    const files = cursor.site_files;
    const sent = Object.hasOwn(files, name) ? files[name]! : files[plainName(name)];
    return sent !== undefined && sent >= size;
  }
  const plain = plainName(name);
  if (plain < cursor.site.file) return true;
  return plain === cursor.site.file && cursor.site.offset >= size;
}

/**
 * Reads a forwarder's cursor.
 *
 * @param siteDir The site directory.
 * @param name The forwarder's name.
 * @returns The cursor, or `undefined` when the forwarder has none yet.
 * @throws {SyntaxError} If the file is not a cursor (the message names the file).
 *
 * @example Usage
 * ```ts ignore
 * import { readCursor } from "./forward_cursor.ts";
 * const cursor = await readCursor("./telemetry", "fleet");
 * ```
 */
export async function readCursor(
  siteDir: string,
  name: string,
): Promise<ForwardCursor | undefined> {
  const path = cursorPath(siteDir, name);
  try {
    const value = await readJsonFile(path);
    return value === undefined ? undefined : parseForwardCursor(value);
  } catch (err) {
    if (err instanceof SyntaxError) {
      throw new SyntaxError(`Cannot read the forwarding cursor ${path}: ${err.message}`);
    }
    throw err;
  }
}

/**
 * Writes a forwarder's cursor atomically (temporary file, fdatasync, rename, directory fsync):
 * a crash leaves the previous cursor or this one.
 *
 * @param siteDir The site directory.
 * @param name The forwarder's name.
 * @param cursor The cursor.
 *
 * @example Usage
 * ```ts ignore
 * import { emptyCursor, writeCursor } from "./forward_cursor.ts";
 * await writeCursor("./telemetry", "fleet", emptyCursor());
 * ```
 */
export async function writeCursor(
  siteDir: string,
  name: string,
  cursor: ForwardCursor,
): Promise<void> {
  const path = cursorPath(siteDir, name);
  await Deno.mkdir(join(siteDir, FORWARD_DIR), { recursive: true });
  await writeJsonAtomic(path, cursor);
}

/** Every cursor of a site directory, or why one cannot be read. */
export interface CursorEntry {
  /** The forwarder's name. */
  name: string;
  /** The cursor, when it could be read. */
  cursor?: ForwardCursor;
  /** Why it could not be read. */
  problem?: string;
}

/**
 * Reads every forwarder's cursor in `<siteDir>/.forward/` (regular `*.json` files only; the
 * temporary files of a write in progress are not cursors).
 *
 * @param siteDir The site directory.
 * @returns One entry per cursor file, by name.
 *
 * @example Usage
 * ```ts ignore
 * import { listCursors } from "./forward_cursor.ts";
 * for (const { name, cursor } of await listCursors("./telemetry")) console.log(name, cursor?.site);
 * ```
 */
export async function listCursors(siteDir: string): Promise<CursorEntry[]> {
  const out: CursorEntry[] = [];
  try {
    for await (const entry of Deno.readDir(join(siteDir, FORWARD_DIR))) {
      const name = /^(.*)\.json$/.exec(entry.name)?.[1];
      if (name === undefined || !CURSOR_NAME.test(name)) continue;
      if (!entry.isFile) {
        out.push({ name, problem: `${entry.name} is not a regular file` });
        continue;
      }
      try {
        const cursor = await readCursor(siteDir, name);
        if (cursor) out.push({ name, cursor });
      } catch (err) {
        if (!(err instanceof SyntaxError)) throw err;
        out.push({ name, problem: err.message });
      }
    }
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return [];
    throw err;
  }
  return out.sort((a, b) => (a.name < b.name ? -1 : 1));
}
