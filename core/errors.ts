/**
 * The service's domain errors. They say what went wrong in the service's own terms and carry the
 * facts a caller needs; they know nothing of HTTP statuses, routes or command-line flags. The HTTP
 * layer turns each into problem+json (`toProblem` in `http/problems.ts`), the command line into one line.
 *
 * @module
 */

/**
 * A request the service refuses as given: a bad event, run id or run directory. The message is
 * one full sentence that says what to change.
 *
 * @example Usage
 * ```ts
 * import { InvalidRequestError } from "@obs-utils/telemetry/server";
 * import assert from "node:assert/strict";
 *
 * const err = new InvalidRequestError('"data" must be a JSON object, not an array.');
 * assert.equal(err.name, "InvalidRequestError");
 * ```
 */
export class InvalidRequestError extends Error {
  /**
   * Creates the error.
   *
   * @param message One full sentence saying what is wrong and what to change.
   * @param options The underlying error, if any.
   */
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "InvalidRequestError";
  }
}

/**
 * A requested run directory that lies outside the site directory and every allowed run root
 * (docs/http-api.md).
 *
 * @example Usage
 * ```ts
 * import { RunDirNotAllowedError } from "@obs-utils/telemetry/server";
 * import assert from "node:assert/strict";
 *
 * const err = new RunDirNotAllowedError("../x", "/srv/x", "/srv/telemetry", []);
 * assert.ok(err.message.includes("/srv/x"));
 * ```
 */
export class RunDirNotAllowedError extends InvalidRequestError {
  /** The `run_dir` as requested. */
  readonly requested: string;
  /** Where it resolves to. */
  readonly resolved: string;
  /** The site directory. */
  readonly siteDir: string;
  /** The directories outside the site directory where runs may be placed. */
  readonly runRoots: readonly string[];
  /**
   * Creates the error.
   *
   * @param requested The `run_dir` as requested.
   * @param resolved Its absolute path.
   * @param siteDir The site directory.
   * @param runRoots The allowed run roots.
   */
  constructor(requested: string, resolved: string, siteDir: string, runRoots: readonly string[]) {
    const roots = runRoots.length > 0 ? ` or an allowed run root (${runRoots.join(", ")})` : "";
    super(
      `run_dir "${requested}" resolves to ${resolved}, which is not inside the site directory ${siteDir}${roots}`,
    );
    this.name = "RunDirNotAllowedError";
    this.requested = requested;
    this.resolved = resolved;
    this.siteDir = siteDir;
    this.runRoots = runRoots;
  }
}

/**
 * A new event type that would take the snapshot past its cap (docs/storage.md).
 *
 * @example Usage
 * ```ts
 * import { TypeLimitError } from "@obs-utils/telemetry/server";
 * import assert from "node:assert/strict";
 *
 * assert.equal(new TypeLimitError(10_000, undefined).limit, 10_000);
 * ```
 */
export class TypeLimitError extends Error {
  /** The cap on distinct event types. */
  readonly limit: number;
  /** The 0-based index of the refused item in a batch, if the request was one. */
  readonly item: number | undefined;
  /**
   * Creates the error.
   *
   * @param limit The cap on distinct event types.
   * @param item The index of the refused item in a batch.
   */
  constructor(limit: number, item: number | undefined) {
    super(
      `${
        itemPrefix(item)
      }the snapshot already holds ${limit} event types, the limit; reuse an existing type`,
    );
    this.name = "TypeLimitError";
    this.limit = limit;
    this.item = item;
  }
}

/**
 * An event refused because making it current would grow the snapshot (its `GET /current` body)
 * past the service's budget (`maxSnapshotBytes`).
 *
 * @example Usage
 * ```ts
 * import { SnapshotLimitError } from "@obs-utils/telemetry/server";
 * import assert from "node:assert/strict";
 *
 * const err = new SnapshotLimitError(1024, 2048, { type: "image", item: undefined });
 * assert.equal(err.limit, 1024);
 * ```
 */
