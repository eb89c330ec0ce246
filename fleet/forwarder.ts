/**
 * The forwarder (docs/fleet.md): sends every stored line of the site stream and of every run,
 * oldest first, to NATS JetStream or PostgreSQL, then follows new lines as the service writes
 * them. The NDJSON files are the write-ahead log; a cursor `(file, byte offset, last seq)` per
 * stream moves only after the destination acknowledged (PubAck, or commit), so a kill at any
 * moment resends at most the batch in flight, which the idempotency key turns into exactly once.
 *
 * Reads through `_site_files.ts` (plain and `.gz`, offsets in uncompressed bytes), so rotation and
 * compression under a cursor change nothing. Needs read permission on the site directory (and on
 * run directories placed elsewhere), write permission on `<site_dir>/.forward/`, and net access
 * to the destination only.
 *
 * @module
 */
import { isAbsolute, join, resolve } from "node:path";
import { sleep } from "../wire/async.ts";
import { checkUnit, type ForwardItem, storedSeq, type StreamKind, toRow } from "./item.ts";
import { Backoff, type FleetLog, PeerState } from "./retry.ts";
import {
  cursorPath,
  emptyCursor,
  type ForwardCursor,
  readCursor,
  type StreamPosition,
  writeCursor,
} from "./cursor.ts";
import { ACTIVE_RUN_FILE, FORWARD_DIR } from "../store/layout.ts";
import { readRunLog } from "../store/run_log.ts";
import { RUN_ID_PATTERN } from "../core/commands.ts";
import {
  listRunFiles,
  listSiteFiles,
  OffsetMismatchError,
  plainName,
  readLines,
  type StoredFile,
} from "../store/site_files.ts";
import { checkNatsName, checkSubjectPrefix, NatsSink } from "./sinks/nats.ts";
import { PostgresSink, TableShapeError } from "./sinks/postgres.ts";
import { redact } from "./archive.ts";

/**
 * A batch also ends at this many characters of lines: `--batch` lines of a megabyte each would
 * hold a gigabyte in memory (and in one transaction) on a small unit.
 */
const MAX_BATCH_CHARS = 8 * 1024 * 1024;

/** The longest the cursor file lags the acknowledged position while lines keep coming. */
const CURSOR_SAVE_MS = 1000;

