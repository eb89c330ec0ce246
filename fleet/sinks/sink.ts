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
   * Whether an error of {@linkcode FleetSinkConnector.connect} or {@linkcode FleetSink.send} is
   * one no retry can mend (a table of another shape): the process stops with its message
   * instead of reporting the destination unavailable forever.
   */
  isPermanent(err: unknown): boolean;
}