export class SnapshotLimitError extends Error {
  /** The budget in bytes. */
  readonly limit: number;
  /** At most how large the snapshot would have become, in bytes. */
  readonly projected: number;
  /** The type of the refused item (the largest one of the request). */
  readonly type: string;
  /** The 0-based index of the refused item in a batch, if the request was one. */
  readonly item: number | undefined;
  /**
   * Creates the error.
   *
   * @param limit The budget in bytes.
   * @param projected At most how large the snapshot would have become.
   * @param refused The type and batch index of the item named.
   */
  constructor(
    limit: number,
    projected: number,
    refused: { type: string; item: number | undefined },
  ) {
    super(
      `${itemPrefix(refused.item)}making this event of type ${
        JSON.stringify(refused.type)
      } current would grow the snapshot to about ${projected} bytes, past its limit of ${limit} bytes; send it with "make_current": false`,
    );
    this.name = "SnapshotLimitError";
    this.limit = limit;
    this.projected = projected;
    this.type = refused.type;
    this.item = refused.item;
  }
}

/**
 * A run start refused because another run is active.
 *
 * @example Usage
 * ```ts
 * import { RunConflictError } from "@obs-utils/telemetry/server";
 * import assert from "node:assert/strict";
 *
 * assert.equal(new RunConflictError("a", "b").activeRunId, "a");
 * ```
 */
export class RunConflictError extends Error {
  /** The run that is active. */
  readonly activeRunId: string;
  /** The run that was asked for; `undefined` when its id was to be derived. */
  readonly requestedRunId: string | undefined;
  /**
   * Creates the error.
   *
   * @param activeRunId The run that is active.
   * @param requestedRunId The run that was asked for, if named.
   */
  constructor(activeRunId: string, requestedRunId: string | undefined) {
    super(
      `Run "${activeRunId}" is active; stop it before starting ${
        requestedRunId === undefined ? "a new one" : `"${requestedRunId}"`
      }`,
    );
    this.name = "RunConflictError";
    this.activeRunId = activeRunId;
    this.requestedRunId = requestedRunId;
  }
}

/**
 * A run start that names a run id the run log knows for another run directory: a run id names
 * one run directory forever (docs/http-api.md), since the fleet keys a run's events by run id
 * and seq, and another directory would number them from 1 again.
 *
 * @example Usage
 * ```ts
 * import { RunIdReusedError } from "@obs-utils/telemetry/server";
 * import assert from "node:assert/strict";
 *
 * const err = new RunIdReusedError("m31", "/srv/telemetry/m31", "/srv/telemetry/b/m31");
 * assert.equal(err.usedRunDir, "/srv/telemetry/m31");
 * ```
 */
export class RunIdReusedError extends Error {
  /** The run id asked for. */
  readonly runId: string;
  /** The directory the run log knows it for. */
  readonly usedRunDir: string;
  /** The directory asked for. */
  readonly requestedRunDir: string;
  /**
   * Creates the error.
   *
   * @param runId The run id asked for.
   * @param usedRunDir The directory the run log knows it for.
   * @param requestedRunDir The directory asked for.
   */
  constructor(runId: string, usedRunDir: string, requestedRunDir: string) {
    super(
      `run_id "${runId}" was used for run_dir ${usedRunDir}, and a run id names one run directory; choose another run_id, or start "${runId}" again with run_dir ${usedRunDir} to continue it`,
    );
    this.name = "RunIdReusedError";
    this.runId = runId;
    this.usedRunDir = usedRunDir;
    this.requestedRunDir = requestedRunDir;
  }
}

/**
 * A run stop (or run query) while no run is active.
 *
 * @example Usage
 * ```ts
 * import { NoActiveRunError } from "@obs-utils/telemetry/server";
 * import assert from "node:assert/strict";
 *
 * assert.equal(new NoActiveRunError().message, "No run is active");
 * ```
 */
export class NoActiveRunError extends Error {
  /** Creates the error. */
  constructor() {
    super("No run is active");
    this.name = "NoActiveRunError";
  }
}

/**
 * Work refused because the service is closing.
 *
 * @example Usage
 * ```ts
 * import { ShuttingDownError } from "@obs-utils/telemetry/server";
 * import assert from "node:assert/strict";
 *
 * assert.equal(new ShuttingDownError().name, "ShuttingDownError");
 * ```
 */
