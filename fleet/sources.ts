/**
 * The streams a forwarder reads (docs/fleet.md): the site stream and every run the site directory
 * records, each with its stored files, and where a cursor places the next line to send.
 *
 * @module
 */
import { isAbsolute, join, resolve } from "node:path";
import type { StreamKind } from "./item.ts";
import type { ForwardCursor, StreamPosition } from "../store/forward_cursor.ts";
import { readRunLog } from "../store/run_log.ts";
import { type ActiveRunRead, readActiveRun } from "../store/run_records.ts";
import type { RunRecord } from "../wire/event.ts";
import { listRunFiles, listSiteFiles, plainName, type StoredFile } from "../store/site_files.ts";

/** A stream to forward: the site stream, or one run. */
export interface ForwardSource {
  readonly stream: StreamKind;
  readonly runId: string;
  readonly runDir: string;
  /** A stopped run: once read to its end, it holds nothing more. */
  readonly stopped: boolean;
  /** Which start of the run this is (directory and start time): a run id may be started again. */
  readonly generation: string;
  files(): Promise<StoredFile[]>;
}

/** Where a run is stored, and whether it has stopped (its file grows no more). */
export interface RunDir {
  readonly dir: string;
  readonly stopped: boolean;
  /** When this start of the run began (`started_at`), when the service recorded it. */
  readonly startedAt?: string;
}

/**
 * The runs the site directory's records name, by id: the latest record of each run in the run
 * log, then the active run's record (`store/run_records.ts`), which wins over its log line.
 *
 * @param siteDir The site directory, against which relative run directories resolve.
 * @param logged The run log's runs (`store/run_log.ts`: the latest record of each).
 * @param active What `.active-run.json` holds.
 * @returns The runs by id; run directories are absolute.
 *
 * @example The active run wins over its log line
 * ```ts
 * import { recordedRuns } from "./sources.ts";
 * import assert from "node:assert/strict";
 *
 * const started_at = "2026-11-21T23:00:00.000Z";
 * const logged = [{ run_id: "m31", run_dir: "m31", started_at, stopped_at: started_at,
 *   events: 1, meta: {} }];
 * const active = { state: "found" as const,
 *   record: { run_id: "m31", run_dir: "/t/m31", started_at, meta: {} } };
 * assert.deepEqual(recordedRuns("/t", logged, active).get("m31"),
 *   { dir: "/t/m31", stopped: false, startedAt: started_at });
 * assert.equal(recordedRuns("/t", logged, { state: "none" }).get("m31")?.stopped, true);
 * ```
 */
export function recordedRuns(
  siteDir: string,
  logged: Iterable<RunRecord>,
  active: ActiveRunRead,
): Map<string, RunDir> {
  const runs = new Map<string, RunDir>();
  const absolute = (dir: string) => isAbsolute(dir) ? dir : resolve(siteDir, dir);
  for (const record of logged) {
    runs.set(record.run_id, {
      dir: absolute(record.run_dir),
      stopped: record.stopped_at !== null,
      startedAt: record.started_at,
    });
  }
  if (active.state === "found") {
    const { run_id, run_dir, started_at } = active.record;
    runs.set(run_id, { dir: absolute(run_dir), stopped: false, startedAt: started_at });
  }
  return runs;
}

/**
 * Every run recorded in the site directory, by id: the run log (`store/run_log.ts`: the latest
 * line per run wins, a damaged line is skipped), the active run, and directories of the site
 * directory holding a run stream file (runs recorded before the log existed).
 *
 * @param siteDir The site directory.
 * @returns The runs by id.
 *
 * @example Listing the runs to forward
 * ```ts ignore
 * for (const [runId, { dir, stopped }] of await listRunDirs("./telemetry")) {
 *   console.log(runId, dir, stopped ? "stopped" : "active");
 * }
 * ```
 */
export async function listRunDirs(siteDir: string): Promise<Map<string, RunDir>> {
  const runs = recordedRuns(
    siteDir,
    (await readRunLog(siteDir)).runs,
    await readActiveRun(siteDir),
  );
  // A directory that a recorded run is stored in is that run, whatever its name (a run id may
  // be started again in a directory named otherwise): never the same lines under a second id.
  const known = new Set([...runs.values()].map((r) => r.dir));
  for await (const entry of Deno.readDir(siteDir)) {
    // Links are not followed out of the site directory; dot-directories are the service's own.
    if (!entry.isDirectory || entry.name.startsWith(".") || runs.has(entry.name)) continue;
    if (known.has(resolve(siteDir, entry.name))) continue;
    if ((await listRunFiles(join(siteDir, entry.name))).length > 0) {
      runs.set(entry.name, { dir: join(siteDir, entry.name), stopped: false });
    }
  }
  return runs;
}

