/**
 * The implementation behind the `forward.ts` entry point; its module documentation is there.
 *
 * @module
 */
import { join, resolve } from "node:path";
import { destinationKind } from "./forward_options.ts";
import { FORWARD_DIR } from "../store/layout.ts";
import { spawnDeno } from "../process/spawn.ts";

export { forward } from "./forwarder.ts";
export {
  checkForwardOptions,
  type DestinationKind,
  type ForwardOptions,
  type ForwardStats,
  type SentBatch,
} from "./forward_options.ts";
export { archive, type ArchiveOptions, type ArchiveStats } from "./archive.ts";
export { forwardStatus, type StreamLag } from "./status.ts";
export type { DamagedFile } from "../store/forward_cursor.ts";
export type { FleetLog } from "./retry.ts";
export { EVENTS_TABLE, UNITS_TABLE } from "./sinks/postgres.ts";
export { UNITS_BUCKET } from "./sinks/nats.ts";
export { UnitHeldError } from "./sinks/sink.ts";
export { SiteIdentityMissingError } from "./unit_claim.ts";
export {
  DEFAULT_DURABLE,
  DEFAULT_NATS_STREAM,
  DEFAULT_SUBJECT_PREFIX,
  HEADER_RUN_ID,
  HEADER_STREAM,
  HEADER_UNIT,
} from "./item.ts";

/**
 * Environment variables the forwarder may read: its own, and the libpq variables the
 * PostgreSQL client honours (`PGPASSWORD` keeps a password out of `--to`, where `ps` shows it).
 */
export const FORWARD_ENV_VARS: readonly string[] = [
  "OBS_TELEMETRY_UNIT",
  "OBS_TELEMETRY_SITE_DIR",
  "PGHOST",
  "PGPORT",
  "PGUSER",
  "PGUSERNAME",
  "PGPASSWORD",
  "PGDATABASE",
  "PGAPPNAME",
  "PGTARGETSESSIONATTRS",
  "USER",
  "USERNAME",
  "LOGNAME",
];

/**
 * The Deno permission flags of a forwarder (docs/fleet.md): read the site directory (and run
 * roots placed elsewhere), write `<site_dir>/.forward/` only, net to the destination only.
 *
 * @example
 * ```ts
 * import { forwarderPermissionFlags } from "./forward.ts";
 * import assert from "node:assert/strict";
 *
 * const flags = forwarderPermissionFlags({ siteDir: "/srv/telemetry", to: "nats://hub:4222" });
 * assert.ok(flags.includes("--allow-net=hub:4222"));
 * assert.ok(flags.includes("--allow-write=/srv/telemetry/.forward"));
 * ```
 */
export function forwarderPermissionFlags(
  options: { siteDir: string; to: string; runRoots?: readonly string[] },
): string[] {
  const kind = destinationKind(options.to);
  if (kind !== "nats" && kind !== "postgres") throw new RangeError(kind);
  const url = new URL(options.to);
  const port = url.port || (kind === "nats" ? "4222" : "5432");
  const siteDir = resolve(options.siteDir);
  const read = [siteDir, ...(options.runRoots ?? []).map((r) => resolve(r))].join(",");
  return [
    `--allow-net=${url.hostname}:${port}`,
    `--allow-read=${read}`,
    `--allow-write=${join(siteDir, FORWARD_DIR)}`,
    `--allow-env=${FORWARD_ENV_VARS.join(",")}`,
  ];
}

