/**
 * `obs-utils telemetry forward` and `obs-utils telemetry archive` (docs/fleet.md): the fleet
 * processes, each beside the service with its own scoped permissions. Loaded by `cli.ts` only
 * when one of these commands runs, so the other commands never load the NATS and PostgreSQL
 * clients.
 *
 * @module
 */

// deno-lint-ignore-file no-console
import { resolve } from "node:path";
import { readEnv } from "../wire/address.ts";
import { archive, redact } from "../fleet/archive.ts";
import { counted, Failure, HELP_OPTION, parse, printHelp, UsageError } from "./common.ts";
import type { FleetLog } from "../fleet/retry.ts";
import { cursorPath } from "../store/forward_cursor.ts";
import { forwardStatus, type StreamLag } from "../fleet/status.ts";
import { forward } from "../fleet/forwarder.ts";
import { checkForwardOptions, destinationKind } from "../fleet/forward_options.ts";
import { DEFAULT_SITE_DIR } from "./flags.ts";
import { checkNatsName, checkSubjectPrefix } from "../fleet/sinks/nats.ts";
import { ARCHIVE_HELP, FORWARD_HELP } from "./forward_help.ts";
import { printable } from "../wire/terminal_text.ts";

/** The fleet processes' log lines: UTC time, level, message (docs/operations.md's shape). */
const printLog: FleetLog = (level, message) => {
  // A message may quote a broker's or a database's error, or a stored value: printable only
  // (docs/cli.md, "Human output and terminals").
  const line = `${new Date().toISOString()} ${level} ${printable(message)}`;
  if (level === "info") console.log(line);
  else console.error(line);
};

function positiveInt(value: string | undefined, flag: string, command: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n <= 0) {
    throw new UsageError(`${flag} must be a positive integer, not "${value}"`, command);
  }
  return n;
}

/** A stack frame in an npm package (Deno's npm cache or a node_modules folder). */
const LIBRARY_FRAME = /[\\/]npm[\\/]registry\.npmjs\.org[\\/]|[\\/]node_modules[\\/]/;

/**
 * An AbortSignal that SIGINT or SIGTERM aborts; the process then ends after the batch in hand.
 * While it is held, a rejected promise nobody awaits (a database client's own reconnect attempt,
 * say), or an exception a client library throws from its own callback, is logged and passed over instead of ending the process: the forwarder and the archiver
 * own their retries, and a process that exits stops forwarding until someone restarts it
 * (docs/fleet.md, "Faults").
 */
function stopSignal(): { signal: AbortSignal; dispose(): void } {
  const controller = new AbortController();
  const stop = () => controller.abort();
  const signals: Deno.Signal[] = ["SIGINT", "SIGTERM"];
  for (const s of signals) Deno.addSignalListener(s, stop);
  const warn = (reason: unknown) => {
    const where = reason instanceof Error
      ? (reason.stack ?? "").split("\n").slice(1, 4).map((l) => l.trim()).join(" < ")
      : "";
    printLog(
      "warn",
      `a client library failed outside any request (${
        reason instanceof Error ? reason.message : String(reason)
      }${where ? `; at ${where}` : ""}); going on, its next request retries`,
    );
  };
  const stray = (event: PromiseRejectionEvent) => {
    event.preventDefault();
    warn(event.reason);
  };
  // An exception thrown inside a client library's own socket callback (postgres.js 3.4 writes to
  // a connection PostgreSQL closed mid-write: "Cannot read properties of null (reading 'write')")
  // cannot be caught by any request; ours still end the process.
  const thrown = (event: ErrorEvent) => {
    const err: unknown = event.error;
    const stack = err instanceof Error ? err.stack ?? "" : "";
    if (!LIBRARY_FRAME.test(stack)) return;
    event.preventDefault();
    warn(err);
  };
  globalThis.addEventListener("unhandledrejection", stray);
  globalThis.addEventListener("error", thrown);
  return {
    signal: controller.signal,
    dispose: () => {
      for (const s of signals) Deno.removeSignalListener(s, stop);
      globalThis.removeEventListener("unhandledrejection", stray);
      globalThis.removeEventListener("error", thrown);
    },
  };
}

function formatStatus(rows: StreamLag[]): string {
  if (rows.length === 0) return "no forwarding cursor in this site directory\n";
  const table = [["NAME", "STREAM", "RUN", "SENT_SEQ", "LAG", "OLDEST UNSENT"]];
  for (const r of rows) {
    table.push([
      r.name,
      r.stream,
      r.run_id || "-",
      String(r.sent_seq),
      String(r.lag_events),
      r.oldest_unsent_age_s === null ? "-" : `${r.oldest_unsent_age_s} s ago`,
    ]);
  }
  const widths = table[0]!.map((_, c) => Math.max(...table.map((row) => row[c]!.length)));
  // Damaged files passed over (docs/fleet.md#damaged-files), one line each under the table.
  const damaged = rows.flatMap((r) =>
    r.damaged.map((d) =>
      `${r.name}: skipped the damaged file ${d.file}${
        r.run_id ? ` of run ${r.run_id}` : ""
      } after byte ${d.offset} (${d.reason})`
    )
  );
  return table.map((row) => row.map((cell, c) => cell.padEnd(widths[c]!)).join("  ").trimEnd())
    .concat(damaged).join("\n") + "\n";
}

/**
 * Runs `obs-utils telemetry forward`.
 *
 * @param args The arguments after `forward`.
 * @returns The exit code.
 */
