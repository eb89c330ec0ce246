/**
 * File-system building blocks of the site directory: the lock, atomic JSON files, and the
 * containment checks for run directories. `storage.ts` and `_site_layout.ts` use them.
 *
 * @module
 */

import { basename, dirname, isAbsolute, join, relative, sep } from "node:path";
import { SiteInUseError, UnsafeFileError } from "../core/errors.ts";
import { writeFull } from "./writer.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();
/** The lock file's name in a site directory. */
export const LOCK_FILE = ".lock";

/**
 * The exclusive lock on `<site_dir>/.lock` that keeps a second server off the same directory
 * (docs/storage.md). The operating system releases it if the process dies.
 */
export class SiteLock {
  #file: Deno.FsFile;
  #siteDir: string;
  /**
   * Whether the lock file held anything when it was taken: a holder always writes its pid, so an
   * empty one was created just now (or by a holder that died before writing).
   */
  readonly hadContent: boolean;

  private constructor(file: Deno.FsFile, siteDir: string, hadContent: boolean) {
    this.#file = file;
    this.#siteDir = siteDir;
    this.hadContent = hadContent;
  }

  /**
   * Takes the lock without waiting.
   *
   * @param siteDir The site directory.
   * @returns The held lock.
   * @throws {SiteInUseError} If another server (or another open in this process) holds it.
   * @throws {UnsafeFileError} If `.lock` is a symbolic link, a directory or another non-file.
   */
  static async acquire(siteDir: string): Promise<SiteLock> {
    const path = join(siteDir, LOCK_FILE);
    let file: Deno.FsFile | undefined;
    // A holder that is done may remove the lock file while still holding it (the migrator
    // does): a lock taken on the removed file guards nothing, so try again on the new one.
    for (let attempt = 0; file === undefined; attempt++) {
      // The lock is truncated below: a `.lock` planted as a symlink must not truncate its target.
      const candidate = await openPlainFile(path);
      let locked = false;
      try {
        locked = await candidate.tryLock(true);
      } finally {
        if (!locked) candidate.close();
      }
      if (!locked) throw new SiteInUseError(siteDir, await readHolder(siteDir));
      if (attempt >= 4 || await isSameFile(candidate, path)) file = candidate;
      else {
        await candidate.unlock().catch(() => {});
        candidate.close();
      }
    }
    let hadContent: boolean;
    try {
      hadContent = (await file.stat()).size > 0;
      await file.truncate(0);
      // Taken again by a server that lost its lock file: it still listens where it did.
      const url = recordedUrls.get(siteDir);
      await writeFull(file, encoder.encode(`${Deno.pid}\n${url === undefined ? "" : `${url}\n`}`));
    } catch (err) {
      await file.unlock().catch(() => {});
      file.close();
      throw err;
    }
    const lock = new SiteLock(file, siteDir, hadContent);
    heldLocks.set(siteDir, lock);
    return lock;
  }