/** Options of {@linkcode forward}. */
export interface ForwardOptions {
  /** The service's site directory. */
  readonly siteDir: string;
  /** `nats://host:port` or `postgres://user@host:port/db`. */
  readonly to: string;
  /** This observatory's name in the fleet (`OBS_TELEMETRY_UNIT`). */
  readonly unit: string;
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

/** A destination: sends a batch and resolves once it is durable there. */
interface Destination {
  /** Rejects when `signal` aborts before the batch is acknowledged. */
  send(items: ForwardItem[], signal?: AbortSignal): Promise<void>;
  /** Why the destination can never take this item (too large), or `undefined`. */
  refuses(item: ForwardItem): string | undefined;
  close(): Promise<void>;
}

/** An item for a log line: `site event 12` or `run event 3 of run night-1`. */
function describe(item: ForwardItem): string {
  return `${item.stream} event ${item.seq}${item.runId ? ` of run ${item.runId}` : ""}`;
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
 * import { checkForwardOptions } from "./forwarder.ts";
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

async function openDestination(
  options: ForwardOptions,
  rejected: (item: ForwardItem, reason: string) => void,
): Promise<Destination> {
  if (destinationKind(options.to) === "nats") {
    const sink = await NatsSink.open({
      url: new URL(options.to),
      ...(options.natsStream ? { stream: options.natsStream } : {}),
      ...(options.subjectPrefix ? { subjectPrefix: options.subjectPrefix } : {}),
      name: `obs-telemetry-forward-${options.unit}`,
    }, options.unit);
    return {
      send: (items, signal) => sink.send(items, signal),
      refuses: (item) => {
        const size = sink.oversize(item);
        return size === undefined ? undefined : `its message of ${size} bytes is larger than ` +
          `the NATS server's max_payload (${sink.maxPayload} bytes); raise max_payload to send such lines`;
      },
      close: () => sink.close(),
    };
  }
  const sink = await PostgresSink.open(options.to);
  return {
    send: async (items) => {
      await sink.insert(
        items.map((item) => toRow(options.unit, item)),
        (_row, i, reason) => rejected(items[i]!, reason),
      );
    },
    refuses: () => undefined,
    close: () => sink.close(),
  };
}

/** A stream to forward: the site stream, or one run. */
interface Source {
  readonly stream: StreamKind;
  readonly runId: string;
  readonly runDir: string;
  /** A stopped run: once read to its end, it holds nothing more. */
  readonly stopped: boolean;
  /** Which start of the run this is (directory and start time): a run id may be started again. */
  readonly generation: string;
  files(): Promise<StoredFile[]>;
}

/** Where a run is stored, and whether it has stopped (its file grows no more). */
export interface RunDir {
  readonly dir: string;
  readonly stopped: boolean;
  /** When this start of the run began (`started_at`), when the service recorded it. */
  readonly startedAt?: string;
}

/**
 * Every run recorded in the site directory, by id: the run log (`_run_log.ts`: the latest line
 * per run wins, a damaged line is skipped), the active run, and directories of the site directory
 * holding a run stream file (runs recorded before the log existed).
 */
export async function listRunDirs(siteDir: string): Promise<Map<string, RunDir>> {
  const runs = new Map<string, RunDir>();
  const absolute = (dir: string) => isAbsolute(dir) ? dir : resolve(siteDir, dir);
  for (const record of (await readRunLog(siteDir)).runs) {
    runs.set(record.run_id, {
      dir: absolute(record.run_dir),
      stopped: record.stopped_at !== null,
      startedAt: record.started_at,
    });
  }
  try {
    const active = JSON.parse(await Deno.readTextFile(join(siteDir, ACTIVE_RUN_FILE)));
    if (typeof active?.run_id === "string" && typeof active.run_dir === "string") {
      runs.set(active.run_id, {
        dir: absolute(active.run_dir),
        stopped: false,
        ...(typeof active.started_at === "string" ? { startedAt: active.started_at } : {}),
      });
    }
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound) && !(err instanceof SyntaxError)) throw err;
  }
  // A directory that a recorded run is stored in is that run, whatever its name (a run id may
  // be started again in a directory named otherwise): never the same lines under a second id.
  const known = new Set([...runs.values()].map((r) => r.dir));
  for await (const entry of Deno.readDir(siteDir)) {
    // Links are not followed out of the site directory; dot-directories are the service's own.
    if (!entry.isDirectory || entry.name.startsWith(".") || runs.has(entry.name)) continue;
    if (known.has(resolve(siteDir, entry.name))) continue;
    if ((await listRunFiles(join(siteDir, entry.name))).length > 0) {
      runs.set(entry.name, { dir: join(siteDir, entry.name), stopped: false });
    }
  }
  return runs;
}

async function sources(siteDir: string): Promise<Source[]> {
  const out: Source[] = [{
    stream: "site",
    runId: "",
    runDir: siteDir,
    stopped: false,
    generation: "",
    files: () => listSiteFiles(siteDir),
  }];
  const runs = [...(await listRunDirs(siteDir)).entries()].sort(([a], [b]) => a.localeCompare(b));
  for (const [runId, { dir, stopped, startedAt }] of runs) {
    out.push({
      stream: "run",
      runId,
      runDir: dir,
      stopped,
      generation: `${dir}\n${startedAt ?? ""}`,
      files: () => listRunFiles(dir),
    });
  }
  return out;
}

function positionOf(cursor: ForwardCursor, source: Source): StreamPosition | null {
  if (source.stream === "site") return cursor.site;
  // Own properties only: a run named "constructor" or "toString" is no Object.prototype member.
  return Object.hasOwn(cursor.runs, source.runId) ? cursor.runs[source.runId]! : null;
}

function setPosition(cursor: ForwardCursor, source: Source, at: StreamPosition): void {
  if (source.stream === "site") cursor.site = at;
  else cursor.runs[source.runId] = { run_dir: source.runDir, ...at };
}

/**
 * The files still to read and where to start in the first: after the cursor's file and offset.
 * A cursor whose file is gone (deleted by hand) restarts at the first later night; the
 * idempotency key makes a resend harmless.
 */