/** Options of {@linkcode spawnForwarder}. */
export interface SpawnForwarderOptions {
  /** The service's site directory. */
  siteDir: string;
  /** `nats://host:port` or `postgres://user@host:port/db`. */
  to: string;
  /** This observatory's name in the fleet. */
  unit: string;
  /** Cursor name; default from the URL's scheme. */
  name?: string;
  /** NATS subject prefix. */
  subjectPrefix?: string;
  /** JetStream stream. */
  natsStream?: string;
  /** Lines per send. */
  batch?: number;
  /**
   * Takes the unit over from the site holding it (`--reclaim-unit`, docs/fleet.md "Units"): for
   * one start after moving a site to a new disk, not for a command line kept in a service manager.
   */
  reclaimUnit?: boolean;
  /** Run directories placed outside the site directory (the service's `--allow-run-root`). */
  runRoots?: readonly string[];
  /**
   * Where the child's output goes.
   * @default {"inherit"}
   */
  output?: "inherit" | "null" | "piped";
  /**
   * CPU niceness of the forwarder (`nice -n`): it yields the processor to the service, so a
   * burst of ingestion is never slowed by a catch-up; the files buffer what waits. 0 runs it at
   * the service's priority.
   * @default {10}
   */
  nice?: number;
}

/** A forwarder running as its own process. */
export interface SpawnedForwarder extends AsyncDisposable {
  /** The child process. */
  readonly process: Deno.ChildProcess;
  /** Its process id. */
  readonly pid: number;
  /** Asks it to stop (SIGTERM: it ends after the batch in flight) and waits for it. */
  stop(): Promise<Deno.CommandStatus>;
}

/**
 * The `deno` arguments that run a forwarder under its scoped permissions (what
 * {@linkcode spawnForwarder} runs; also the command line to put in a service manager).
 *
 * @example
 * ```ts
 * import { forwarderArgs } from "./forward.ts";
 * import assert from "node:assert/strict";
 *
 * const args = forwarderArgs({ siteDir: "/srv/telemetry", to: "nats://hub:4222", unit: "pan012" });
 * assert.deepEqual(args.slice(-4), ["--to", "nats://hub:4222", "--unit", "pan012"]);
 * assert.ok(args.includes("--allow-net=hub:4222"));
 * ```
 */
export function forwarderArgs(options: SpawnForwarderOptions): string[] {
  const siteDir = resolve(options.siteDir);
  return [
    "run",
    "--no-prompt",
    ...forwarderPermissionFlags({
      siteDir,
      to: options.to,
      ...(options.runRoots ? { runRoots: options.runRoots } : {}),
    }),
    new URL("../cli/forward_main.ts", import.meta.url).href,
    "forward",
    "--site-dir",
    siteDir,
    "--to",
    options.to,
    "--unit",
    options.unit,
    ...(options.name !== undefined ? ["--name", options.name] : []),
    ...(options.subjectPrefix !== undefined ? ["--subject-prefix", options.subjectPrefix] : []),
    ...(options.natsStream !== undefined ? ["--nats-stream", options.natsStream] : []),
    ...(options.batch !== undefined ? ["--batch", String(options.batch)] : []),
    ...(options.reclaimUnit ? ["--reclaim-unit"] : []),
  ];
}

/**
 * Starts `obs-utils telemetry forward` as a child process with the scoped permissions of
 * {@linkcode forwarderPermissionFlags}. It runs until stopped; its log goes to `output`.
 *
 * @example
 * ```ts ignore
 * import { spawnForwarder } from "@obs-utils/telemetry/forward";
 * await using forwarder = spawnForwarder({
 *   siteDir: "./telemetry",
 *   to: "postgres://fleet@db.example:5432/telemetry",
 *   unit: "pan012",
 * });
 * ```
 */
export function spawnForwarder(options: SpawnForwarderOptions): SpawnedForwarder {
  const output = options.output ?? "inherit";
  const nice = options.nice ?? 10;
  if (!Number.isSafeInteger(nice) || nice < 0 || nice > 19) {
    throw new RangeError(`nice must be an integer from 0 to 19, not ${nice}`);
  }
  return spawnDeno({
    args: forwarderArgs(options),
    output,
    // nice(1) execs deno in its own process: the pid is the forwarder's.
    ...(nice > 0 ? { via: ["nice", "-n", String(nice)] } : {}),
    // A forwarder ends within one send; one stuck past 15 s is killed.
    killAfterMs: 15_000,
  });
}
