/**
 * The site directory's lock (docs/storage.md): `<site_dir>/.lock`, held exclusively so that a
 * second server cannot write to the same directory ({@linkcode SiteLock}), and kept held while a
 * store is open even when someone deletes the file ({@linkcode LockKeeper}).
 *
 * @example Usage
 * ```ts ignore
 * import { SiteLock } from "./lock.ts";
 * const lock = await SiteLock.acquire("./telemetry");
 * await lock.release();
 * ```
 *
 * @module
 */

import { join } from "node:path";
import { errorText, SiteInUseError } from "../core/errors.ts";
import { openPlainFile } from "./fs.ts";
import { LOCK_FILE } from "./layout.ts";
import type { ProblemLog } from "./problem_log.ts";
import { writeFull } from "./writer.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * The exclusive lock on `<site_dir>/.lock` that keeps a second server off the same directory
 * (docs/storage.md). The operating system releases it if the process dies.
 *
 * @example Usage
 * ```ts ignore
 * import { SiteLock } from "./lock.ts";
 * const lock = await SiteLock.acquire("./telemetry");
 * await lock.record("http://localhost:6562");
 * await lock.release();
 * ```
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
 *
 * @example Usage
 * ```ts ignore
 * import { recordLockHolder } from "./lock.ts";
 * await recordLockHolder("/srv/telemetry", "http://localhost:6562");
 * ```
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
 * The lock of an open store, kept held: a deleted `.lock` no longer keeps a second server out
 * (docs/storage.md), so {@linkcode LockKeeper.check} takes a new one, or warns loudly when
 * another server already did.
 *
 * @example Usage
 * ```ts ignore
 * import { LockKeeper } from "./lock.ts";
 * import { ProblemLog } from "./problem_log.ts";
 * const keeper = await LockKeeper.take("/srv/telemetry", new ProblemLog(console.warn));
 * await keeper.check(); // once a second while the store is open
 * await keeper.release();
 * ```
 */
export class LockKeeper {
  #siteDir: string;
  #lock: SiteLock;
  #problems: ProblemLog;

  private constructor(siteDir: string, lock: SiteLock, problems: ProblemLog) {
    this.#siteDir = siteDir;
    this.#lock = lock;
    this.#problems = problems;
  }

  /**
   * Takes the lock of a site directory.
   *
   * @param siteDir The site directory (its real path).
   * @param problems Where a lasting problem with the lock is warned, once while it lasts.
   * @returns The held lock.
   * @throws {SiteInUseError} If another server holds the directory.
   * @throws {UnsafeFileError} If its `.lock` is a symbolic link or not a file.
   */
  static async take(siteDir: string, problems: ProblemLog): Promise<LockKeeper> {
    return new LockKeeper(siteDir, await SiteLock.acquire(siteDir), problems);
  }

  /**
   * Checks that the `.lock` still exists and takes the lock again when it was deleted. A site
   * directory replaced by a symlink is warned about, not followed. Nothing is thrown.
   */
  async check(): Promise<void> {
    const lockPath = join(this.#siteDir, LOCK_FILE);
    try {
      const dir = await Deno.lstat(this.#siteDir);
      if (dir.isSymlink) {
        this.#problems.note(
          this.#siteDir,
          `The site directory ${this.#siteDir} was replaced by a symbolic link; it is not followed, so new files cannot be created there. Put the directory back.`,
        );
        return;
      }
      await Deno.lstat(lockPath);
      this.#problems.clear(lockPath);
      return;
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) {
        this.#problems.note(lockPath, `Cannot check ${lockPath}: ${errorText(err)}`);
        return;
      }
    }
    await this.#retake(lockPath);
  }

  async #retake(lockPath: string): Promise<void> {
    try {
      await Deno.mkdir(this.#siteDir, { recursive: true });
      const lock = await SiteLock.acquire(this.#siteDir);
      const old = this.#lock;
      this.#lock = lock;
      await old.release().catch(() => {});
      this.#problems.warn(`${lockPath} was deleted while the service ran; took the lock again.`);
      this.#problems.clear(lockPath);
    } catch (err) {
      this.#problems.note(
        lockPath,
        err instanceof SiteInUseError
          ? `${lockPath} was deleted while the service ran and another server has taken the new one: two servers now write to ${this.#siteDir}; stop one of them.`
          : `${lockPath} was deleted while the service ran and cannot be taken again: ${
            errorText(err)
          }`,
      );
    }
  }

  /** Releases the lock. Safe to call twice. */
  release(): Promise<void> {
    return this.#lock.release();
  }
}
