/**
 * What a forwarder is told (docs/fleet.md): its options, checked before anything connects, and
 * the fleet sink its `--to` URL names.
 *
 * @module
 */
import { checkUnit, type ForwardItem } from "./item.ts";
import type { FleetLog } from "./retry.ts";
import { redact } from "./archive.ts";
import type { FleetSinkConnector } from "./sinks/sink.ts";
import { checkNatsName, checkSubjectPrefix, natsConnector } from "./sinks/nats.ts";
import { postgresItemConnector } from "./sinks/postgres.ts";

/** Options of {@linkcode forward}. */
export interface ForwardOptions {
  /** The service's site directory. */
  readonly siteDir: string;
  /** `nats://host:port` or `postgres://user@host:port/db`. */
  readonly to: string;
  /** This observatory's name in the fleet (`OBS_TELEMETRY_UNIT`). */
  readonly unit: string;
  /**
   * Takes the unit over from the site that holds it (`--reclaim-unit`, docs/fleet.md "Units"):
   * for a site directory moved to a new disk, whose service made a new `site_id`. Default: a
   * unit another site holds stops the forwarder.
   */
  readonly reclaimUnit?: boolean;
  /** The cursor's name (`<site_dir>/.forward/<name>.json`); default: the URL's scheme. */
  readonly name?: string;
  /** NATS subject prefix; default `telemetry`. */
  readonly subjectPrefix?: string;
  /** JetStream stream; default `TELEMETRY`. */
  readonly natsStream?: string;
  /** Lines per send (one JetStream pipeline or one transaction); default 1000. */
  readonly batch?: number;
  /** How often to look for new lines once caught up, in ms; default 100. */
  readonly pollMs?: number;
  /** Stops the forwarder after the batch in flight is acknowledged and its cursor saved. */
  readonly signal?: AbortSignal;
  /** State changes (destination down, back), and skipped lines. */
  readonly log?: FleetLog;
  /** Called after each acknowledged batch (tests and the status of a live forwarder). */
  readonly onSent?: (sent: SentBatch) => void;
}

/** One acknowledged batch. */
export interface SentBatch {
  /** `site` or `run`. */
  readonly stream: "site" | "run";
  /** The run's id, `""` for the site stream. */
  readonly runId: string;
  /** Lines in the batch. */
  readonly count: number;
  /** The seq of its last line: the cursor's seq now. */
  readonly lastSeq: number;
}

/** What a forwarder did, returned when it stops. */
export interface ForwardStats {
  /** Lines acknowledged by the destination. */
  sent: number;
  /** Lines that are not stored events (damaged by hand), passed over with a warning. */
  skipped: number;
}

/** The kinds of destination, from the URL's scheme. */
export type DestinationKind = "nats" | "postgres";

/**
 * The kind of destination a `--to` URL names, or a message saying what to write instead.
 *
 * @example
 * ```ts ignore
 * destinationKind("nats://127.0.0.1:4222"); // "nats"
 * ```
 */
export function destinationKind(to: string): DestinationKind | string {
  let url: URL;
  try {
    url = new URL(to);
  } catch {
    return `--to ${
      JSON.stringify(redact(to))
    } is not a URL; use nats://host:port or postgres://user@host:port/db`;
  }
  if (url.protocol === "nats:") return "nats";
  if (url.protocol === "postgres:" || url.protocol === "postgresql:") return "postgres";
  return `--to must be nats://host:port or postgres://user@host:port/db, not ${url.protocol}//`;
}

/**
 * Checks forwarding options before anything connects; the message names the flag to change.
 *
 * @example
 * ```ts
 * import { checkForwardOptions } from "./forward_options.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(checkForwardOptions({ siteDir: "t", to: "nats://hub:4222", unit: "pan012" }), undefined);
 * assert.match(checkForwardOptions({ siteDir: "t", to: "nats://hub:4222", unit: "a b" })!, /^--unit/);
 * ```
 */
export function checkForwardOptions(options: ForwardOptions): string | undefined {
  const kind = destinationKind(options.to);
  if (kind !== "nats" && kind !== "postgres") return kind;
  const unit = checkUnit(options.unit);
  if (unit) return `--unit: ${unit}`;
  if (options.subjectPrefix !== undefined) {
    const problem = checkSubjectPrefix(options.subjectPrefix);
    if (problem) return `--subject-prefix: ${problem}`;
  }
  if (options.natsStream !== undefined) {
    const problem = checkNatsName(options.natsStream, "stream");
    if (problem) return `--nats-stream: ${problem}`;
  }
  if (options.batch !== undefined && !(Number.isSafeInteger(options.batch) && options.batch > 0)) {
    return `--batch must be a positive integer, not ${options.batch}`;
  }
  return undefined;
}

/**
 * The fleet sink of checked options: JetStream or PostgreSQL, by the `--to` URL's scheme.
 *
 * @example
 * ```ts ignore
 * const sink = await sinkConnector({ siteDir: "t", to: "nats://hub:4222", unit: "pan012" }).connect();
 * ```
 */
export function sinkConnector(options: ForwardOptions): FleetSinkConnector<ForwardItem> {
  if (destinationKind(options.to) === "nats") {
    return natsConnector({
      url: new URL(options.to),
      ...(options.natsStream ? { stream: options.natsStream } : {}),
      ...(options.subjectPrefix ? { subjectPrefix: options.subjectPrefix } : {}),
      name: `obs-telemetry-forward-${options.unit}`,
    }, options.unit);
  }
  return postgresItemConnector(options.to, options.unit);
}
