/**
 * `obs-utils telemetry safety replay` (docs/safety.md#replay) as a child process, read-only,
 * against site directories recorded by the real service (`tests/_shared/gusty_night.ts`, a
 * child too: a seeded gusty night on a clock it moves, the verdict asked every second as the
 * live timer wakes, external events and waivers set through the service's safety hub).
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { CLI, readSiteLines, tempDir } from "../_shared/util.ts";
import { compressFile } from "../../store/compress.ts";
import type { ReplayReport } from "../../core/safety_replay.ts";

const NIGHT = new URL("../_shared/gusty_night.ts", import.meta.url).pathname;
const START = "2026-11-26T22:00:00Z";

/** Weather critical (stale after 120 s, latched 300 s, alarm above 15 m/s); sky not. */
function types(clearAfterS = 300, sky: Record<string, unknown> = {}) {
  return {
    weather: {
      critical: true,
      stale_after_s: 120,
      clear_after_s: clearAfterS,
      fields: { wind_mps: { unit: "m/s", alarm_above: 15 } },
    },
    sky: { stale_after_s: 60, fields: { cloud_pct: { unit: "%", alarm_above: 60 } }, ...sky },
  };
}

async function writeTypes(dir: string, name: string, value: unknown): Promise<string> {
  const path = join(dir, name);
  await Deno.writeTextFile(path, JSON.stringify(value));
  return path;
}

/** Records a seeded night into `siteDir` with the real service, as a child process. */
async function record(
  siteDir: string,
  typesFile: string,
  options: { seed: number; hours: number; start?: string; extra?: string[] },
): Promise<void> {
  const { seed, hours, start = START, extra = [] } = options;
  // deno-lint-ignore no-console
  console.log(`gusty night seed ${seed}, ${hours} h from ${start}`);
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      NIGHT,
      "--site-dir",
      siteDir,
      "--types",
      typesFile,
      "--seed",
      String(seed),
      "--hours",
      String(hours),
      "--start",
      start,
      ...extra,
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const d = new TextDecoder();
  assert.equal(out.code, 0, d.decode(out.stderr));
}

/** The replay as a child with read permission only: it can neither lock nor write. */
async function replay(
  readable: string[],
  args: string[],
): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      `--allow-read=${readable.join(",")}`,
      "--allow-env",
      CLI,
      "telemetry",
      "safety",
      "replay",
      ...args,
    ],
    env: { OBS_TELEMETRY_TZ: "UTC" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const d = new TextDecoder();
  return { code: out.code, stdout: d.decode(out.stdout), stderr: d.decode(out.stderr) };
}

async function replayJson(readable: string[], args: string[]): Promise<ReplayReport> {
  const out = await replay(readable, [...args, "--json"]);
  assert.equal(out.code, 0, out.stderr);
  return JSON.parse(out.stdout);
}

/** The replay of a site from `since` (default {@linkcode START}) on, with a types file, as JSON. */
function replaySite(siteDir: string, typesFile: string, extra: string[] = [], since = START) {
  const args = ["--site-dir", siteDir, "--since", since, "--types", typesFile, ...extra];
  return replayJson([siteDir, typesFile], args);
}

/** The `telemetry.safety` events of a profile as stored: [ts, safe]. */
async function recorded(siteDir: string, profile?: string): Promise<[string, boolean][]> {
  return (await readSiteLines(siteDir)).map((line) => JSON.parse(line))
    .filter((e) => e.type === "telemetry.safety" && e.data.profile === profile)
    .map((e) => [e.ts, e.data.safe]);
}

/** Every file of a directory with its size and modification time, to see that nothing changed. */
async function listing(dir: string): Promise<string[]> {
  const out: string[] = [];
  for await (const entry of Deno.readDir(dir)) {
    const info = await Deno.lstat(join(dir, entry.name));
    out.push(`${entry.name} ${info.size} ${info.mtime?.getTime()}`);
  }
  return out.sort();
}

