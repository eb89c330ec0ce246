/**
 * The layout of a site directory (docs/storage.md): the names of the service's files (this module
 * is the one place that spells them), the names reserved so that no run directory takes one,
 * where a requested run directory may lie (confinement and the file system's limits), and the
 * safety of the paths the service writes: whatever squats on one of its names is moved aside at
 * start-up, and a stream file is opened only while it is a regular file. `SiteStore`
 * (`site_store.ts`) holds the directory and builds on these rules; they use `Deno.*` file APIs.
 *
 * @module
 */

import { isAbsolute, join, relative, resolve, sep } from "node:path";
import {
  assertStillPlainFile,
  ensurePlainFile,
  exists,
  isStrictlyInside,
  realPathOfNearest,
  refuseNonFile,
} from "./fs.ts";
import { InvalidRequestError, RunDirNotAllowedError } from "../core/errors.ts";
import { type FsyncMode, NdjsonWriter, TORN_SUFFIX, tornMessage } from "./writer.ts";

const encoder = new TextEncoder();

// --- the names of the service's files (docs/storage.md) -------------------------------------------

/**
 * A run id: one safe path segment, since a run's directory is named after it by default
 * (docs/http-api.md, `POST /run/start`).
 */
export const RUN_ID_PATTERN: RegExp = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/** The name of the site-stream file for a day key. */
export function siteFileName(key: string): string {
  return `site_${key}.ndjson`;
}

/** Names of site-stream files. */
export const SITE_FILE: RegExp = /^site_(\d{8})\.ndjson$/;
/**
 * Names of site-stream files in either stored form: plain (`site_YYYYMMDD.ndjson`) or compressed
 * after their night (`site_YYYYMMDD.ndjson.gz`, docs/history.md). Group 1 is the night key, group 2
 * `.gz` or nothing.
 */
export const STORED_SITE_FILE: RegExp = /^site_(\d{8})\.ndjson(\.gz)?$/;

/** What a compressed stream file's name adds to the plain one (docs/history.md). */
export const GZ_SUFFIX = ".gz";

/** The run log (docs/cli.md): one run record per line. */
export const RUN_LOG_FILE = "runs.ndjson";

/** The directory of forwarding cursors (docs/fleet.md). */
export const FORWARD_DIR = ".forward";

/** The lock file that keeps a second server off a site directory (docs/storage.md). */
export const LOCK_FILE = ".lock";

/** The run stream's file inside a run directory. */
export const RUN_FILE = "telemetry.ndjson";
/** A run's latest record inside its run directory (docs/cli.md). */
export const RUN_RECORD_FILE = "run.json";
/** The active run, while one is active; a run resumes from it after a restart. */
export const ACTIVE_RUN_FILE = ".active-run.json";
/** The snapshot as it was at the last clean shutdown, with the seqs it reflects. */
export const SNAPSHOT_FILE = ".snapshot.json";

/**
 * The file beside a stream's NDJSON files that records the highest seq it has handed out, for
 * seqs that never reached a file (events posted with `store_permanently: false`).
 */
export const SEQ_MARK_FILE = ".seq-mark.json";

/** The site's identity: its id, the zone it records in and when it was made (docs/storage.md). */
export const SITE_IDENTITY_FILE = ".site.json";

/** The safety latch of each critical type, kept across restarts (docs/safety.md). */
export const SAFETY_LATCH_FILE = ".safety.json";

/**
 * The safety hub's external events and waivers, kept across restarts
 * (docs/safety.md#safety-events).
 */
export const SAFETY_HUB_FILE = ".safety-hub.json";

/**
 * The name of one generation of the idempotency keys' journal (docs/storage.md, "Idempotency
 * keys"): the first answer of each request sent with an `Idempotency-Key`.
 *
 * @param gen The generation, from 1.
 * @returns For example `.idempotency-1.ndjson`.
 *
 * @example Usage
 * ```ts
 * import { keyJournalName } from "./layout.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(keyJournalName(3), ".idempotency-3.ndjson");
 * ```
 */