function remaining(
  files: StoredFile[],
  at: StreamPosition | null,
): { files: StoredFile[]; offset: number } {
  if (at === null) return { files, offset: 0 };
  const i = files.findIndex((f) => plainName(f.name) === at.file);
  if (i >= 0) return { files: files.slice(i), offset: at.offset };
  const later = files.filter((f) => plainName(f.name) > at.file);
  return { files: later, offset: 0 };
}

/**
 * Runs a forwarder until `signal` aborts: sends what is stored, then follows the files. The
 * destination being down is retried with capped back-off (at most 30 s), one log line per change
 * of state; nothing is lost, and catching up afterwards runs at full speed.
 *
 * @example
 * ```ts ignore
 * const stop = new AbortController();
 * Deno.addSignalListener("SIGTERM", () => stop.abort());
 * await forward({ siteDir: "./telemetry", to: "nats://hub:4222", unit: "pan012", signal: stop.signal });
 * ```
 */
export async function forward(options: ForwardOptions): Promise<ForwardStats> {
  const problem = checkForwardOptions(options);
  if (problem) throw new RangeError(problem);
  const log: FleetLog = options.log ?? (() => {});
  const name = options.name ?? (destinationKind(options.to) as DestinationKind);
  const lock = await lockCursor(options.siteDir, name);
  try {
    const cursor = await readOrSetAside(options.siteDir, name, log);
    return await run(options, name, cursor, log);
  } finally {
    lock.close();
  }
}

/**
 * Takes `<site_dir>/.forward/<name>.lock` (an advisory lock the kernel drops when the process
 * ends, however it ends): two forwarders with one name would race on one cursor.
 */
async function lockCursor(siteDir: string, name: string): Promise<Deno.FsFile> {
  const path = cursorPath(siteDir, name).replace(/\.json$/, ".lock");
  // The site directory is the service's to create; only .forward/ is the forwarder's.
  await Deno.stat(siteDir);
  await Deno.mkdir(join(siteDir, FORWARD_DIR), { recursive: true });
  const file = await Deno.open(path, { read: true, write: true, create: true });
  let locked = false;
  try {
    locked = await file.tryLock(true);
  } finally {
    if (!locked) file.close();
  }
  if (!locked) {
    throw new Error(
      `another forwarder named "${name}" is running on this site directory (${path} is locked); ` +
        `stop it first, or give this one another --name`,
    );
  }
  return file;
}

/**
 * The cursor, or a new one when there is none. A cursor that cannot be read (cut short, edited
 * by hand) is renamed aside and forwarding starts again from the start, with a warning: the
 * idempotency keys make the resend harmless, while refusing to start would stop the site's
 * forwarding until someone looked.
 */
async function readOrSetAside(
  siteDir: string,
  name: string,
  log: FleetLog,
): Promise<ForwardCursor> {
  try {
    return (await readCursor(siteDir, name)) ?? emptyCursor();
  } catch (err) {
    if (!(err instanceof SyntaxError)) throw err;
    const path = cursorPath(siteDir, name);
    const aside = `${path}.damaged-${new Date().toISOString().replaceAll(":", "")}`;
    await Deno.rename(path, aside);
    log(
      "warn",
      `${err.message}; kept as ${aside}, forwarding every stream again from the start ` +
        `(the destination drops what it already holds by its key)`,
    );
    return emptyCursor();
  }
}

