/**
 * The errors a migration fails with (docs/migration.md), and the helpers that turn a permission
 * failure into one that says which permission is missing.
 *
 * @module
 */

/**
 * A migration that cannot start or go on: the source is missing or unreadable, the destination
 * is not a writable directory, or a telemetry server is using the destination.
 *
 * @example Usage
 * ```ts ignore
 * import { migrate, MigrateError } from "@obs-utils/telemetry/migrate";
 *
 * try {
 *   await migrate("./legacy", "./telemetry");
 * } catch (err) {
 *   if (!(err instanceof MigrateError)) throw err;
 *   console.error(err.message);
 * }
 * ```
 */
export class MigrateError extends Error {
  /**
   * Creates the error.
   *
   * @param message What failed and what to change.
   * @param options `cause`: the underlying error.
   */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "MigrateError";
  }
}

/**
 * Target files already exist in the destination and `force` was not set. Nothing was written.
 *
 * @example Usage
 * ```ts ignore
 * import { migrate, MigrateConflictError } from "@obs-utils/telemetry/migrate";
 *
 * try {
 *   await migrate("./legacy", "./telemetry");
 * } catch (err) {
 *   if (!(err instanceof MigrateConflictError)) throw err;
 *   console.error(`already there: ${err.files.join(", ")}`);
 * }
 * ```
 */
export class MigrateConflictError extends MigrateError {
  /** Absolute paths of the existing target files, sorted. */
  readonly files: readonly string[];

  /**
   * Creates the error, naming the first five files in the message.
   *
   * @param dest The destination directory.
   * @param files Absolute paths of the existing target files.
   */
  constructor(dest: string, files: readonly string[]) {
    const shown = files.slice(0, 5).map((f) => `"${f}"`).join(", ");
    const more = files.length > 5 ? ` and ${files.length - 5} more` : "";
    super(
      `Cannot migrate into "${dest}": ${files.length} target file${
        files.length === 1 ? "" : "s"
      } already exist${files.length === 1 ? "s" : ""} (${shown}${more}), move ${
        files.length === 1 ? "it" : "them"
      } away or rerun with --force (option force: true) to replace ${
        files.length === 1 ? "it" : "them"
      }`,
    );
    this.name = "MigrateConflictError";
    this.files = files;
  }
}

/**
 * Shortens a text quoted in a message to `max` code units, marking the cut with "…".
 *
 * @param text The text to quote.
 * @param max The longest text kept whole.
 * @returns `text`, or its first `max` code units and "…".
 *
 * @example Usage
 * ```ts
 * import { clip } from "./errors.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(clip("abcdef", 3), "abc…");
 * assert.equal(clip("abc", 3), "abc");
 * ```
 */
export function clip(text: string, max = 80): string {
  return text.length > max ? `${text.slice(0, max)}…` : text;
}

/**
 * Whether an error is a permission failure: a Deno permission the process lacks, or the
 * operating system refusing access.
 *
 * @param err What was thrown.
 * @returns `true` for `Deno.errors.NotCapable` and `Deno.errors.PermissionDenied`.
 *
 * @example Usage
 * ```ts
 * import { isPermissionError } from "./errors.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(isPermissionError(new Deno.errors.PermissionDenied("no")), true);
 * assert.equal(isPermissionError(new Deno.errors.NotFound("gone")), false);
 * ```
 */
export function isPermissionError(err: unknown): boolean {
  return err instanceof Deno.errors.NotCapable || err instanceof Deno.errors.PermissionDenied;
}

/**
 * Runs `action`, turning a permission failure into a {@linkcode MigrateError} that says which
 * kind it is: a Deno permission the command lacks (naming the flag), or the operating system
 * refusing (naming the path; no Deno flag helps then). Anything else propagates.
 *
 * @param action The file system work.
 * @param what What failed, after "Cannot ": `read "/data/legacy"`.
 * @param flag The Deno flag that grants it: `--allow-read=/data/legacy`.
 * @returns What `action` returns.
 * @throws {MigrateError} If `action` fails for lack of permission.
 *
 * @example Usage
 * ```ts ignore
 * import { withPermissionHint } from "./errors.ts";
 *
 * const info = await withPermissionHint(() => Deno.stat("/data"), `read "/data"`, "--allow-read=/data");
 * ```
 */
export async function withPermissionHint<T>(
  action: () => Promise<T>,
  what: string,
  flag: string,
): Promise<T> {
  try {
    return await action();
  } catch (err) {
    if (!isPermissionError(err)) throw err;
    throw permissionError(err, what, flag);
  }
}

/**
 * The {@linkcode MigrateError} for a permission failure (see {@linkcode withPermissionHint}).
 *
 * @param err The permission failure.
 * @param what What failed, after "Cannot ".
 * @param flag The Deno flag that grants it.
 * @returns The error to throw.
 *
 * @example Usage
 * ```ts
 * import { permissionError } from "./errors.ts";
 * import assert from "node:assert/strict";
 *
 * const err = permissionError(new Deno.errors.NotCapable("no"), `read "/x"`, "--allow-read=/x");
 * assert.equal(err.message, `Cannot read "/x": permission denied, add --allow-read=/x`);
 * ```
 */
export function permissionError(err: unknown, what: string, flag: string): MigrateError {
  if (err instanceof Deno.errors.NotCapable) {
    return new MigrateError(`Cannot ${what}: permission denied, add ${flag}`, { cause: err });
  }
  return new MigrateError(
    `Cannot ${what}: the operating system denied access (${
      osDetail(err)
    }); check the owner and mode of that path (ls -ld) or run as a user who may use it`,
    { cause: err },
  );
}

/** An OS error's message without Deno's "(os error N)" noise: `Permission denied: readdir '/x'`. */
function osDetail(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return clip(message.replace(/\s*\(os error \d+\)/, ""), 200);
}