export function keyJournalName(gen: number): string {
  return `.idempotency-${gen}.ndjson`;
}

/** Names of the generations of the idempotency keys' journal; group 1 is the generation. */
export const KEY_JOURNAL_FILE: RegExp = /^\.idempotency-(\d{1,15})\.ndjson$/;

// --- reserved names and run directories ------------------------------------------------------

/**
 * The names the service keeps for its own files, now and in the features docs/cli.md, docs/types.md, docs/history.md and docs/fleet.md
 * plan, and what each is, for the advice of a refused run directory. A name is reserved when it
 * starts with one of these, so the files derived from it are reserved too: `<file>.torn`
 * (docs/storage.md), `<file>.gz` (docs/history.md), the `.tmp-<uuid>` files of atomic writes. The check
 * ignores case, because on a case-insensitive file system (macOS, Windows) `RUNS.ndjson` is
 * `runs.ndjson`. Not covered, as the service runs on Linux: Windows device names (`NUL`, `CON`),
 * trailing dots and spaces that Windows drops, 8.3 short names, and names that only Unicode
 * normalisation (HFS+) makes equal.
 */
const RESERVED_NAMES: readonly { pattern: RegExp; what: string }[] = [
  {
    // One dot, not two: `..2026` cannot be mistaken for a record, and docs/http-api.md allows it.
    pattern: /^\.(?!\.)/,
    what:
      `names starting with one "." hold the service's records (${LOCK_FILE}, ${ACTIVE_RUN_FILE}, ${SNAPSHOT_FILE}, ${SEQ_MARK_FILE}, ${SITE_IDENTITY_FILE}, ${SAFETY_LATCH_FILE}, ${SAFETY_HUB_FILE}, ${
        keyJournalName(1)
      }, ${FORWARD_DIR}/, temporary files)`,
  },
  { pattern: /^site_\d{8}\.ndjson/i, what: "site_YYYYMMDD.ndjson names the site stream's files" },
  ...([
    [RUN_LOG_FILE, "the run log"],
    [RUN_FILE, "a run's stream file"],
    [RUN_RECORD_FILE, "a run's record"],
  ] as const).map(([name, what]) => ({
    pattern: new RegExp(`^${RegExp.escape(name)}`, "i"),
    what: `${name} is ${what}`,
  })),
];

/** What a stream file's name may gain: its torn tail's file, its compressed form. */
const STREAM_SUFFIXES = `(?:${RegExp.escape(TORN_SUFFIX)}|${RegExp.escape(GZ_SUFFIX)})?`;

/**
 * The exact names of the files the service opens at the top of a site directory. At start-up
 * anything else found at one of them (a directory made by a run started there with 0.3, a
 * symbolic link) is moved aside, so it neither stops the start nor leads a write elsewhere.
 */
const SERVICE_FILE = new RegExp(
  `^(?:${
    [
      ACTIVE_RUN_FILE,
      SNAPSHOT_FILE,
      SEQ_MARK_FILE,
      SITE_IDENTITY_FILE,
      SAFETY_LATCH_FILE,
      SAFETY_HUB_FILE,
    ].map((
      name,
    ) => RegExp.escape(name))
      .join("|")
  }` +
    `|${RegExp.escape(RUN_LOG_FILE)}${STREAM_SUFFIXES}|site_\\d{8}\\.ndjson${STREAM_SUFFIXES}` +
    `|\\.idempotency-\\d{1,15}\\.ndjson${STREAM_SUFFIXES})$`,
  "i",
);

/** Linux's limits: `NAME_MAX` bytes for one name, `PATH_MAX` (with its NUL) for a path. */
const NAME_MAX = 255;
const PATH_MAX = 4096;

