/**
 * Finding the input of a migration: every `<collection>.json` under the source directory,
 * recursively, in sorted path order; `current_*.json` snapshots are skipped (docs/migration.md).
 *
 * @module
 */

import { join } from "node:path";
import { isPermissionError, MigrateError, permissionError, withPermissionHint } from "./errors.ts";
import type { MigrateSkipped } from "./types.ts";
import { TMP_PREFIX } from "./workspace.ts";

/** One legacy collection file to read. */
export interface InputFile {
  /** Absolute path. */
  readonly abs: string;
  /** Path relative to the source directory, with `/` separators. */
  readonly rel: string;
  /** The file name without `.json`. */
  readonly collection: string;
  /** Size in bytes. */
  readonly bytes: number;
}

/**
 * Checks that the source is a directory this process may read.
 *
 * @param source The absolute source directory.
 * @throws {MigrateError} If it is missing, a file, or not readable.
 *
 * @example Usage
 * ```ts ignore
 * import { checkSource } from "./discover.ts";
 *
 * await checkSource("/data/legacy-db");
 * ```
 */
export async function checkSource(source: string): Promise<void> {
  let info: Deno.FileInfo;
  try {
    info = await Deno.stat(source);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      throw new MigrateError(
        `Cannot migrate from "${source}": no such directory, pass the legacy database directory with --source`,
        { cause: err },
      );
    }
    if (isPermissionError(err)) {
      throw permissionError(err, `read "${source}"`, `--allow-read=${source}`);
    }
    throw err;
  }
  if (!info.isDirectory) {
    throw new MigrateError(
      `Cannot migrate from "${source}": it is a file, not a directory, pass the directory that holds the <collection>.json files with --source`,
    );
  }
}

/**
 * Every `<collection>.json` under `source`, recursively, sorted by relative path, and what was
 * passed over: `current_*.json` snapshots, broken links, links to directories (not followed, so
 * nothing loops or is read twice). A crashed run's temporary directory is never searched.
 *
 * @param source The absolute source directory.
 * @returns The input files and the skipped paths, both sorted.
 * @throws {MigrateError} If a directory cannot be read for lack of permission.
 *
 * @example Usage
 * ```ts ignore
 * import { discover } from "./discover.ts";
 *
 * const { inputs, skipped } = await discover("/data/legacy-db");
 * console.log(inputs.map((i) => i.rel), skipped);
 * ```
 */
export async function discover(
  source: string,
): Promise<{ inputs: InputFile[]; skipped: MigrateSkipped[] }> {
  const inputs: InputFile[] = [];
  const skipped: MigrateSkipped[] = [];
  function consider(abs: string, rel: string, name: string, bytes: number): void {
    if (!name.endsWith(".json")) return;
    if (name.startsWith("current_")) {
      skipped.push({ path: rel, reason: "legacy snapshot file (current_*.json), ignored" });
      return;
    }
    inputs.push({ abs, rel, collection: name.slice(0, -".json".length), bytes });
  }
  async function walk(dir: string, prefix: string): Promise<void> {
    const entries: Deno.DirEntry[] = [];
    for await (const entry of Deno.readDir(dir)) entries.push(entry);
    for (const entry of entries) {
      const abs = join(dir, entry.name);
      const rel = prefix === "" ? entry.name : `${prefix}/${entry.name}`;
      if (entry.isDirectory) {
        // A crashed run's scratch space is never input (it holds only .ndjson, but be sure).
        if (!entry.name.startsWith(TMP_PREFIX)) await walk(abs, rel);
      } else if (entry.isFile) {
        if (entry.name.endsWith(".json")) {
          consider(abs, rel, entry.name, (await Deno.stat(abs)).size);
        }
      } else if (entry.isSymlink) {
        let info: Deno.FileInfo;
        try {
          info = await Deno.stat(abs);
        } catch (err) {
          if (!(err instanceof Deno.errors.NotFound)) throw err;
          if (entry.name.endsWith(".json")) {
            skipped.push({ path: rel, reason: "broken symbolic link" });
          }
          continue;
        }
        if (info.isDirectory) {
          // Not followed: a link back up the tree would loop, and the target may be read twice.
          skipped.push({ path: rel, reason: "symbolic link to a directory, not followed" });
        } else if (info.isFile) {
          consider(abs, rel, entry.name, info.size);
        }
      }
    }
  }
  await withPermissionHint(
    () => walk(source, ""),
    `read "${source}"`,
    `--allow-read=${source}`,
  );
  // Code-unit order of the relative paths: the same on every machine and file system.
  inputs.sort((a, b) => (a.rel < b.rel ? -1 : a.rel > b.rel ? 1 : 0));
  skipped.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  return { inputs, skipped };
}

/**
 * Opens an input file for reading.
 *
 * @param input The file.
 * @returns The open file.
 * @throws {MigrateError} If it may not be read.
 *
 * @example Usage
 * ```ts ignore
 * import { discover, openInput } from "./discover.ts";
 *
 * const { inputs } = await discover("/data/legacy-db");
 * const file = await openInput(inputs[0]!);
 * file.close();
 * ```
 */
export function openInput(input: InputFile): Promise<Deno.FsFile> {
  return withPermissionHint(
    () => Deno.open(input.abs, { read: true }),
    `read "${input.abs}"`,
    `--allow-read=${input.abs}`,
  );
}

/**
 * "No collection files", with what was found instead, so the operator can fix `--source`.
 *
 * @param src The absolute source directory.
 * @param skipped What {@linkcode discover} passed over.
 * @returns The error to throw.
 *
 * @example Usage
 * ```ts
 * import { noCollections } from "./discover.ts";
 * import assert from "node:assert/strict";
 *
 * assert.match(noCollections("/data", []).message, /holds no collection files/);
 * ```
 */
export function noCollections(src: string, skipped: readonly MigrateSkipped[]): MigrateError {
  const seen = skipped.length === 0
    ? ""
    : ` (skipped ${skipped.length}: ${
      skipped.slice(0, 3).map((s) => `${s.path}, ${s.reason}`).join("; ")
    }${skipped.length > 3 ? "; ..." : ""})`;
  return new MigrateError(
    `Cannot migrate from "${src}": it holds no collection files (<collection>.json, searched recursively)${seen}; pass the legacy database directory with --source`,
  );
}
