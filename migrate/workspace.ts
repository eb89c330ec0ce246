/**
 * What a migration holds in its destination (docs/migration.md): the directory itself, created
 * when missing; its site lock (`.lock`, docs/storage.md), so a migration cannot run into a
 * directory a live telemetry server uses; and the temporary directory the output is built in.
 *
 * @module
 */

import { join } from "node:path";
import { SiteInUseError } from "../core/errors.ts";
import { SiteLock } from "../store/lock.ts";
import { exists } from "../store/fs.ts";
import { LOCK_FILE } from "../store/layout.ts";
import { isPermissionError, MigrateError, withPermissionHint } from "./errors.ts";
import { REJECTS_FILE, type Settings } from "./types.ts";

/**
 * The name prefix of a migration's temporary directory in the destination.
 *
 * @example Usage
 * ```ts
 * import { TMP_PREFIX } from "./workspace.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(TMP_PREFIX, ".migrate-tmp-");
 * ```
 */
export const TMP_PREFIX = ".migrate-tmp-";

/** The second line of a lock file a migration holds (a server writes its URL there). */
const MIGRATION_MARK = "migrate";

/** What a migration holds in the destination; released by `migrate` in any case. */
export interface Workspace {
  /** The destination's site lock, once taken. */
  lock: SiteLock | undefined;
  /** The lock file's path when this run created it (removed again at the end). */
  createdLock?: string | undefined;
  /** The temporary directory; `undefined` in a dry run or when the run is bound to conflict. */
  tmp: string | undefined;
}

/**
 * Prepares the destination: checks it is a directory (creating it, except in a dry run), takes
 * its lock, removes stale temporary directories and creates this run's, holding an empty
 * rejects file. Fills `work` step by step, so whatever was taken before a failure is still
 * released by {@linkcode releaseDest}. Leaves `work.tmp` unset in a dry run, and when a rejects
 * file from an earlier run means this run must fail without `force`.
 *
 * @param work Filled with what was taken.
 * @param dst The absolute destination directory.
 * @param rejectsFile The rejects file's path in the destination.
 * @param settings The run's settings (dry run, force).
 * @throws {MigrateError} If the destination is a file, may not be written or is in use.
 *
 * @example Usage
 * ```ts ignore
 * import { openWorkspace, releaseDest, type Workspace } from "./workspace.ts";
 *
 * const work: Workspace = { lock: undefined, tmp: undefined };
 * try {
 *   await openWorkspace(work, "/dst", "/dst/migrate-rejects.ndjson", settings);
 * } finally {
 *   await releaseDest(work);
 * }
 * ```
 */
export async function openWorkspace(
  work: Workspace,
  dst: string,
  rejectsFile: string,
  settings: Settings,
): Promise<void> {
  await prepareDest(dst, !settings.dryRun);
  if (settings.dryRun) return;
  const lockPath = join(dst, LOCK_FILE);
  // A lock file left by a migration that was killed is ours to clean up; any other is kept.
  const before = await Deno.lstat(lockPath).catch(() => undefined);
  let hadLock = before !== undefined && !await isMigrationLock(lockPath);
  work.lock = await lockDest(dst);
  // Another migration's lock file, seen before its mark was written, may have been removed
  // since and the one we now hold created by us. Its inode number proves nothing (a file made
  // right after a removal often gets the same one), but a lock file anyone held has its pid in
  // it: one that was empty when we took it is ours.
  if (hadLock && !work.lock.hadContent) hadLock = false;
  if (!hadLock) {
    work.createdLock = lockPath;
    // Only a lock file this run created is marked: a later run may then remove it.
    await work.lock.record(MIGRATION_MARK);
  }
  // A rejects file from an earlier run means this run must fail without force: read in
  // counting mode only, to list every conflicting file without spilling anything.
  const doomed = !settings.force && await exists(rejectsFile);
  if (doomed) return;
  await withPermissionHint(
    async () => {
      await removeStaleTemp(dst);
      work.tmp = join(dst, `${TMP_PREFIX}${crypto.randomUUID()}`);
      await Deno.mkdir(work.tmp);
      await Deno.writeFile(join(work.tmp, REJECTS_FILE), new Uint8Array());
    },
    `write "${dst}"`,
    `--allow-write=${dst}`,
  );
}