/**
 * Why a name cannot be a directory of a run, or `undefined` when it can: every name the service
 * gives its own files, in the site directory and in run directories (docs/storage.md, docs/cli.md, docs/types.md, docs/history.md and docs/fleet.md).
 * This is the one rule; run placement asks it of every segment of a run directory's path.
 *
 * @param name One path segment.
 * @returns What the name is kept for, or `undefined`.
 *
 * @example Usage
 * ```ts
 * import { reservedName } from "./layout.ts";
 * import assert from "node:assert/strict";
 *
 * assert.match(reservedName("runs.ndjson") ?? "", /run log/);
 * assert.equal(reservedName("night-1"), undefined);
 * ```
 */
export function reservedName(name: string): string | undefined {
  return RESERVED_NAMES.find(({ pattern }) => pattern.test(name))?.what;
}

/** The length of a name or path in UTF-8 bytes, the unit of the file system's limits. */
function byteLength(text: string): number {
  return encoder.encode(text).length;
}

/** A requested name for an error message: JSON-quoted, cut after `max` characters. */
function quoted(text: string, max = 60): string {
  return JSON.stringify(text.length > max ? `${text.slice(0, max)}...` : text);
}

/** The message of a refused run directory: which field, the value, and what to choose instead. */
function runDirProblem(field: RunDirField, requested: string, problem: string): string {
  const example = field === "run_id" ? `"night-1"` : `"nights/night-1"`;
  return `${field} ${
    quoted(requested)
  } cannot be used: ${problem}; choose another ${field}, for example ${example}.`;
}

/** Which request field named a run directory, for the advice in errors. */
export type RunDirField = "run_id" | "run_dir";

/**
 * Resolves a requested run directory and confines it to the site directory or an allowed run
 * root, following symlinks of the part that exists (docs/http-api.md). No segment of its path below
 * that root may be a name the service keeps for its own files ({@linkcode reservedName}), and
 * the path must fit the file system's limits.
 *
 * @param siteDir The site directory (its real path).
 * @param runRoots Real paths of the directories outside it where runs may be placed.
 * @param requested Relative (to the site directory) or absolute.
 * @param field The request field it came from, named in errors.
 * @returns The absolute path.
 * @throws {RunDirNotAllowedError} If it lies outside every allowed root.
 * @throws {InvalidRequestError} If it names a reserved file, is too long, is the site
 *   directory itself, or a file or a loop of links is in its way.
 */
export async function confineRunDir(
  siteDir: string,
  runRoots: readonly string[],
  requested: string,
  field: RunDirField,
): Promise<string> {
  const target = isAbsolute(requested) ? resolve(requested) : resolve(siteDir, requested);
  const refuse = (problem: string) =>
    new InvalidRequestError(runDirProblem(field, requested, problem));
  if (byteLength(target) >= PATH_MAX) {
    throw refuse(
      `as the absolute path ${quoted(target)} it is ${
        byteLength(target)
      } bytes long, and the system allows fewer than ${PATH_MAX}`,
    );
  }
  const long = target.split(sep).find((segment) => byteLength(segment) > NAME_MAX);
  if (long !== undefined) {
    throw refuse(
      `its segment ${quoted(long)} is ${
        byteLength(long)
      } bytes long, and a file name may have at most ${NAME_MAX}`,
    );
  }
  if (target === siteDir) {
    throw refuse("it is the site directory itself, and a run needs a directory of its own");
  }
  let real: string;
  try {
    real = await realPathOfNearest(target);
  } catch (err) {
    // The path as a whole is the caller's: a file in the way, a loop of links, a name too long.
    if (err instanceof Deno.errors.NotADirectory) throw refuse("a file is in the way");
    const code = (err as { code?: unknown }).code;
    if (code === "ELOOP") throw refuse("it leads through a loop of symbolic links");
    if (code === "ENAMETOOLONG") throw refuse("it is longer than the file system allows");
    throw err;
  }
  for (const root of [siteDir, ...runRoots]) {
    if (!isStrictlyInside(real, root) || !isStrictlyInside(target, root)) continue;
    // Both the path as written and where its links lead: `latest -> .forward` is refused too.
    for (
      const segment of [...relative(root, target).split(sep), ...relative(root, real).split(sep)]
    ) {
      const reserved = reservedName(segment);
      if (reserved !== undefined) {
        throw refuse(
          `${quoted(segment)} is a name the service keeps for its own files (${reserved})`,
        );
      }
    }
    return target;
  }
  throw new RunDirNotAllowedError(requested, target, siteDir, runRoots);
}

