/**
 * Resuming on start-up (docs/storage.md): the site stream's counters, the active run, and the
 * snapshot, rebuilt from a checkpoint and the lines written after its cursors (the normal way),
 * or, without a usable checkpoint, from the files as 0.3 did.
 *
 * @module
 */

import {
  type Checkpoint,
  parseSavedRecord,
  type SavedSnapshot,
  type Snapshot,
} from "./snapshot.ts";
import type { ActiveRun, RunResume, Runs } from "./runs.ts";
import { SNAPSHOT_FILE, STORED_SITE_FILE } from "../store/layout.ts";
import type { SiteStore } from "../store/site_store.ts";
import type { SiteResume } from "../store/site_resume.ts";
import type { StreamTail } from "../store/stored_read.ts";
import { plainName } from "../store/site_files.ts";
import type { LatchCover } from "./safety.ts";

/** What a restore reads from and writes to. */
export interface RestoreSources {
  /** The site directory. */
  store: SiteStore;
  /** The snapshot being rebuilt. */
  snapshot: Snapshot;
  /** Where the site stream stands. */
  site: SiteResume;
  /** What resuming the active run found, if a run was active. */
  runResume: RunResume | undefined;
}

/** Where the site stream stands after a resume. */
export interface SiteCounters {
  /** The last seq handed out. */
  seq: number;
  /** The persisted high-water mark (0: none). */
  mark: number;
  /** The highest seq on disk. */
  lastWritten: number;
  /** The night whose site file holds the last line (the checkpoint's site cursor). */
  night: string | undefined;
}

/** What {@linkcode resumeFromDisk} found. */
export interface Resumed {
  /** The site stream's counters. */
  site: SiteCounters;
  /**
   * How many lines were read after the checkpoint the snapshot was restored from, or `undefined`
   * when it was rebuilt without one.
   */
  readAfterCheckpoint: number | undefined;
  /** Every site file, by ascending last seq (where the safety latch's replay reads). */
  siteFiles: SiteResume["files"];
  /**
   * Where the checkpoint the snapshot was restored from stands in the site stream and the run it
   * names (what a safety latch file written before 0.7 covers, docs/safety.md); undefined
   * without one.
   */
  checkpointCover: LatchCover | undefined;
}

/**
 * Resumes seq counters, the snapshot and the active run from the site directory.
 *
 * Seq continues above the last line of EVERY file of a stream (read from its end), its seq
 * mark and the counter the checkpoint saved, whatever the clock did to modification times. The
 * snapshot comes from the checkpoint plus the lines written after its cursors; without a usable
 * checkpoint it is rebuilt as in 0.3 (docs/storage.md).
 *
 * @param store The site directory.
 * @param runs The runs, which resume the active one.
 * @param snapshot The empty snapshot to fill.
 * @param warn Told why a saved snapshot or checkpoint was not used.
 * @returns The site counters, and how the snapshot was restored.
 */
export async function resumeFromDisk(
  store: SiteStore,
  runs: Runs,
  snapshot: Snapshot,
  warn: (message: string) => void,
): Promise<Resumed> {
  const site = await store.resumeSite();
  const record = parseSavedRecord(await store.savedSnapshot.read());
  if (record.kind === "invalid") {
    warn(
      `The saved snapshot ${SNAPSHOT_FILE} cannot be used: ${record.reason}; rebuilding from the files alone.`,
    );
  }
  const checkpoint = record.kind === "checkpoint" ? record.checkpoint : undefined;
  const saved = checkpoint ?? (record.kind === "legacy" ? record.saved : undefined);
  const counters: SiteCounters = {
    seq: Math.max(site.lastSeq, site.mark, saved?.siteSeq ?? 0),
    mark: site.mark,
    lastWritten: site.lastSeq,
    night: nightOfFile(site.files.at(-1)),
  };
  const runResume = await runs.resume(
    saved !== undefined && saved.runDir !== null
      ? { runDir: saved.runDir, runSeq: saved.runSeq, cursor: checkpoint?.run ?? undefined }
      : undefined,
  );
  const sources = { store, snapshot, site, runResume };
  const run = runs.active;
  const checkpointCover: LatchCover | undefined = checkpoint && {
    site_seq: checkpoint.site?.seq ?? 0,
    run: checkpoint.runDir !== null && checkpoint.run
      ? { dir: checkpoint.runDir, seq: checkpoint.run.seq }
      : null,
    runs_log: null,
  };
  const found = { site: counters, siteFiles: site.files };
  if (checkpoint) {
    const restored = !runResume?.mismatch &&
      await restoreFromCheckpoint(sources, run, checkpoint);
    if (restored) return { ...found, readAfterCheckpoint: restored.read, checkpointCover };
    warn(
      `The checkpoint in ${SNAPSHOT_FILE} no longer matches the stream files (truncated or replaced); rebuilding the snapshot from the files.`,
    );
    snapshot.clear();
  }
  await rebuildSnapshot(sources, run, saved);
  // A checkpoint that no longer matches the files says nothing about where they stand.
  return { ...found, readAfterCheckpoint: undefined, checkpointCover: undefined };
}

/**
 * Lays the lines written after a checkpoint over its snapshot, in the order they were
 * acknowledged: a run that was active at the checkpoint (and may have stopped since), then the
 * site stream in seq order, then the active run, whose copy of a site-wide event wins
 * (docs/storage.md). Runs start and stop only after a checkpoint, so no other order can occur.
 *
 * @param sources Where the lines come from and the snapshot they go to.
 * @param run The run active now (resumed), if any.
 * @param checkpoint The checkpoint read at start-up.
 * @returns How many lines were read after it, or `undefined` when a cursor no longer matches its
 *   file (the caller then rebuilds).
 */