  /**
   * Records where the holder listens, so a second server refused the directory can say which
   * process to stop and how (docs/cli.md). The file holds the pid on its first line and the URL
   * on its second.
   *
   * @param url The base URL of the server holding the lock.
   */
  async record(url: string): Promise<void> {
    url = url.replace(/\s/g, "");
    recordedUrls.set(this.#siteDir, url);
    await this.#file.truncate(0);
    await this.#file.seek(0, Deno.SeekMode.Start);
    await writeFull(this.#file, encoder.encode(`${Deno.pid}\n${url}\n`));
  }

  /** Releases the lock. Safe to call twice. */
  async release(): Promise<void> {
    if (heldLocks.get(this.#siteDir) === this) {
      heldLocks.delete(this.#siteDir);
      recordedUrls.delete(this.#siteDir);
    }
    try {
      await this.#file.unlock();
      this.#file.close();
    } catch (err) {
      if (!(err instanceof Deno.errors.BadResource)) throw err;
    }
  }
}

/** Whether an open file is still the one at `path` (not removed or replaced since it was opened). */
async function isSameFile(file: Deno.FsFile, path: string): Promise<boolean> {
  try {
    const [open, named] = await Promise.all([file.stat(), Deno.lstat(path)]);
    return open.ino === null || (open.ino === named.ino && open.dev === named.dev);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return false;
    throw err;
  }
}

/** The locks this process holds, by the site directory they were taken for. */
const heldLocks = new Map<string, SiteLock>();
/** The URL each held lock's server recorded, kept when the lock is taken again. */
const recordedUrls = new Map<string, string>();

/**
 * Records the URL of the server holding a site directory's lock in this process, in its lock
 * file (see {@linkcode SiteLock.record}); nothing when this process holds no lock there.
 *
 * @param siteDir The site directory, as the lock was taken for it.
 * @param url The server's base URL.
 */
export async function recordLockHolder(siteDir: string, url: string): Promise<void> {
  await heldLocks.get(siteDir)?.record(url);
}

/** What a lock file says about its holder: best effort, since it may be mid-write or foreign. */
async function readHolder(siteDir: string): Promise<{ pid?: number; url?: string }> {
  let text: string;
  try {
    const file = await Deno.open(join(siteDir, LOCK_FILE), { read: true });
    try {
      const buf = new Uint8Array(512);
      const n = await file.read(buf);
      text = decoder.decode(buf.subarray(0, n ?? 0));
    } finally {
      file.close();
    }
  } catch {
    return {};
  }
  const [pidText, url] = text.split("\n");
  const holder: { pid?: number; url?: string } = {};
  if (pidText && /^\d{1,10}$/.test(pidText)) holder.pid = Number(pidText);
  if (url && /^https?:\/\/[\x21-\x7e]{1,300}$/.test(url)) holder.url = url; // printable ASCII only
  return holder;
}

/**
 * Writes a JSON file atomically: a temporary file in the same directory, fdatasynced, then
 * renamed over the target, so a crash leaves the old or the new content, never a mix.
 *
 * @param path The target file.
 * @param value Any JSON-serialisable value.
 */
export async function writeJsonAtomic(path: string, value: unknown): Promise<void> {
  const tmp = `${path}.tmp-${crypto.randomUUID()}`;
  const file = await Deno.open(tmp, { write: true, createNew: true });
  try {
    try {
      await writeFull(file, encoder.encode(JSON.stringify(value) + "\n"));
      await file.syncData();
    } finally {
      file.close();
    }
    await Deno.rename(tmp, path);
  } catch (err) {
    // A full disk or a value that cannot be serialised must not leave the temporary file behind.
    await Deno.remove(tmp).catch(() => {});
    throw err;
  }
  await syncDirectory(dirname(path));
}

/** fsyncs a directory so a rename in it survives a power cut (best effort where unsupported). */
async function syncDirectory(dir: string): Promise<void> {
  let handle: Deno.FsFile;
  try {
    handle = await Deno.open(dir, { read: true });
  } catch {
    return; // platforms that cannot open a directory: the rename is still atomic
  }
  try {
    await handle.sync();
  } catch {
    // some file systems refuse fsync on a directory; nothing more can be done
  } finally {
    handle.close();
  }
}

/**
 * Reads a JSON file, answering `undefined` when it does not exist.
 *
 * @param path The file.
 * @returns The parsed value.
 * @throws {SyntaxError} If the file is not JSON.
 */
export async function readJsonFile(path: string): Promise<unknown> {
  try {
    return JSON.parse(decoder.decode(await Deno.readFile(path)));
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return undefined;
    throw err;
  }
}

/**
 * Removes a file if it exists.
 *
 * @param path The file.
 */
export async function removeIfExists(path: string): Promise<void> {
  try {
    await Deno.remove(path);
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  }
}

/**
 * Tells whether `path` lies strictly inside `root` (not `root` itself), lexically.
 *
 * @param path An absolute, normalised path.
 * @param root An absolute, normalised directory.
 * @returns `true` when `path` is below `root`.
 */
export function isStrictlyInside(path: string, root: string): boolean {
  const rel = relative(root, path);
  // Not `rel.startsWith("..")`: that also refuses a child named like "..2026".
  return rel !== "" && !isAbsolute(rel) && !rel.split(sep).includes("..");
}

/**
 * The real path of `path`, resolving symlinks through its nearest existing ancestor, so a
 * symlink cannot lead a not-yet-created directory outside where it seems to be.
 *
 * @param path An absolute path that may not exist yet.
 * @returns Its real path (or `path` itself where reading is not permitted).
 */
export async function realPathOfNearest(path: string): Promise<string> {
  const missing: string[] = [];
  let current = path;
  while (true) {
    try {
      const real = await Deno.realPath(current);
      return missing.length === 0 ? real : join(real, ...missing.reverse());
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) {
        if (err instanceof Deno.errors.NotCapable || err instanceof Deno.errors.PermissionDenied) {
          return path; // outside what we may read: the containment check rejects it lexically
        }
        throw err;
      }
      const parent = dirname(current);
      if (parent === current) return path;
      missing.push(basename(current));
      current = parent;
    }
  }
}

/**
 * What a path is, in words for an error message, when it is not a regular file.
 *
 * @param info Its `lstat`.
 * @returns For example `"a symbolic link"`, or `undefined` for a regular file.
 */
export function notAFile(info: Deno.FileInfo): string | undefined {
  if (info.isFile) return undefined;
  if (info.isSymlink) return "a symbolic link";
  if (info.isDirectory) return "a directory";
  return "neither a file nor a directory";
}

/**
 * Opens a file for reading and writing without ever following a symbolic link at its last
 * component. Deno has no `O_NOFOLLOW`, so a new file is created exclusively (`O_EXCL` does not
 * follow links), and an existing one must be a regular file by `lstat` and still the same inode
 * once open.
 *
 * @param path The file, created if missing.
 * @returns The open file.
 * @throws {UnsafeFileError} If something other than a regular file is at `path`.
 */
export async function openPlainFile(path: string): Promise<Deno.FsFile> {
  try {
    return await Deno.open(path, { read: true, write: true, createNew: true });
  } catch (err) {
    if (!(err instanceof Deno.errors.AlreadyExists)) throw err;
  }
  const before = await Deno.lstat(path);
  const found = notAFile(before);
  if (found) throw new UnsafeFileError(path, found);
  const file = await Deno.open(path, { read: true, write: true });
  try {
    assertSameInode(path, before, await file.stat());
  } catch (err) {
    file.close();
    throw err;
  }
  return file;
}

/**
 * Makes sure a regular file is at `path`, creating it empty (exclusively) when nothing is there,
 * for writers that open the path themselves. Pair it with {@linkcode assertStillPlainFile}
 * after they opened it.
 *
 * @param path The file.
 * @returns Its `lstat`.
 * @throws {UnsafeFileError} If something other than a regular file is at `path`.
 */
export async function ensurePlainFile(path: string): Promise<Deno.FileInfo> {
  try {
    (await Deno.open(path, { write: true, createNew: true })).close();
  } catch (err) {
    if (!(err instanceof Deno.errors.AlreadyExists)) throw err;
  }
  const info = await Deno.lstat(path);
  const found = notAFile(info);
  if (found) throw new UnsafeFileError(path, found);
  return info;
}

/**
 * Checks that `path` is still the regular file {@linkcode ensurePlainFile} saw: nothing swapped
 * a link in between.
 *
 * @param path The file.
 * @param before What {@linkcode ensurePlainFile} returned.
 * @throws {UnsafeFileError} If it changed.
 */
export async function assertStillPlainFile(path: string, before: Deno.FileInfo): Promise<void> {
  const now = await Deno.lstat(path);
  const found = notAFile(now);
  if (found) throw new UnsafeFileError(path, found);
  assertSameInode(path, before, now);
}

/**
 * Refuses a path that exists and is not a regular file; a missing path is fine.
 *
 * @param path A file the service may create, read or append to later.
 * @throws {UnsafeFileError} If something other than a regular file is there.
 */
export async function refuseNonFile(path: string): Promise<void> {
  let info: Deno.FileInfo;
  try {
    info = await Deno.lstat(path);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return;
    throw err;
  }
  const found = notAFile(info);
  if (found) throw new UnsafeFileError(path, found);
}

function assertSameInode(path: string, a: Deno.FileInfo, b: Deno.FileInfo): void {
  // `ino`/`dev` are null where the platform has none (Windows): nothing to compare there.
  if (a.ino !== null && b.ino !== null && (a.ino !== b.ino || a.dev !== b.dev)) {
    throw new UnsafeFileError(path, "a different file than a moment ago (it was replaced)");
  }
}

/**
 * Whether something (a file, a directory, a link) is at a path, without following a link.
 *
 * @param path The path.
 * @returns `true` when `lstat` finds it.
 * @throws {Error} Any error but `NotFound`, such as a missing permission.
 */
export async function exists(path: string): Promise<boolean> {
  try {
    await Deno.lstat(path);
    return true;
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return false;
    throw err;
  }
}