/**
 * The next derived run id: the largest all-digit directory name plus one, at least 3 digits,
 * stepping past files and links with that name, so the derived directory never lands on one.
 *
 * @param siteDir The site directory.
 * @returns For example `"001"`, `"008"` or `"1000"`.
 */
export async function nextNumericRun(siteDir: string): Promise<string> {
  let max = 0;
  const taken = new Set<string>();
  for await (const entry of Deno.readDir(siteDir)) {
    if (!/^\d+$/.test(entry.name)) continue;
    if (entry.isDirectory) max = Math.max(max, Number(entry.name));
    else taken.add(entry.name);
  }
  let next = max + 1;
  // A file or link with the next number would refuse a start the client cannot fix.
  while (taken.has(String(next).padStart(3, "0"))) next++;
  return String(next).padStart(3, "0");
}

// --- the safety of the paths the service writes -----------------------------------------------

/**
 * Moves aside whatever is at one of the service's file names in the site directory and is not a
 * regular file: a directory (a run started there by 0.3, which did not reserve the names) would
 * make every later write of that file fail, and a symbolic link would lead writes outside. Moving
 * keeps everything in it; only the name changes.
 *
 * @param siteDir The site directory, before any of its files is opened.
 * @param warn Told what was moved where.
 */
export async function moveAsideSquatters(
  siteDir: string,
  warn: (message: string) => void,
): Promise<void> {
  const found: Deno.DirEntry[] = [];
  for await (const entry of Deno.readDir(siteDir)) {
    if (!entry.isFile && SERVICE_FILE.test(entry.name)) found.push(entry);
  }
  for (const entry of found) {
    const path = join(siteDir, entry.name);
    const what = entry.isSymlink
      ? `a symbolic link (to ${await Deno.readLink(path).catch(() => "?")})`
      : entry.isDirectory
      ? "a directory"
      : "neither a file nor a directory";
    let aside: string;
    for (let n = 0;; n++) {
      // Not a reserved name, so a run directory moved here can be started again by run_dir.
      aside = join(
        siteDir,
        `moved-aside-${Date.now()}${n ? `-${n}` : ""}-${entry.name.replace(/^\./, "")}`,
      );
      // rename() replaces an empty directory at the target: never let it.
      if (!(await exists(aside))) break;
    }
    await Deno.rename(path, aside);
    warn(
      `${path} was ${what} where the service keeps its ${entry.name} file; moved it to ${aside} unchanged.`,
    );
  }
}

/**
 * Opens a stream file's writer only when the file and its `.torn` file are regular files (or
 * missing), and checks afterwards that no link was swapped in while it opened.
 *
 * @param path The stream file (created if missing).
 * @param fsync When the writer fdatasyncs.
 * @param warn Told about a torn tail moved aside on opening.
 * @returns The open writer.
 * @throws {UnsafeFileError} If the file or its `.torn` file is not a regular file, or a link was
 *   swapped in while it opened.
 */
export async function openPlainWriter(
  path: string,
  fsync: FsyncMode,
  warn: (message: string) => void,
): Promise<NdjsonWriter> {
  await refuseNonFile(`${path}${TORN_SUFFIX}`);
  const before = await ensurePlainFile(path);
  const writer = await NdjsonWriter.open(path, fsync, (bytes) => warn(tornMessage(path, bytes)));
  try {
    await assertStillPlainFile(path, before);
  } catch (err) {
    await writer.close().catch(() => {});
    throw err;
  }
  return writer;
}
