/**
 * The types of the service's interface: its options and their defaults, what it answers and what
 * it publishes.
 *
 * @module
 */

import type { BatchSummary, JsonObject, RunRecord } from "../wire/event.ts";
import type { WriteError } from "./errors.ts";
import type { FsyncMode } from "../store/writer.ts";
import type { TypesRegistry } from "./types_registry.ts";

/** Site-wide event types written to the site stream during a run too (docs/storage.md). */
export const DEFAULT_SITE_TYPES: readonly string[] = ["weather", "environment"];
/** Nights after which site and stopped runs' files are compressed (docs/history.md). */
export const DEFAULT_COMPRESS_AFTER = 2;
/** How many distinct event types the snapshot may hold (docs/storage.md). */
export const DEFAULT_MAX_TYPES = 10_000;
/**
 * How large the snapshot may grow, measured as its `GET /current` body in bytes: 64 MiB. It keeps
 * the saved snapshot, built as one text on shutdown, far inside what a string can hold.
 */
export const DEFAULT_MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024;

/** Options of `TelemetryService.open`. */
export interface ServiceOptions {
  /** The site telemetry directory; created if missing. */
  siteDir: string;
  /**
   * IANA time zone whose local noon rotates the site file.
   * @default {the system zone}
   */
  timeZone?: string;
  /**
   * Event types written to both streams while a run is active.
   * @default {["weather", "environment"]}
   */
  siteTypes?: Iterable<string>;
  /**
   * When to fdatasync.
   * @default {"interval"}
   */
  fsync?: FsyncMode;
  /** Directories outside the site directory where runs may be placed (`--allow-run-root`). */
  allowRunRoots?: readonly string[];
  /**
   * Cap on distinct event types in the snapshot.
   * @default {10000}
   */
  maxTypes?: number;
  /**
   * Budget of the snapshot in bytes, measured as its `GET /current` body: an event whose
   * `make_current` would grow it past this is refused (413, `--max-snapshot`).
   * @default {67108864}
   */
  maxSnapshotBytes?: number;
  /**
   * The clock, in epoch milliseconds; tests inject one to cross noon or a DST change.
   * @default {Date.now}
   */
  clock?: () => number;
  /**
   * A monotonic clock in milliseconds; safety latches are counted on it, so a wall clock step
   * never ends one early (docs/safety.md). Tests inject one.
   * @default {performance.now}
   */
  monotonicClock?: () => number;
  /**
   * The types registry (`--types`): its critical types decide the safety verdict (docs/safety.md).
   * @default {an empty registry: never safe}
   */
  types?: TypesRegistry;
  /** Receives warnings about recovered state (torn tails, a corrupt active-run file). */
  onWarning?: (message: string) => void;
  /**
   * Compress site files whose night ended more than this many nights ago, and the files of runs
   * stopped that long ago, to `.gz` (docs/history.md); 0 turns it off.
   * @default {2}
   */
  compressAfter?: number;
  /**
   * Delete site files whose night ended more than this many nights ago, never one a forwarding
   * cursor has not passed (docs/history.md); 0 keeps them forever.
   * @default {0}
   */
  retain?: number;
  /**
   * How many `Idempotency-Key`s are remembered at most; past it the oldest are forgotten before
   * their 24 hours (docs/storage.md, "Idempotency keys").
   * @default {100000}
   */
  maxIdempotencyKeys?: number;
  /** Receives information lines (a file compressed or deleted by compression or retention). */
  onInfo?: (message: string) => void;
}

/** Which stream a copy of an event went to. */
export type StreamName = "site" | "run";

/** One accepted event, as answered to the caller. */
export interface CommittedEvent {
  /** The envelope line without `\n`; exactly the bytes on disk when it was stored. */
  line: string;
  /** The stream of this copy: `run` while a run is active, else `site`. */
  stream: StreamName;
  /** The seq in that stream. */
  seq: number;
  /** The event type. */
  type: string;
  /** The parsed `data` (not copied: treat as read-only). */
  data: JsonObject;
  /** The run id stamped into `meta`, if any. */
  runId: string | undefined;
}

/** The answer of a request sent with an `Idempotency-Key` (`TelemetryService.submitOnce`). */
export interface KeyedAnswer {
  /**
   * The envelope lines answered, in order: exactly those of the key's first answer; `undefined`
   * when the first answer was the minimal one (`Prefer: return=minimal`), whose lines were not
   * kept.
   */
  lines: readonly string[] | undefined;
  /** The minimal answer: how many events, the first and last seq (the same as in `lines`). */
  summary: BatchSummary;
  /** `true` when the key had been answered before and nothing was stored now. */
  replayed: boolean;
}

/** What `TelemetryService.subscribe` listeners receive. */
export type ServiceMessage =
  | { kind: "telemetry"; event: CommittedEvent }
  | { kind: "run"; run: RunRecord; active: boolean }
  | { kind: "forget"; type: string };

/** What `TelemetryService.watchWrites` listeners receive after each group commit. */
export type WriteReport =
  | {
    ok: true;
    /** How long the writes took, in seconds. */
    seconds: number;
    /** Bytes appended. */
    bytes: number;
    /** Every stream copy of every accepted event: its stream and type. */
    copies: readonly (readonly [StreamName, string])[];
  }
  | {
    ok: false;
    /** Why nothing of the group was written. */
    error: WriteError;
  };