export async function restoreFromCheckpoint(
  sources: RestoreSources,
  run: ActiveRun | undefined,
  checkpoint: Checkpoint,
): Promise<{ read: number } | undefined> {
  const { store, snapshot, site, runResume } = sources;
  const cursor = checkpoint.site;
  const afterSeq = cursor?.seq ?? 0;
  const siteLatest = new Map<string, { seq: number; line: string }>();
  let cursorFound = cursor === null;
  let read = 0;
  for (const file of site.files) {
    // A cursor names the plain file; its offset holds in the .gz compression made of it.
    const atCursor = cursor !== null && plainName(file.name) === cursor.file;
    cursorFound ||= atCursor;
    if (!atCursor && file.lastSeq <= afterSeq) continue;
    const tail = await store.readSiteAfter(file.name, atCursor ? cursor : { afterSeq });
    if (!tail) return undefined;
    read += tail.count;
    for (const [type, entry] of tail.latest) {
      if (isMigrated(entry.line)) continue;
      if ((siteLatest.get(type)?.seq ?? 0) < entry.seq) siteLatest.set(type, entry);
    }
  }
  if (!cursorFound) return undefined;
  let stopped: StreamTail | undefined;
  if (checkpoint.runDir !== null && checkpoint.run && checkpoint.runDir !== run?.record.run_dir) {
    // Stopped after the checkpoint, but its stop could not save one.
    stopped = await store.readRunAfter(checkpoint.runDir, checkpoint.run);
    if (!stopped) return undefined;
  }
  let active = runResume?.after;
  if (run && !active) {
    // Started after the checkpoint, but its start could not save one: this start's lines.
    active = await store.readRunAfter(run.record.run_dir, { afterSeq: run.seqAtStart });
  }
  for (const line of checkpoint.current) snapshot.apply(line);
  for (const entry of stopped?.latest.values() ?? []) snapshot.apply(entry.line);
  for (const { line } of [...siteLatest.values()].sort((a, b) => a.seq - b.seq)) {
    // A run's copy of a site-wide event was applied from its run file already.
    if (stopped && runIdOf(line) !== undefined) continue;
    snapshot.apply(line);
  }
  for (const entry of active?.latest.values() ?? []) snapshot.apply(entry.line);
  snapshot.restored();
  return { read: read + (stopped?.count ?? 0) + (active?.count ?? 0) };
}

/**
 * The 0.3 rebuild, without a usable checkpoint: a 0.3 saved snapshot, then the newest site
 * file (by seq) and the active run's file; lines above the seqs the saved snapshot reflects
 * replace its entries, otherwise the later `ts` wins.
 *
 * @param sources Where the lines come from and the snapshot they go to.
 * @param run The run active now (resumed), if any.
 * @param saved A 0.3 saved snapshot, if there was one.
 */
export async function rebuildSnapshot(
  sources: RestoreSources,
  run: ActiveRun | undefined,
  saved: SavedSnapshot | undefined,
): Promise<void> {
  const { store, snapshot, site, runResume } = sources;
  for (const line of saved?.current ?? []) snapshot.restore(line, { saved: true });
  for (const line of await newestServiceLines(store, site.files)) {
    snapshot.restore(line, { after: saved?.siteSeq ?? 0, covered: saved !== undefined });
  }
  if (run && runResume) {
    const scan = runResume.scan ?? await store.scanRun(run.record.run_dir);
    // Seq counts per run directory, so the saved snapshot covers this run file only if it was
    // saved while this same directory was the active run.
    const covered = saved !== undefined && saved.runDir === run.record.run_dir;
    for (const line of scan.latest.values()) {
      snapshot.restore(line, { after: covered ? saved.runSeq : 0, covered });
    }
  }
  snapshot.restored();
}

/**
 * The latest line per type of the newest site file (by seq) the service wrote: nights migrated
 * into the site are numbered after its stream (docs/migration.md), so the newest file by seq
 * may be a migrated night; those are passed over. Bounded by the number of files.
 */
async function newestServiceLines(
  store: SiteStore,
  files: readonly { name: string; lastSeq: number }[],
): Promise<string[]> {
  for (let i = files.length - 1; i >= 0; i--) {
    const file = files[i]!;
    if (file.lastSeq === 0) break;
    const lines = [...(await store.scanSite(file.name)).latest.values()];
    const own = lines.filter((line) => !isMigrated(line));
    if (own.length > 0 || lines.length === 0) return own;
  }
  return [];
}

/**
 * Whether a stored line was written by the legacy migration (`meta.migrated_from`,
 * docs/migration.md): history, never acknowledged by the service, so it never becomes the
 * current value of its type at a restore, however high its seq.
 */
function isMigrated(line: string): boolean {
  // Cheap first: a line without the key is not migrated; only a candidate is parsed.
  if (!line.includes('"migrated_from":')) return false;
  try {
    return typeof JSON.parse(line)?.meta?.migrated_from === "string";
  } catch {
    return false;
  }
}

/** A stored line's `meta.run_id`, if any. */
function runIdOf(line: string): string | undefined {
  try {
    const runId = JSON.parse(line)?.meta?.run_id;
    return typeof runId === "string" ? runId : undefined;
  } catch {
    return undefined;
  }
}

/** The night of a site file, from its name. */
function nightOfFile(file: { name: string } | undefined): string | undefined {
  return file && STORED_SITE_FILE.exec(file.name)?.[1];
}
