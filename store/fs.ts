/**
 * File-system building blocks of the site directory: atomic JSON files, directory fsync, files
 * opened without following a link, and the containment checks for run directories. The site
 * store (`site_store.ts`) and its layout (`layout.ts`) build on them.
 *
 * @module
 */

import { basename, dirname, isAbsolute, join, relative, sep } from "node:path";
import { UnsafeFileError } from "../core/errors.ts";
import { writeFull } from "./writer.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();
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

/**
 * fsyncs a directory so a rename or removal in it survives a power cut; best effort, since some
 * platforms cannot open a directory and some file systems refuse to fsync one (the rename is
 * still atomic there).
 *
 * @param dir The directory.
 */
export async function syncDirectory(dir: string): Promise<void> {
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

/**
 * Reads `length` bytes of an open file at `position`, fewer only where the file ends.
 *
 * @param file The open file (its position is moved).
 * @param position The byte to start at.
 * @param length How many bytes to read at most.
 * @returns The bytes read.
 *
 * @example Usage
 * ```ts ignore
 * using file = await Deno.open(path);
 * const lastByte = await readAt(file, size - 1, 1);
 * ```
 */
export async function readAt(
  file: Deno.FsFile,
  position: number,
  length: number,
): Promise<Uint8Array> {
  const out = new Uint8Array(length);
  await file.seek(position, Deno.SeekMode.Start);
  let filled = 0;
  while (filled < length) {
    const n = await file.read(out.subarray(filled));
    if (n === null) break;
    filled += n;
  }
  return out.subarray(0, filled);
}