Deno.test("safety replay equals the live verdicts on a recorded night", async () => {
  await using dir = await tempDir();
  const siteDir = join(dir.path, "site");
  const typesFile = await writeTypes(dir.path, "types.json", types());
  await record(siteDir, typesFile, { seed: 7, hours: 3 });
  // The night holds what the rule must get right: alarms, a clear inside a latch, staleness.
  const weather = (await readSiteLines(siteDir)).map((l) => JSON.parse(l))
    .filter((e) => e.type === "weather");
  const alarms = weather.filter((e) => e.data.wind_mps > 15).map((e) => Date.parse(e.ts));
  assert.ok(
    alarms.some((t, i) => i > 0 && t - alarms[i - 1]! > 2_000 && t - alarms[i - 1]! < 300_000),
  );
  const gaps = weather.slice(1).filter((e, i) =>
    Date.parse(e.ts) - Date.parse(weather[i].ts) > 120_000
  );
  assert.ok(gaps.length > 0, "an outage longer than stale_after_s");
  const live = await recorded(siteDir);
  assert.ok(live.length >= 10, `${live.length} changes recorded`);

  const before = await listing(siteDir);
  const report = await replaySite(siteDir, typesFile);
  assert.deepEqual(report.differences, []);
  assert.equal(report.changes.length, live.length);
  report.changes.forEach((change, i) => {
    assert.equal(change.safe, live[i]![1], change.ts);
    const off = Date.parse(change.ts) - Date.parse(live[i]![0]);
    assert.ok(Math.abs(off) <= 2_000, `${change.ts} against ${live[i]![0]}`);
  });
  assert.ok(report.changes.some((c) => c.reasons.some((r) => /stale for/.test(r))));
  assert.ok(report.changes.some((c) => c.reasons.some((r) => /above alarm 15/.test(r))));
  assert.equal(report.summary.recorded_changes, live.length);
  assert.equal(report.summary.changes, live.length);
  assert.equal(report.summary.start.safe, false);
  const hours = report.summary.safe_hours + report.summary.unsafe_hours;
  assert.ok(Math.abs(hours - 3) < 0.02, `${hours} h`);
  // Read only: no lock taken, nothing written.
  assert.deepEqual(await listing(siteDir), before);
});

Deno.test("safety replay with a longer clear_after_s in another types file reports fewer changes and names the differences", async () => {
  await using dir = await tempDir();
  const siteDir = join(dir.path, "site");
  const typesFile = await writeTypes(dir.path, "types-300.json", types(300));
  const longer = await writeTypes(dir.path, "types-900.json", types(900));
  await record(siteDir, typesFile, { seed: 7, hours: 3 });
  const same = await replaySite(siteDir, typesFile);
  const report = await replaySite(siteDir, longer);
  assert.ok(report.changes.length < same.changes.length, `${report.changes.length} changes`);
  assert.ok(report.summary.safe_hours < same.summary.safe_hours);
  assert.ok(report.differences.some((d) => d.kind === "recorded_only"));
  // Each latch now ends 600 s later: every SAFE moment of the longer rule is one the shorter did not have.
  for (const change of report.changes.filter((c) => c.safe)) {
    assert.ok(report.differences.some((d) => d.ts === change.ts && d.kind === "replayed_only"));
  }
  const human = await replay([siteDir, longer], [
    "--site-dir",
    siteDir,
    "--since",
    START,
    "--types",
    longer,
  ]);
  assert.equal(human.code, 0, human.stderr);
  assert.match(
    human.stdout,
    /^Against the \d+ telemetry\.safety changes recorded \(within 2 s\): \d+ differences$/m,
  );
  assert.match(human.stdout, /^ {2}recorded only: \S+Z {2}SAFE$/m);
  assert.match(human.stdout, /^ {2}replayed only: \S+Z {2}SAFE$/m);
});

Deno.test("safety replay --profile north judges only the types critical for north", async () => {
  await using dir = await tempDir();
  const siteDir = join(dir.path, "site");
  const typesFile = await writeTypes(
    dir.path,
    "types.json",
    types(300, { critical_for: ["north"], clear_after_s: 120 }),
  );
  await record(siteDir, typesFile, { seed: 11, hours: 3 });
  const north = await replaySite(siteDir, typesFile, ["--profile", "north"]);
  const live = await recorded(siteDir, "north");
  assert.ok(live.length >= 2, `${live.length} changes of north recorded`);
  assert.deepEqual(north.differences, []);
  assert.equal(north.changes.length, live.length);
  assert.equal(north.summary.profile, "north");
  const reasons = north.changes.flatMap((c) => c.reasons);
  assert.ok(reasons.length > 0 && reasons.every((r) => r.startsWith("sky: ")), reasons.join("; "));
  const site = await replaySite(siteDir, typesFile);
  assert.deepEqual(site.differences, []);
  assert.ok(site.changes.flatMap((c) => c.reasons).every((r) => r.startsWith("weather: ")));
});

Deno.test("safety replay reads .gz nights", async () => {
  await using dir = await tempDir();
  const siteDir = join(dir.path, "site");
  const typesFile = await writeTypes(dir.path, "types.json", types());
  // Across noon UTC: two nights, two files.
  const start = "2026-11-27T10:30:00Z";
  await record(siteDir, typesFile, { seed: 3, hours: 3, start });
  const plain = await replaySite(siteDir, typesFile, [], start);
  assert.ok(plain.changes.length >= 4, `${plain.changes.length} changes`);
  assert.ok(plain.changes.some((c) => c.ts < "2026-11-27T12:00:00Z"));
  // As retention compresses an old night (docs/history.md#compression-and-retention).
  assert.ok(await compressFile(join(siteDir, "site_20261126.ndjson")));
  assert.ok((await listing(siteDir)).some((f) => f.startsWith("site_20261126.ndjson.gz ")));
  assert.ok(!(await listing(siteDir)).some((f) => f.startsWith("site_20261126.ndjson ")));
  assert.deepEqual(await replaySite(siteDir, typesFile, [], start), plain);
});

