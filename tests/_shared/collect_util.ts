/**
 * What the collect tests share: a collector run in this process against a real service, real
 * local HTTP servers, and waiting for conditions.
 *
 * @module
 */

import { TelemetryClient } from "../../client.ts";
import { Collector } from "../../collect/collector.ts";
import { parseCollectConfig } from "../../collect/config.ts";
import { INPUT_KINDS } from "../../collect/inputs/mod.ts";
import type { InputKind } from "../../collect/inputs/input.ts";
import { Outbox } from "../../collect/outbox.ts";
import { readSiteLines } from "./util.ts";
import { waitUntil } from "./fleet_util.ts";
export { waitUntil };

/** A log line a collector wrote. */
export interface LogLine {
  level: string;
  message: string;
}

/** A collector running in this process. */
export interface RunningCollector extends AsyncDisposable {
  /** Its log, as written. */
  readonly log: LogLine[];
  /** Its queue to the service. */
  readonly outbox: Outbox;
  /** Stops it (posting what it holds) and returns the events left unposted. */
  stop(): Promise<number>;
}

/**
 * Starts a collector for `inputs` posting to `baseUrl`.
 *
 * @param inputs The config's inputs.
 * @param baseUrl The service.
 * @param capacity The queue's bound.
 * @param kinds Input kinds besides the shipped ones (a test's own push kind).
 */
export function startCollector(
  inputs: unknown[],
  baseUrl: string,
  capacity?: number,
  // deno-lint-ignore no-explicit-any
  kinds: readonly InputKind<any>[] = [],
): RunningCollector {
  const config = parseCollectConfig(JSON.stringify({ inputs }), "test.json", [
    ...INPUT_KINDS,
    ...kinds,
  ]);
  const log: LogLine[] = [];
  const collector = new Collector({
    config,
    log: (level, message) => log.push({ level, message }),
  });
  const outbox = new Outbox(
    new TelemetryClient({ baseUrl, timeoutMs: 2000 }),
    (level, message) => log.push({ level, message }),
    capacity,
  );
  const stop = new AbortController();
  const running = collector.run(outbox, stop.signal);
  const halt = async () => {
    stop.abort();
    return await running;
  };
  return { log, outbox, stop: halt, [Symbol.asyncDispose]: async () => void await halt() };
}

/** A local HTTP server on 127.0.0.1, port 0, answering with `handler`. */
export interface LocalServer extends AsyncDisposable {
  /** Its base URL. */
  readonly url: string;
  /** Requests answered so far. */
  readonly requests: () => number;
}

/** Starts a local HTTP server. */
export function localServer(handler: (req: Request) => Response | Promise<Response>): LocalServer {
  let count = 0;
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
    count++;
    return handler(req);
  });
  return {
    url: `http://127.0.0.1:${server.addr.port}`,
    requests: () => count,
    [Symbol.asyncDispose]: async () => await server.shutdown(),
  };
}

/** The stored events of a site directory (its site files), parsed. */
export async function storedEvents(
  siteDir: string,
): Promise<{ type: string; ts: string; data: Record<string, unknown> }[]> {
  return (await readSiteLines(siteDir)).map((l) => JSON.parse(l));
}

/** The lines of a log that mention `text`. */
export function linesWith(log: readonly LogLine[], text: string | RegExp): LogLine[] {
  return log.filter((l) =>
    typeof text === "string" ? l.message.includes(text) : text.test(l.message)
  );
}

/** Runs an outbox until it holds nothing (or `timeoutMs` passes), then stops it. */
export async function runUntilDrained(outbox: Outbox, timeoutMs: number): Promise<void> {
  const stop = new AbortController();
  const sending = outbox.run(stop.signal);
  try {
    await waitUntil(() => outbox.size === 0, timeoutMs, "drained");
  } finally {
    stop.abort();
    await sending;
  }
}
