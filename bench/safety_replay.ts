/**
 * `safety replay` against `read` over the same range (`deno task bench:safety-replay`,
 * docs/safety.md#replay): the speed of a replay must be at least half the speed of `read`.
 *
 * Records `--days` of a seeded gusty site into a temporary site directory through the real
 * service (`tests/_shared/gusty_night.ts`: 1 Hz `weather` with gusts and outages, `sky` every
 * 10 s, the verdict's `telemetry.safety` events as a live service records them), then runs, as
 * child processes side by side and alternating for `--rounds`, `obs-utils telemetry safety replay`
 * over the whole range (with the types file it was recorded with, `--json`) and
 * `obs-utils telemetry read` over the same range (every line, NDJSON, to /dev/null). Wall time
 * of each whole command, Deno's start-up included; the figure is the median of read's time over
 * the median of replay's time (1.0: as fast as read; the target is at least 0.5).
 *
 * Usage: deno run -A bench/safety_replay.ts [--days 7] [--rounds 3] [--seed 7] [--gz] [--keep]
 *
 * The service compresses the nights older than two as it records them (its default
 * `--compress-after`); `--gz` compresses the rest too (`store/compress.ts`).
 *
 * @module
 */

// deno-lint-ignore-file no-console
import { parseArgs } from "node:util";
import { join } from "node:path";
import { ROOT } from "./_util.ts";
import { compressFile } from "../store/compress.ts";

const { values: flags } = parseArgs({
  args: Deno.args.filter((a) => a !== "--"),
  options: {
    days: { type: "string", default: "7" },
    rounds: { type: "string", default: "3" },
    seed: { type: "string", default: "7" },
    gz: { type: "boolean", default: false },
    keep: { type: "boolean", default: false },
  },
  strict: true,
});
const DAYS = Number(flags.days);
const ROUNDS = Number(flags.rounds);
const START = "2026-11-01T12:00:00Z";
const UNTIL = new Date(Date.parse(START) + DAYS * 86_400_000).toISOString();
const TYPES = {
  weather: {
    critical: true,
    stale_after_s: 120,
    clear_after_s: 300,
    fields: { wind_mps: { unit: "m/s", alarm_above: 15 } },
  },
  sky: { stale_after_s: 60, fields: { cloud_pct: { unit: "%", alarm_above: 80 } } },
};

function loadavg(): string {
  return Deno.readTextFileSync("/proc/loadavg").split(" ").slice(0, 3).join(" ");
}

/** Runs the CLI as a child, output to /dev/null or piped; its wall time in seconds. */
async function timed(args: string[], dir: string, keep = false) {
  const t0 = performance.now();
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", `--allow-read=${dir},${ROOT}`, "--allow-env", join(ROOT, "cli.ts"), ...args],
    env: { OBS_TELEMETRY_TZ: "UTC" },
    stdout: keep ? "piped" : "null",
    stderr: "piped",
  }).output();
  const seconds = (performance.now() - t0) / 1000;
  if (out.code !== 0) {
    throw new Error(`${args.join(" ")} failed: ${new TextDecoder().decode(out.stderr)}`);
  }
  return { seconds, stdout: keep ? new TextDecoder().decode(out.stdout) : "" };
}

function median(xs: number[]): number {
  const s = xs.toSorted((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

const root = await Deno.makeTempDir({ prefix: "safety-replay-bench-" });
try {
  const siteDir = join(root, "site");
  const typesFile = join(root, "types.json");
  await Deno.writeTextFile(typesFile, JSON.stringify(TYPES));
  console.log(`load average before: ${loadavg()} (${navigator.hardwareConcurrency} cores)`);
  const t0 = performance.now();
  const made = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      join(ROOT, "tests/_shared/gusty_night.ts"),
      "--site-dir",
      siteDir,
      "--types",
      typesFile,
      "--seed",
      flags.seed!,
      "--start",
      START,
      "--hours",
      String(DAYS * 24),
    ],
    stdout: "piped",
    stderr: "inherit",
  }).output();
  if (made.code !== 0) throw new Error("the site could not be recorded");
  console.log(
    `recorded ${DAYS} days in ${((performance.now() - t0) / 1000).toFixed(0)} s: ${
      new TextDecoder().decode(made.stdout).trim()
    }`,
  );
  if (flags.gz) {
    for await (const entry of Deno.readDir(siteDir)) {
      if (/^site_\d{8}\.ndjson$/.test(entry.name)) await compressFile(join(siteDir, entry.name));
    }
  }
  // The service compresses the nights past --compress-after (2) as it records, as retention does.
  let bytes = 0, nights = 0, gz = 0;
  for await (const entry of Deno.readDir(siteDir)) {
    if (!entry.name.startsWith("site_")) continue;
    bytes += (await Deno.stat(join(siteDir, entry.name))).size;
    nights++;
    if (entry.name.endsWith(".gz")) gz++;
  }
  const range = ["--site-dir", siteDir, "--since", START, "--until", UNTIL];
  const replayArgs = ["telemetry", "safety", "replay", ...range, "--types", typesFile, "--json"];
  const readArgs = ["telemetry", "read", ...range];
  const lines = (await timed(readArgs, root, true)).stdout.split("\n").length - 1;
  const report = JSON.parse((await timed(replayArgs, root, true)).stdout);
  const replay: number[] = [], read: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    read.push((await timed(readArgs, root)).seconds);
    replay.push((await timed(replayArgs, root)).seconds);
  }
  const r = median(read), p = median(replay);
  console.log(
    `\n${DAYS} days, ${lines.toLocaleString("en")} lines in ${nights} nights (${gz} .gz), ${
      (bytes / 1e6).toFixed(0)
    } MB on disk; replay: ${report.summary.changes} changes, ${report.differences.length} differences\n`,
  );
  console.log("| command | median s | lines/s | rounds (s) |");
  console.log("| --- | ---: | ---: | --- |");
  for (const [name, xs, m] of [["read", read, r], ["safety replay", replay, p]] as const) {
    console.log(
      `| ${name} | ${m.toFixed(2)} | ${Math.round(lines / m).toLocaleString("en")} | ${
        xs.map((x) => x.toFixed(2)).join(", ")
      } |`,
    );
  }
  console.log(`\nreplay's speed / read's: ${(r / p).toFixed(2)} (target >= 0.5)`);
  console.log(`load average after: ${loadavg()}`);
} finally {
  if (flags.keep) console.log(`kept ${root}`);
  else await Deno.remove(root, { recursive: true });
}