/**
 * Releases the destination's lock, and removes the lock file when this run created it: the
 * destination then holds nothing but the output files, and a rerun finds it as this run left it
 * (issue 14). A `.lock` that was there before (a site directory a server used) stays.
 *
 * @param work What {@linkcode openWorkspace} took.
 *
 * @example Usage
 * ```ts ignore
 * import { releaseDest } from "./workspace.ts";
 *
 * await releaseDest({ lock: undefined, tmp: undefined });
 * ```
 */
export async function releaseDest(work: Workspace): Promise<void> {
  if (work.lock === undefined) return;
  if (work.createdLock !== undefined) {
    // Removed while still held, so no other process can take a lock on the old file.
    await Deno.remove(work.createdLock).catch(() => {});
  }
  await work.lock.release();
}

/**
 * Removes everything but the (still empty) rejects file from the temporary directory.
 *
 * @param tmp The temporary directory.
 *
 * @example Usage
 * ```ts ignore
 * import { clearScratch } from "./workspace.ts";
 *
 * await clearScratch("/dst/.migrate-tmp-x");
 * ```
 */
export async function clearScratch(tmp: string): Promise<void> {
  const names: string[] = [];
  for await (const entry of Deno.readDir(tmp)) {
    if (entry.name !== REJECTS_FILE) names.push(entry.name);
  }
  for (const name of names) await Deno.remove(join(tmp, name));
}

/**
 * Removes a directory and everything in it, if it is there.
 *
 * @param path The directory.
 *
 * @example Usage
 * ```ts ignore
 * import { removeTree } from "./workspace.ts";
 *
 * await removeTree("/dst/.migrate-tmp-x");
 * ```
 */
export async function removeTree(path: string): Promise<void> {
  try {
    await Deno.remove(path, { recursive: true });
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  }
}

// Checks that `dest` is a directory, creating it when missing unless `create` is false.
async function prepareDest(dest: string, create: boolean): Promise<void> {
  let info: Deno.FileInfo | undefined;
  try {
    info = await Deno.stat(dest);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      if (!create) return;
      await withPermissionHint(
        () => Deno.mkdir(dest, { recursive: true }),
        `create "${dest}"`,
        `--allow-write=${dest}`,
      );
      return;
    }
    if (isPermissionError(err)) {
      throw new MigrateError(`Cannot read "${dest}": permission denied, add --allow-read=${dest}`, {
        cause: err,
      });
    }
    throw err;
  }
  if (!info.isDirectory) {
    throw new MigrateError(
      `Cannot migrate into "${dest}": it is a file, not a directory, pass a directory with --dest`,
    );
  }
}

async function lockDest(dest: string): Promise<SiteLock> {
  try {
    return await withPermissionHint(
      () => SiteLock.acquire(dest),
      `write "${dest}"`,
      `--allow-write=${dest}`,
    );
  } catch (err) {
    if (!(err instanceof SiteInUseError)) throw err;
    throw new MigrateError(
      `Cannot migrate into "${dest}": a telemetry server or another migration is using it, stop it (obs-utils telemetry stop) or choose another --dest`,
      { cause: err },
    );
  }
}

// Runs only while holding the site lock, so no other migration can own these directories.
async function removeStaleTemp(dest: string): Promise<void> {
  const stale: string[] = [];
  for await (const entry of Deno.readDir(dest)) {
    if (entry.isDirectory && entry.name.startsWith(TMP_PREFIX)) stale.push(entry.name);
  }
  for (const name of stale) await Deno.remove(join(dest, name), { recursive: true });
}

/** Whether a lock file was written by a migration (one that was killed, if nobody holds it). */
async function isMigrationLock(path: string): Promise<boolean> {
  try {
    const text = await Deno.readTextFile(path);
    return text.split("\n")[1] === MIGRATION_MARK;
  } catch {
    return false;
  }
}