async function run(
  options: ForwardOptions,
  name: string,
  cursor: ForwardCursor,
  log: FleetLog,
): Promise<ForwardStats> {
  const batchSize = options.batch ?? 1000;
  const pollMs = options.pollMs ?? 100;
  const stats: ForwardStats = { sent: 0, skipped: 0 };
  const peer = new PeerState(`destination ${redact(options.to)}`, log);
  const backoff = new Backoff();
  let destination: Destination | undefined;

  // The cursor on disk may lag the acknowledged position by up to CURSOR_SAVE_MS: after a crash
  // that second is sent again and dropped by the key (JetStream's window is 2 minutes), while a
  // busy forwarder writes (and fsyncs) its cursor once a second instead of once per batch.
  let dirty = false;
  let savedAt = 0;
  const save = async () => {
    await writeCursor(options.siteDir, name, cursor);
    dirty = false;
    savedAt = Date.now();
  };

  /** Sends one batch and records the position after it; throws when the destination failed. */
  const sendBatch = async (source: Source, items: ForwardItem[], at: StreamPosition) => {
    if (items.length > 0) {
      destination ??= await openDestination(options, (item, why) => {
        stats.skipped++;
        log("warn", `skipping ${describe(item)}: ${why}`);
      });
      const open = destination;
      const refused = items.filter((item) => {
        const why = open.refuses(item);
        if (why === undefined) return false;
        stats.skipped++;
        log("warn", `skipping ${describe(item)}: ${why}`);
        return true;
      });
      if (refused.length > 0) items = items.filter((item) => !refused.includes(item));
    }
    if (items.length > 0) {
      const skippedBefore = stats.skipped;
      await destination!.send(items, options.signal);
      stats.sent += items.length - (stats.skipped - skippedBefore); // less rows PostgreSQL refused
      options.onSent?.({
        stream: source.stream,
        runId: source.runId,
        count: items.length,
        lastSeq: at.seq,
      });
    }
    setPosition(cursor, source, at);
    dirty = true;
    if (Date.now() - savedAt >= CURSOR_SAVE_MS) await save();
  };

  // Warnings given once per stream: the cursor's file gone, the stream's seq starting over.
  const warned = new Set<string>();
  const warnOnce = (key: string, message: string) => {
    if (warned.has(key)) return;
    warned.add(key);
    log("warn", message);
  };
  /**
   * Forwards what one source holds after its cursor: how many lines it sent, and whether it
   * read to the end of its last file.
   */
  const pump = async (source: Source): Promise<{ sent: number; complete: boolean }> => {
    let start = positionOf(cursor, source);
    const what = source.stream === "site" ? "the site stream" : `run ${source.runId}`;
    const before = start === null ? undefined : cursor.runs[source.runId]?.run_dir;
    if (start !== null && source.stream === "run" && before !== source.runDir) {
      // The run id was started again in another directory: its cursor belongs to the old one.
      // Read the new file from its start; seqs not above the old ones are reported below.
      warnOnce(
        `${source.runId}\nmoved\n${source.runDir}`,
        `${what} is now stored in ${source.runDir} (the cursor was in ${before}); forwarding ` +
          `that directory from its start`,
      );
      start = { file: start.file, offset: 0, seq: start.seq };
    }
    const stored = await source.files();
    const { files, offset } = remaining(stored, start);
    if (
      start !== null && files.length === 0 && stored.length > 0 &&
      !stored.some((f) => plainName(f.name) === start.file)
    ) {
      // Gone (retention deletes a passed file, but always leaves a later one): a cursor copied
      // from elsewhere or a night deleted by hand. Nothing of this stream is sent until a file
      // sorts after it; say so instead of sending nothing in silence.
      warnOnce(
        `${source.stream}\n${source.runId}\ngone\n${start.file}`,
        `the cursor's file ${start.file} of ${what} is gone and every stored file sorts before ` +
          `it: nothing of ${what} is sent until a later one appears (remove ${
            source.stream === "site" ? "its site" : "this run's"
          } ` +
          `entry from the cursor to send them all again)`,
      );
    }
    let sent = 0;
    let lastSeq = start?.seq ?? 0;
    for (let f = 0; f < files.length && !options.signal?.aborted; f++) {
      const file = files[f]!;
      const fileName = plainName(file.name);
      let from = f === 0 ? offset : 0;
      let items: ForwardItem[] = [];
      let chars = 0;
      let end = from;
      const flush = async () => {
        await sendBatch(source, items, { file: fileName, offset: end, seq: lastSeq });
        sent += items.length;
        items = [];
        chars = 0;
      };
      try {
        for await (const lines of readLines(file, { offset: from })) {
          for (const line of lines) {
            const seq = storedSeq(line.text);
            end = line.end;
            if (typeof seq === "string") {
              stats.skipped++;
              log(
                "warn",
                `skipping a line of ${file.path} ending at byte ${line.end}: not a stored event (${seq})`,
              );
              continue;
            }
            if (seq <= lastSeq) {
              // The stream started over (a site directory replaced, a run directory reused from
              // a backup): these keys were sent before, and the destination drops the events.
              warnOnce(
                `${source.stream}\n${source.runId}\nseq\n${lastSeq}`,
                `the seq of ${what} went back from ${lastSeq} to ${seq} in ${file.path}: the ` +
                  `destination already holds these keys and drops these events as repeats; a ` +
                  `stream that started over needs another --unit to be kept`,
              );
            }
            lastSeq = seq;
            items.push({ stream: source.stream, runId: source.runId, seq, line: line.text });
            chars += line.text.length;
            if (items.length >= batchSize || chars >= MAX_BATCH_CHARS) {
              await flush();
              // Stopping: the batch in flight was acknowledged and its cursor saved.
              if (options.signal?.aborted) return { sent, complete: false };
            }
          }
          if (options.signal?.aborted) return { sent, complete: false };
        }
      } catch (err) {
        // Renamed away by a compression between the listing and the open: the next pass finds
        // its other form under the same cursor.
        if (err instanceof Deno.errors.NotFound) return { sent, complete: false };
        if (!(err instanceof OffsetMismatchError)) throw err;
        // The file was truncated or replaced under the cursor: send it again from its start.
        log("warn", `${err.message}; forwarding it again from its start (duplicates are dropped)`);
        from = 0;
        setPosition(cursor, source, { file: fileName, offset: 0, seq: 0 });
        await writeCursor(options.siteDir, name, cursor);
        return { sent, complete: false };
      }
      if (items.length > 0 || end !== from || f > 0) await flush();
    }
    return { sent, complete: !options.signal?.aborted };
  };

  // Stopped runs read to their end in this process, by id, with the start they belong to: nothing
  // more can appear in them until the run id is started again (between two polls, or while the
  // destination was down), which the run log shows as a new start.
  const finished = new Map<string, string>();
  // Runs passed over (a run id that is none, a directory this process may not read), warned once
  // per run and reason: one bad run must not stop the site stream and every other run.
  const passedOver = new Set<string>();
  const passOver = (source: Source, why: string) => {
    const key = `${source.runId}\n${why}`;
    if (passedOver.has(key)) return;
    passedOver.add(key);
    log("warn", `not forwarding run ${JSON.stringify(source.runId)}: ${why}`);
  };
  try {
    while (!options.signal?.aborted) {
      let sent = 0;
      try {
        for (const source of await sources(options.siteDir)) {
          if (options.signal?.aborted) break;
          if (source.stream === "run" && finished.get(source.runId) === source.generation) {
            if (source.stopped) continue;
            finished.delete(source.runId);
          }
          if (source.stream === "run" && !RUN_ID_PATTERN.test(source.runId)) {
            // Only a hand-edited run log holds one; in a NATS header it could forge others.
            passOver(
              source,
              `the run log names it, but it is no run id (${RUN_ID_PATTERN.source})`,
            );
            continue;
          }
          let pumped: { sent: number; complete: boolean };
          try {
            pumped = await pump(source);
          } catch (err) {
            const denied = err instanceof Deno.errors.NotCapable ||
              err instanceof Deno.errors.PermissionDenied;
            if (source.stream !== "run" || !denied) throw err;
            passOver(
              source,
              `cannot read its directory ${source.runDir} (${(err as Error).message}); ` +
                `grant read access to it (spawnForwarder()'s runRoots) to forward it`,
            );
            continue;
          }
          sent += pumped.sent;
          if (source.stopped && pumped.complete) finished.set(source.runId, source.generation);
        }
        peer.ok();
        backoff.reset();
      } catch (err) {
        if (options.signal?.aborted) break; // stopping: the batch in flight was not acknowledged
        if (isLocalFault(err)) throw err;
        peer.failed(err, "retrying; nothing is lost, the files are the buffer");
        await destination?.close().catch(() => {});
        destination = undefined;
        await backoff.wait(options.signal);
        continue;
      }
      if (sent === 0) {
        if (dirty) await save(); // caught up: the cursor on disk is exact while idle
        await sleep(pollMs, options.signal);
      }
    }
    if (dirty) await save();
  } finally {
    await destination?.close().catch(() => {});
  }
  return stats;
}

/**
 * Errors of this machine (permissions, a missing site directory), and a destination table of
 * another shape: retrying cannot mend them, so the forwarder stops with the message.
 */
function isLocalFault(err: unknown): boolean {
  return err instanceof Deno.errors.NotCapable || err instanceof Deno.errors.PermissionDenied ||
    err instanceof Deno.errors.NotFound || err instanceof TableShapeError;
}
