/**
 * `obs-utils telemetry migrate`: converts a legacy file database into site NDJSON files, with a
 * progress line on a terminal and a summary at the end.
 *
 * @example Usage
 * ```ts ignore
 * import { migrateCommand } from "./migrate.ts";
 * Deno.exit(await migrateCommand(["--source", "./legacy-db", "--dest", "./telemetry"]));
 * ```
 *
 * @module
 */

// deno-lint-ignore-file no-console
import { migrate } from "../migrate/migrate.ts";
import { MigrateError } from "../migrate/errors.ts";
import type { MigrateGroupBy, MigrateProgress, MigrateSummary } from "../migrate/types.ts";
import { checkTimeZone } from "../store/day_key.ts";
import { counted, Failure, HELP_OPTION, parse, printHelp, UsageError } from "./common.ts";
import { printable } from "../wire/terminal_text.ts";

/** The `--help` text of `migrate`. */
export const MIGRATE_HELP: string =
  `Usage: obs-utils telemetry migrate --source DIR --dest DIR [options]

Convert a legacy file database (<collection>.json files) into site_YYYYMMDD.ndjson files.
Never overwrites existing files unless --force; rejected lines go to migrate-rejects.ndjson.

Options:
  --source DIR       Legacy database directory (searched recursively)
  --dest DIR         Where to write the NDJSON files
  --dry-run          Report what would be written, conflicts and rejects; write nothing
  --force            Replace existing output files
  --group-by WHAT    date (the calendar date written in each record) or night
                     (the local-noon night, as the live service names files) [default date]
  --tz ZONE          IANA zone of the nights, with --group-by night [default system zone]
  -h, --help         Show this help
`;

/**
 * Runs `obs-utils telemetry migrate`.
 *
 * @param args The arguments after `telemetry migrate`.
 * @returns The exit code, 0 once the files are written (or, with `--dry-run`, counted).
 * @throws {UsageError} For a bad flag or a missing `--source` or `--dest`.
 * @throws {Failure} If the migration refuses (for example, files it would overwrite).
 *
 * @example Usage
 * ```ts ignore
 * import { migrateCommand } from "./migrate.ts";
 * Deno.exit(await migrateCommand(["--source", "./legacy-db", "--dest", "./out", "--dry-run"]));
 * ```
 */
export async function migrateCommand(args: string[]): Promise<number> {
  const { values } = parse("migrate", args, {
    source: { type: "string" },
    dest: { type: "string" },
    "dry-run": { type: "boolean" },
    force: { type: "boolean" },
    "group-by": { type: "string" },
    tz: { type: "string" },
    ...HELP_OPTION,
  }, false);
  if (values.help) return printHelp(MIGRATE_HELP);
  if (values.source === undefined || values.dest === undefined) {
    throw new UsageError(
      `--source and --dest are both required, e.g. --source ./legacy-db --dest ./telemetry`,
      "migrate",
    );
  }
  const groupBy = parseGroupBy(values["group-by"]);
  let timeZone: string | undefined;
  if (values.tz !== undefined) {
    if (groupBy !== "night") {
      throw new UsageError(
        "--tz applies only with --group-by night (--group-by date uses the date written in each record)",
        "migrate",
      );
    }
    try {
      timeZone = checkTimeZone(values.tz);
    } catch (err) {
      throw new UsageError((err as Error).message, "migrate");
    }
  }
  const tty = Deno.stderr.isTerminal();
  let summary: MigrateSummary;
  try {
    summary = await migrate(values.source, values.dest, {
      force: values.force ?? false,
      dryRun: values["dry-run"] ?? false,
      groupBy,
      timeZone,
      onProgress: progressLine(tty),
    });
  } catch (e) {
    if (tty) writeErr("\r\x1b[K");
    if (e instanceof MigrateError) throw new Failure(e.message);
    if (e instanceof Deno.errors.PermissionDenied) {
      // The operating system refused (owner, mode, read-only mount): no Deno flag fixes that.
      throw new Failure(
        `the operating system denied access (${
          e.message.replace(/\s*\(os error \d+\)/, "")
        }); check the owner and mode of --dest and --source (ls -ld) or run as a user who may write there`,
      );
    }
    throw e;
  }
  if (tty) writeErr("\r\x1b[K");
  printSummary(summary);
  return 0;
}

/** Reads `--group-by`, in any letter case. */
function parseGroupBy(text: string | undefined): MigrateGroupBy {
  if (text === undefined) return "date";
  const value = text.trim().toLowerCase();
  if (value === "date" || value === "night") return value;
  throw new UsageError(`--group-by must be date or night, not "${text}"`, "migrate");
}

function writeErr(text: string): void {
  Deno.stderr.writeSync(new TextEncoder().encode(text));
}

/** Redraws one progress line on stderr at most every 200 ms, on a terminal only. */
function progressLine(tty: boolean): (p: MigrateProgress) => void {
  let lastDraw = 0;
  return (p) => {
    const now = performance.now();
    if (!tty || now - lastDraw < 200) return;
    lastDraw = now;
    const pct = p.phase === "read"
      ? (p.totalBytes > 0 ? Math.floor(p.bytesRead / p.totalBytes * 100) : 100)
      : (p.filesTotal > 0 ? Math.floor(p.filesDone / p.filesTotal * 100) : 100);
    writeErr(
      `\r\x1b[K${
        p.phase === "read" ? "reading" : p.phase === "write" ? "writing" : "renaming"
      } ${pct}% · ${counted(p.records, "record")} · ${counted(p.rejects, "reject")}`,
    );
  };
}

function printSummary(summary: MigrateSummary): void {
  const n = (x: number) => x.toLocaleString("en-US");
  const verb = summary.dryRun ? "would migrate" : "migrated";
  console.log(
    `${verb} ${counted(summary.records, "record")} from ${
      counted(Object.keys(summary.collections).length, "collection")
    } into ${counted(summary.files.length, "site file")} in ${
      (summary.elapsedMs / 1000).toFixed(1)
    } s (${n(Math.round(summary.recordsPerSecond))} records/s)`,
  );
  // Collection and file names come from the input: printable only (docs/cli.md).
  for (const [collection, count] of Object.entries(summary.collections)) {
    console.log(`  ${printable(collection)}: ${n(count)}`);
  }
  if (summary.files.length > 0) {
    const first = summary.files[0]!.name, last = summary.files.at(-1)!.name;
    console.log(`  files: ${first}${summary.files.length > 1 ? ` … ${last}` : ""}`);
  }
  if (summary.groupBy === "night") console.log("  grouped by local-noon night");
  if (summary.replaced.length > 0) {
    console.log(
      `  ${summary.dryRun ? "would replace" : "replaced"}: ${
        counted(summary.replaced.length, "file")
      }`,
    );
  }
  if (summary.conflicts.length > 0) {
    console.log(
      `  conflicts: ${
        counted(summary.conflicts.length, "file already exists", "files already exist")
      }; a real run refuses unless --force:`,
    );
    for (const path of summary.conflicts) console.log(`    ${printable(path)}`);
  }
  console.log(
    `  rejects: ${n(summary.rejects)}${
      summary.rejects > 0 && !summary.dryRun ? ` (see ${summary.rejectsFile})` : ""
    }; blank lines: ${n(summary.blankLines)}`,
  );
  if (summary.dryRun) {
    for (const r of summary.rejectSamples) {
      console.log(`    ${printable(r.file)}:${r.line}: ${printable(r.reason)}`);
    }
    const more = summary.rejects - summary.rejectSamples.length;
    if (more > 0) console.log(`    ... and ${n(more)} more`);
  }
}