export class ShuttingDownError extends Error {
  /** Creates the error. */
  constructor() {
    super("The service is shutting down");
    this.name = "ShuttingDownError";
  }
}

/**
 * An `Idempotency-Key` came back with another request than the one it was first answered for
 * (docs/http-api.md): another body, or another route. Nothing was stored.
 *
 * @example Usage
 * ```ts
 * import { IdempotencyConflictError } from "@obs-utils/telemetry/server";
 * import assert from "node:assert/strict";
 *
 * const err = new IdempotencyConflictError("3f2c", Date.parse("2026-11-27T06:00:00Z"));
 * assert.equal(err.key, "3f2c");
 * assert.match(err.message, /2026-11-27T06:00:00.000Z/);
 * ```
 */
export class IdempotencyConflictError extends Error {
  /** The key. */
  readonly key: string;
  /** When its first request was answered, epoch milliseconds. */
  readonly firstAt: number;
  /**
   * Creates the error.
   *
   * @param key The key sent again.
   * @param firstAt When its first request was answered, epoch milliseconds.
   */
  constructor(key: string, firstAt: number) {
    super(
      `Idempotency-Key ${
        JSON.stringify(key.length > 60 ? `${key.slice(0, 60)}...` : key)
      } was answered at ${
        new Date(firstAt).toISOString()
      } for a request with another body or route; nothing was stored`,
    );
    this.name = "IdempotencyConflictError";
    this.key = key;
    this.firstAt = firstAt;
  }
}

/**
 * The disk refused a write. Nothing of the failed write remains on disk and no seq was consumed.
 * It names the file being written and, when it could be found, the mount point of the file
 * system that holds it, so the operator knows which disk to free.
 *
 * @example Usage
 * ```ts
 * import { WriteError } from "@obs-utils/telemetry/server";
 * import assert from "node:assert/strict";
 *
 * const err = new WriteError("Cannot write to /srv/t/a.ndjson: No space left on device", {
 *   cause: undefined,
 *   diskFull: true,
 *   path: "/srv/t/a.ndjson",
 *   mountPoint: "/srv",
 * });
 * assert.equal(err.diskFull, true);
 * assert.equal(err.mountPoint, "/srv");
 * ```
 */
export class WriteError extends Error {
  /** `true` when the disk (or quota) is full: ENOSPC or EDQUOT. */
  readonly diskFull: boolean;
  /** The file being written, when known. */
  readonly path: string | undefined;
  /** The mount point of the file system holding {@linkcode WriteError.path}, when known. */
  readonly mountPoint: string | undefined;
  /**
   * Creates the error.
   *
   * @param message What failed.
   * @param options `cause`, whether the disk was full, and the file and its mount point.
   */
  constructor(
    message: string,
    options: {
      cause: unknown;
      diskFull: boolean;
      path?: string | undefined;
      mountPoint?: string | undefined;
    },
  ) {
    super(message, { cause: options.cause });
    this.name = "WriteError";
    this.diskFull = options.diskFull;
    this.path = options.path;
    this.mountPoint = options.mountPoint;
  }
}

/**
 * A file operation of the service that failed for a reason other than the request: a directory
 * that cannot be created, a record that cannot be removed.
 *
 * @example Usage
 * ```ts
 * import { StorageError } from "@obs-utils/telemetry/server";
 * import assert from "node:assert/strict";
 *
 * assert.equal(new StorageError("Cannot create run directory /x: denied").name, "StorageError");
 * ```
 */
export class StorageError extends Error {
  /**
   * Creates the error.
   *
   * @param message What failed and why.
   * @param options The underlying error, if any.
   */
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "StorageError";
  }
}

/**
 * A path where the service keeps one of its own files holds something else: a symbolic link, a
 * directory or a device. The service never writes through it, so a link planted in the site
 * directory cannot lead a write outside it.
 *
 * @example Usage
 * ```ts
 * import { UnsafeFileError } from "./errors.ts";
 * import assert from "node:assert/strict";
 *
 * const err = new UnsafeFileError("/srv/telemetry/.lock", "a symbolic link");
 * assert.equal(err.found, "a symbolic link");
 * ```
 */
