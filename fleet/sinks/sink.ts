/**
 * What a fleet destination must do (docs/fleet.md): connect, take a batch and resolve only once it
 * is durable there (a PubAck, a commit), close, and tell a fault that retrying can mend from one
 * it cannot. The forwarder and the archiver hold a {@linkcode FleetSinkConnector} and nothing more
 * of the destination; each implementation is one file beside this one (`nats.ts`, `postgres.ts`).
 *
 * A fleet sink is a destination of forwarded events, unrelated to the migrator's output buffers
 * that `migrate/` also calls sinks.
 *
 * @example A sink that keeps batches in memory
 * ```ts
 * import type { FleetSink, FleetSinkConnector } from "./sink.ts";
 * import assert from "node:assert/strict";
 *
 * const stored: string[] = [];
 * const memory: FleetSinkConnector<string> = {
 *   connect: () =>
 *     Promise.resolve({
 *       refuses: (line) => line.length > 10 ? "longer than 10 characters" : undefined,
 *       send: (batch) => {
 *         stored.push(...batch);
 *         return Promise.resolve(batch.length);
 *       },
 *       close: () => Promise.resolve(),
 *     } satisfies FleetSink<string>),
 *   claimUnit: (unit, siteId) => Promise.resolve({ unit, siteId, outcome: "claimed" }),
 *   isPermanent: () => false,
 * };
 * const sink = await memory.connect();
 * assert.equal(await sink.send(["a", "b"]), 2);
 * assert.equal(sink.refuses("far too long a line"), "longer than 10 characters");
 * await sink.close();
 * assert.deepEqual(stored, ["a", "b"]);
 * ```
 *
 * @module
 */

/** How one batch is sent. */
export interface FleetSendOptions {
  /**
   * Stops waiting for the destination's acknowledgement: `send` then rejects, unless the batch
   * was acknowledged meanwhile, and the batch counts as not sent.
   */
  readonly signal?: AbortSignal | undefined;
  /**
   * Takes a record the destination refused for its value (no retry could store it); the batch's
   * other records are stored. Without it, such a refusal fails the whole batch.
   *
   * @param index The record's place in the batch.
   * @param reason Why the destination refused it, for a log line.
   */
  readonly onRejected?: (index: number, reason: string) => void;
}

/**
 * A connected fleet destination taking batches of `T` (stored lines, or rows).
 *
 * @typeParam T One record of a batch.
 */
export interface FleetSink<T> {
  /**
   * Why the destination can never take `record` (larger than it accepts), or `undefined`: such a
   * record is passed over before sending, since retrying it would stop the stream behind it.
   */
  refuses(record: T): string | undefined;
  /**
   * Sends a batch and resolves once the destination holds it durably; a batch sent twice is
   * stored once (the idempotency key of docs/fleet.md).
   *
   * @returns How many records were new at the destination (the others it held already).
   * @throws when the batch is not acknowledged: the caller sends it again later.
   */
  send(batch: readonly T[], options?: FleetSendOptions): Promise<number>;
  /**
   * Closes the connection.
   *
   * @param timeoutS How long to wait for what is in flight; default: the destination's own.
   */
  close(timeoutS?: number): Promise<void>;
}

/**
 * How a fleet sink is reached, and how its faults are told apart: the forwarder and the archiver
 * connect again through it after every failure.
 *
 * @typeParam T One record of a batch.
 */
export interface FleetSinkConnector<T> {
  /** Connects and prepares the destination (a stream, a table) when it is missing. */
  connect(): Promise<FleetSink<T>>;
  /**
   * Claims `unit` for the site `siteId` at the destination (docs/fleet.md, "Units"): the first
   * site to claim a unit holds it, and the forwarder of any other site is refused, so the keys
   * `<unit>/...` are one site's. Connects for the claim alone and closes again.
   *
   * @param unit The forwarder's `--unit`.
   * @param siteId The `site_id` of the site directory's `.site.json`.
   * @param options `reclaim: true` takes the unit over from the site holding it.
   * @returns How the unit came to be this site's.
   * @throws {UnitHeldError} when another site holds the unit and `reclaim` is not set; any other
   * error is the destination's (retry later).
   */
  claimUnit(unit: string, siteId: string, options?: UnitClaimOptions): Promise<UnitClaim>;
  /**
   * Whether an error of {@linkcode FleetSinkConnector.connect} or {@linkcode FleetSink.send} is
   * one no retry can mend (a table of another shape): the process stops with its message
   * instead of reporting the destination unavailable forever.
   */
  isPermanent(err: unknown): boolean;
}

/** Options of {@linkcode FleetSinkConnector.claimUnit}. */
export interface UnitClaimOptions {
  /**
   * Takes the unit over from the site holding it (`forward --reclaim-unit`): for a site moved to
   * a new disk, whose service made a new `site_id`.
   */
  readonly reclaim?: boolean;
}

/** A unit claimed for a site: how it came to be that site's. */
export interface UnitClaim {
  /** The unit. */
  readonly unit: string;
  /** The site holding it now. */
  readonly siteId: string;
  /**
   * `claimed`: no site held it before; `kept`: this site held it already (a restart);
   * `reclaimed`: taken over from {@linkcode UnitClaim.previousSiteId}.
   */
  readonly outcome: "claimed" | "kept" | "reclaimed";
  /** With `reclaimed`: the site that held the unit before. */
  readonly previousSiteId?: string;
}

/**
 * The unit is held by another site (docs/fleet.md, "Units"): the forwarder stops with this one
 * line, since sending would mix two sites' events under one unit, or drop this site's as
 * duplicates of the other's.
 *
 * @example
 * ```ts
 * import { UnitHeldError } from "./sink.ts";
 * import assert from "node:assert/strict";
 *
 * const err = new UnitHeldError("pan012", "site-a", "site-b");
 * assert.match(err.message, /held by site site-a/);
 * ```
 */
export class UnitHeldError extends Error {
  /** The unit. */
  readonly unit: string;
  /** The site holding it. */
  readonly holder: string;
  /** The site that asked for it. */
  readonly siteId: string;

  /**
   * Creates the error.
   *
   * @param unit The unit.
   * @param holder The `site_id` holding it.
   * @param siteId The `site_id` of this forwarder's site directory.
   */
  constructor(unit: string, holder: string, siteId: string) {
    super(
      `unit ${unit} is held by site ${holder}, and this site directory is site ${siteId}: ` +
        `forward it under another --unit, or, if it replaces site ${holder} (moved to a new ` +
        `disk), take the unit over with forward --reclaim-unit`,
    );
    this.name = "UnitHeldError";
    this.unit = unit;
    this.holder = holder;
    this.siteId = siteId;
  }
}