/**
 * The site stream, then every run by id.
 *
 * @example
 * ```ts ignore
 * for (const source of await listSources("./telemetry")) console.log(source.stream, source.runId);
 * ```
 */
export async function listSources(siteDir: string): Promise<ForwardSource[]> {
  const out: ForwardSource[] = [{
    stream: "site",
    runId: "",
    runDir: siteDir,
    stopped: false,
    generation: "",
    files: () => listSiteFiles(siteDir),
  }];
  return [...out, ...runSources(await listRunDirs(siteDir))];
}

/**
 * The sources of the runs of a site directory, by run id.
 *
 * @param runs The runs, as {@linkcode listRunDirs} finds them.
 * @returns One run source each, sorted by run id.
 *
 * @example
 * ```ts ignore
 * const sources = runSources(await listRunDirs("./telemetry"));
 * ```
 */
export function runSources(runs: ReadonlyMap<string, RunDir>): ForwardSource[] {
  return [...runs.entries()].sort(([a], [b]) => a.localeCompare(b)).map((
    [runId, { dir, stopped, startedAt }],
  ) => ({
    stream: "run",
    runId,
    runDir: dir,
    stopped,
    // A run id started again in another directory, or anew, is another generation.
    generation: `${dir}\n${startedAt ?? ""}`,
    files: () => listRunFiles(dir),
  }));
}

/**
 * Where the cursor holds `source`, or `null` when nothing of it was sent yet.
 *
 * @example
 * ```ts
 * import { positionOf } from "./sources.ts";
 * import { emptyCursor } from "../store/forward_cursor.ts";
 * import assert from "node:assert/strict";
 *
 * const run = { stream: "run" as const, runId: "constructor", runDir: "r", stopped: false, generation: "" };
 * assert.equal(positionOf(emptyCursor(), { ...run, files: () => Promise.resolve([]) }), null);
 * ```
 */
export function positionOf(cursor: ForwardCursor, source: ForwardSource): StreamPosition | null {
  if (source.stream === "site") return cursor.site;
  // Own properties only: a run named "constructor" or "toString" is no Object.prototype member.
  return Object.hasOwn(cursor.runs, source.runId) ? cursor.runs[source.runId]! : null;
}

/**
 * Moves the cursor of `source` to `at` (a run's entry also records its directory).
 *
 * @example
 * ```ts
 * import { setPosition } from "./sources.ts";
 * import { emptyCursor } from "../store/forward_cursor.ts";
 * import assert from "node:assert/strict";
 *
 * const cursor = emptyCursor();
 * const site = { stream: "site" as const, runId: "", runDir: "t", stopped: false, generation: "" };
 * setPosition(cursor, { ...site, files: () => Promise.resolve([]) }, { file: "f", offset: 1, seq: 1 });
 * assert.deepEqual(cursor.site, { file: "f", offset: 1, seq: 1 });
 * ```
 */
export function setPosition(
  cursor: ForwardCursor,
  source: ForwardSource,
  at: StreamPosition,
): void {
  if (source.stream === "site") cursor.site = at;
  else cursor.runs[source.runId] = { run_dir: source.runDir, ...at };
}

/**
 * The files still to read and where to start in the first: after the cursor's file and offset.
 * A cursor whose file is gone (deleted by hand) restarts at the first later night; the
 * idempotency key makes a resend harmless.
 *
 * @example
 * ```ts ignore
 * const { files, offset } = remaining(await source.files(), positionOf(cursor, source));
 * ```
 */
export function remaining(
  files: StoredFile[],
  at: StreamPosition | null,
): { files: StoredFile[]; offset: number } {
  if (at === null) return { files, offset: 0 };
  const i = files.findIndex((f) => plainName(f.name) === at.file);
  if (i >= 0) return { files: files.slice(i), offset: at.offset };
  const later = files.filter((f) => plainName(f.name) > at.file);
  return { files: later, offset: 0 };
}