export class UnsafeFileError extends Error {
  /** The path. */
  readonly path: string;
  /** What is there instead of a regular file, for example `"a symbolic link"`. */
  readonly found: string;
  /**
   * Creates the error.
   *
   * @param path The path.
   * @param found What is there instead of a regular file.
   */
  constructor(path: string, found: string) {
    super(
      `${path} is ${found}, not a regular file; the service never writes through it, so move it away`,
    );
    this.name = "UnsafeFileError";
    this.path = path;
    this.found = found;
  }
}

/**
 * Another server (or another open in this process) holds the site directory (docs/storage.md).
 *
 * @example Usage
 * ```ts
 * import { SiteInUseError } from "@obs-utils/telemetry/server";
 * import assert from "node:assert/strict";
 *
 * assert.equal(new SiteInUseError("/srv/telemetry").siteDir, "/srv/telemetry");
 * ```
 */
export class SiteInUseError extends Error {
  /** The locked site directory. */
  readonly siteDir: string;
  /** The holder's process id, as its lock file records it, when known. */
  readonly holderPid: number | undefined;
  /** The holder's base URL (`http://127.0.0.1:6562`), when it is a server that is listening. */
  readonly holderUrl: string | undefined;
  /**
   * Creates the error.
   *
   * @param siteDir The locked site directory.
   * @param holder What the lock file says about the process holding it.
   */
  constructor(
    siteDir: string,
    holder: { pid?: number | undefined; url?: string | undefined } = {},
  ) {
    super(`site directory ${siteDir} is in use by another telemetry server`);
    this.name = "SiteInUseError";
    this.siteDir = siteDir;
    this.holderPid = holder.pid;
    this.holderUrl = holder.url;
  }
}

/**
 * The prefix of a batch item's error message, counting the way people do and saying so:
 * `"Item 3 (0-based): "` for an item of a JSON array, `"Line 5 (item 3, 0-based): "` for a line
 * of an NDJSON body (lines count from 1, blank ones included), `""` outside a batch.
 *
 * @param index The 0-based index, or `undefined` outside a batch.
 * @param line The 1-based line of an NDJSON body, when the item came from one.
 * @returns The prefix.
 *
 * @example Usage
 * ```ts
 * import { itemPrefix } from "./errors.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(itemPrefix(1), "Item 1 (0-based): ");
 * assert.equal(itemPrefix(1, 3), "Line 3 (item 1, 0-based): ");
 * ```
 */
export function itemPrefix(index: number | undefined, line?: number): string {
  if (index === undefined) return "";
  return line === undefined
    ? `Item ${index} (0-based): `
    : `Line ${line} (item ${index}, 0-based): `;
}

/**
 * Describes an error in a few words for a log line or an HTTP `detail`.
 *
 * @param err Anything thrown.
 * @returns Its message without a stack trace.
 */
export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * Tells whether an error means the disk (or a quota) is full: ENOSPC or EDQUOT.
 *
 * @param err Anything thrown by a file operation.
 * @returns `true` for a full disk.
 */
export function isDiskFull(err: unknown): boolean {
  if (err instanceof WriteError) return err.diskFull;
  const e = err as { code?: string; message?: string };
  return e?.code === "ENOSPC" || e?.code === "EDQUOT" ||
    /os error (28|122)\b|No space left|quota exceeded/i.test(String(e?.message));
}

/**
 * Raised by `startServer()` for a configuration that must not run.
 *
 * @example Usage
 * ```ts ignore
 * import { ConfigError, startServer } from "@obs-utils/telemetry/server";
 * // A non-loopback address without a token is refused unless `insecure` is set.
 * await startServer({ siteDir: "./telemetry", hostname: "0.0.0.0" }).catch((err) => {
 *   if (err instanceof ConfigError) console.error(err.message);
 * });
 * ```
 */
export class ConfigError extends Error {
  /**
   * Creates the error.
   *
   * @param message What is wrong and which option fixes it.
   */
  constructor(message: string) {
    super(message);
    this.name = "ConfigError";
  }
}