Deno.test("safety replay of a range with an external event set and cleared replays it", async () => {
  await using dir = await tempDir();
  const siteDir = join(dir.path, "site");
  const typesFile = await writeTypes(dir.path, "types.json", types());
  // Set and cleared during a run: the hub's audit events must still reach the site stream.
  await record(siteDir, typesFile, {
    seed: 5,
    hours: 2,
    extra: ["--run", "20-100", "--external", "30-90"],
  });
  const report = await replaySite(siteDir, typesFile);
  assert.deepEqual(report.differences, []);
  const held = report.changes.filter((c) =>
    c.ts >= "2026-11-26T22:30:00Z" && c.ts < "2026-11-26T23:30:00Z"
  );
  assert.ok(held.every((c) => !c.safe), JSON.stringify(held));
  const set = report.changes.find((c) => c.reasons.includes("external: UPS: on battery"));
  assert.ok(set, JSON.stringify(report.changes));
  assert.ok(set.ts.startsWith("2026-11-26T22:3"), set.ts);
  assert.ok(report.changes.some((c) => c.safe && c.ts >= "2026-11-26T23:30:00Z"));
});

Deno.test("safety replay of a range with a waiver replays it", async () => {
  await using dir = await tempDir();
  const siteDir = join(dir.path, "site");
  const typesFile = await writeTypes(dir.path, "types.json", types());
  // weather waived for an hour from minute 20: its gusts and outages are not judged then.
  await record(siteDir, typesFile, { seed: 7, hours: 2, extra: ["--waive", "20:3600:weather"] });
  const report = await replaySite(siteDir, typesFile);
  assert.deepEqual(report.differences, []);
  const waived = report.changes.filter((c) =>
    c.ts > "2026-11-26T22:20:01Z" && c.ts < "2026-11-26T23:20:00Z"
  );
  assert.ok(waived.every((c) => c.safe), JSON.stringify(waived));
  assert.ok(
    report.changes.some((c) => c.reasons.some((r) => r.startsWith("weather: WAIVED until "))),
  );
  // The waiver mattered: the weather was in alarm while it held.
  const gusts = (await readSiteLines(siteDir)).map((l) => JSON.parse(l)).filter((e) =>
    e.type === "weather" && e.data.wind_mps > 15 && e.ts > "2026-11-26T22:21:00Z" &&
    e.ts < "2026-11-26T23:19:00Z"
  );
  assert.ok(gusts.length > 0);
});

Deno.test("safety replay refuses bad input with one line naming the flag, exit 2", async () => {
  await using dir = await tempDir();
  const siteDir = join(dir.path, "site");
  await Deno.mkdir(siteDir);
  const typesFile = await writeTypes(dir.path, "types.json", types());
  const readable = [dir.path];
  const cases: [string[], RegExp][] = [
    [
      ["--site-dir", siteDir, "--since", START, "--types", typesFile, "--profile", "south"],
      /--profile "south" is not a profile of the types file; its profiles are site \(critical_for\)/,
    ],
    [
      [
        "--site-dir",
        siteDir,
        "--since",
        START,
        "--until",
        "2026-11-26T21:00:00Z",
        "--types",
        typesFile,
      ],
      /--since \(2026-11-26T22:00:00\.000Z\) must be before --until \(2026-11-26T21:00:00\.000Z\)/,
    ],
    [
      ["--site-dir", siteDir, "--since", START, "--types", join(dir.path, "missing.json")],
      /Cannot use --types \S+missing\.json: at \$ the file does not exist/,
    ],
    [
      ["--site-dir", join(dir.path, "nowhere"), "--since", START, "--types", typesFile],
      /the site directory \S+nowhere does not exist; pass it with --site-dir/,
    ],
    [
      ["--site-dir", siteDir, "--since", "yesterday", "--types", typesFile],
      /--since: Cannot read the time "yesterday"/,
    ],
    [["--site-dir", siteDir, "--types", typesFile], /--since is required/],
  ];
  for (const [args, message] of cases) {
    const out = await replay(readable, args);
    assert.equal(out.code, 2, `${args.join(" ")}: ${out.stderr}`);
    assert.equal(out.stdout, "");
    assert.match(out.stderr, message);
    assert.match(
      out.stderr,
      /^obs-utils telemetry safety replay: [^\n]+ Run 'obs-utils telemetry safety replay --help' for usage\.\n$/,
    );
  }
});

Deno.test("safety replay exits 1 with one line when the site directory cannot be read", async () => {
  await using dir = await tempDir();
  const siteDir = join(dir.path, "site");
  await Deno.mkdir(siteDir);
  const typesFile = await writeTypes(dir.path, "types.json", types());
  // Read permission for the types file only (the tests run as root: a mode would not stop it).
  const out = await replay([typesFile], [
    "--site-dir",
    siteDir,
    "--since",
    START,
    "--types",
    typesFile,
  ]);
  assert.equal(out.code, 1, out.stderr);
  assert.equal(out.stdout, "");
  assert.match(out.stderr, /^error: Cannot read the site directory \S+site: [^\n]+\n$/);
});