export async function forwardCommand(args: string[]): Promise<number> {
  const { values } = parse("forward", args, {
    to: { type: "string" },
    unit: { type: "string" },
    "site-dir": { type: "string" },
    name: { type: "string" },
    "subject-prefix": { type: "string" },
    "nats-stream": { type: "string" },
    batch: { type: "string" },
    "reclaim-unit": { type: "boolean" },
    status: { type: "boolean" },
    json: { type: "boolean" },
    ...HELP_OPTION,
  }, false);
  if (values.help) return printHelp(FORWARD_HELP);
  const siteDir = resolve(
    values["site-dir"] ?? readEnv("OBS_TELEMETRY_SITE_DIR") ?? DEFAULT_SITE_DIR,
  );
  if (values.status && values["reclaim-unit"]) {
    throw new UsageError("--reclaim-unit goes with --to and --unit, not --status", "forward");
  }
  if (values.status) {
    let rows: StreamLag[];
    try {
      rows = await forwardStatus(siteDir, values.name ? { name: values.name } : {});
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) {
        throw new Failure(`no site directory at ${siteDir}; pass --site-dir`);
      }
      throw err;
    }
    if (values.json) { for (const row of rows) console.log(JSON.stringify(row)); }
    else Deno.stdout.writeSync(new TextEncoder().encode(formatStatus(rows)));
    return 0;
  }
  if (values.json) throw new UsageError("--json goes with --status", "forward");
  if (values.to === undefined) {
    throw new UsageError(
      "--to is required (nats://host:port or postgres://user@host:port/db)",
      "forward",
    );
  }
  const unit = values.unit ?? readEnv("OBS_TELEMETRY_UNIT");
  if (unit === undefined) {
    throw new UsageError(
      "--unit is required (or set OBS_TELEMETRY_UNIT), for example --unit pan012",
      "forward",
    );
  }
  const batch = positiveInt(values.batch, "--batch", "forward");
  const options = {
    siteDir,
    to: values.to,
    unit,
    ...(values.name !== undefined ? { name: values.name } : {}),
    ...(values["subject-prefix"] !== undefined ? { subjectPrefix: values["subject-prefix"] } : {}),
    ...(values["nats-stream"] !== undefined ? { natsStream: values["nats-stream"] } : {}),
    ...(batch !== undefined ? { batch } : {}),
    ...(values["reclaim-unit"] ? { reclaimUnit: true } : {}),
  };
  const problem = checkForwardOptions(options);
  if (problem) throw new UsageError(problem, "forward");
  const name = values.name ?? (destinationKind(values.to) as string);
  let path: string;
  try {
    path = cursorPath(siteDir, name);
  } catch (err) {
    throw new UsageError(`--name: ${(err as Error).message}`, "forward");
  }
  try {
    if (!(await Deno.stat(siteDir)).isDirectory) throw new Deno.errors.NotFound();
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      throw new Failure(
        `no site directory at ${siteDir}; pass --site-dir (the service's --site-dir)`,
      );
    }
    throw err;
  }
  const stop = stopSignal();
  printLog(
    "info",
    `forwarding ${siteDir} to ${redact(values.to)} as unit ${unit} (cursor ${path})`,
  );
  try {
    const stats = await forward({ ...options, signal: stop.signal, log: printLog });
    printLog(
      "info",
      `forwarder stopped after sending ${counted(stats.sent, "event")}; cursor saved`,
    );
    return 0;
  } finally {
    stop.dispose();
  }
}

/**
 * Runs `obs-utils telemetry archive`.
 *
 * @param args The arguments after `archive`.
 * @returns The exit code.
 */
export async function archiveCommand(args: string[]): Promise<number> {
  const { values } = parse("archive", args, {
    from: { type: "string" },
    to: { type: "string" },
    "nats-stream": { type: "string" },
    "subject-prefix": { type: "string" },
    durable: { type: "string" },
    batch: { type: "string" },
    ...HELP_OPTION,
  }, false);
  if (values.help) return printHelp(ARCHIVE_HELP);
  if (values.from === undefined || destinationKind(values.from) !== "nats") {
    throw new UsageError("--from must be nats://host:port", "archive");
  }
  if (values.to === undefined || destinationKind(values.to) !== "postgres") {
    throw new UsageError("--to must be postgres://user@host:port/db", "archive");
  }
  const checks = [
    values["nats-stream"] && checkNatsName(values["nats-stream"], "--nats-stream"),
    values.durable && checkNatsName(values.durable, "--durable"),
    values["subject-prefix"] &&
    `--subject-prefix: ${checkSubjectPrefix(values["subject-prefix"]) ?? ""}`,
  ].filter((p): p is string => typeof p === "string" && !p.endsWith(": "));
  if (checks.length > 0) throw new UsageError(checks[0]!, "archive");
  const batch = positiveInt(values.batch, "--batch", "archive");
  const stop = stopSignal();
  printLog("info", `archiving ${redact(values.from)} into ${redact(values.to)}`);
  try {
    const stats = await archive({
      from: values.from,
      to: values.to,
      ...(values["nats-stream"] ? { natsStream: values["nats-stream"] } : {}),
      ...(values["subject-prefix"] ? { subjectPrefix: values["subject-prefix"] } : {}),
      ...(values.durable ? { durable: values.durable } : {}),
      ...(batch !== undefined ? { batch } : {}),
      signal: stop.signal,
      log: printLog,
    });
    printLog("info", `archiver stopped after storing ${counted(stats.messages, "message")}`);
    return 0;
  } finally {
    stop.dispose();
  }
}
