import assert from "node:assert/strict";
import { join } from "node:path";
import { CLI, tempDir } from "../_shared/util.ts";
import { compressFile } from "../../store/compress.ts";
import { READ_HELP } from "../../cli/read.ts";
import { HELP_TEXT } from "../../cli.ts";

const decoder = new TextDecoder();

/** Runs `cli.ts telemetry read ...` with read permission for `siteDir` only. */
async function read(
  siteDir: string,
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--no-prompt",
      `--allow-read=${siteDir}`,
      "--allow-env=OBS_TELEMETRY_SITE_DIR,OBS_TELEMETRY_TZ",
      CLI,
      "telemetry",
      "read",
      "--site-dir",
      siteDir,
      ...args,
    ],
    env: { OBS_TELEMETRY_TZ: "UTC", ...env },
    stdout: "piped",
    stderr: "piped",
  }).output();
  return { code: out.code, stdout: decoder.decode(out.stdout), stderr: decoder.decode(out.stderr) };
}

function line(seq: number, ts: string, type: string, data: unknown): string {
  return `{"seq":${seq},"ts":"${ts}","type":"${type}","data":${JSON.stringify(data)},"meta":{}}`;
}

const LINES = [
  line(1, "2026-05-10T13:00:00.000Z", "weather", { wind: { mps: 2.5 }, note: 'gusts, "strong"' }),
  line(2, "2026-05-10T14:00:00.000Z", "status", { dome: "open" }),
  line(3, "2026-05-10T15:00:00.000Z", "weather", { wind: { mps: 3 }, note: "two\nlines" }),
  line(4, "2026-05-11T13:00:00.000Z", "weather", { wind: null }),
];

async function site(dir: string): Promise<void> {
  await Deno.writeTextFile(join(dir, "site_20260510.ndjson"), LINES.slice(0, 3).join("\n") + "\n");
  await Deno.writeTextFile(join(dir, "site_20260511.ndjson"), LINES[3] + "\n");
}

Deno.test("read prints the stored lines of a type exactly, from .ndjson and .gz alike", async () => {
  await using tmp = await tempDir();
  await site(tmp.path);
  await compressFile(join(tmp.path, "site_20260510.ndjson"));
  const out = await read(tmp.path, ["weather"]);
  assert.equal(out.stderr, "");
  assert.equal(out.code, 0);
  assert.equal(out.stdout, [LINES[0], LINES[2], LINES[3]].join("\n") + "\n");
});

Deno.test("read --format csv quotes fields as RFC 4180 asks and dots into nested data", async () => {
  await using tmp = await tempDir();
  await site(tmp.path);
  const out = await read(tmp.path, ["weather", "--format", "csv", "--fields", "wind.mps,note"]);
  assert.equal(out.code, 0, out.stderr);
  assert.equal(
    out.stdout,
    "seq,ts,type,wind.mps,note\r\n" +
      '1,2026-05-10T13:00:00.000Z,weather,2.5,"gusts, ""strong"""\r\n' +
      '3,2026-05-10T15:00:00.000Z,weather,3,"two\nlines"\r\n' +
      "4,2026-05-11T13:00:00.000Z,weather,,\r\n",
  );
});

Deno.test("read --format csv without --fields puts data as JSON in one quoted column", async () => {
  await using tmp = await tempDir();
  await site(tmp.path);
  const out = await read(tmp.path, ["status", "--format", "csv"]);
  assert.equal(
    out.stdout,
    'seq,ts,type,data\r\n2,2026-05-10T14:00:00.000Z,status,"{""dome"":""open""}"\r\n',
  );
});

Deno.test("read --format table aligns columns and keeps each event on one line", async () => {
  await using tmp = await tempDir();
  await site(tmp.path);
  const out = await read(tmp.path, [
    "--format",
    "table",
    "--fields",
    "note",
    "--until",
    "2026-05-10T15:30:00Z",
  ]);
  assert.equal(out.code, 0, out.stderr);
  assert.equal(
    out.stdout,
    "SEQ  TS                        TYPE     NOTE\n" +
      '1    2026-05-10T13:00:00.000Z  weather  gusts, "strong"\n' +
      "2    2026-05-10T14:00:00.000Z  status\n" +
      // A line break is shown as its escape: one event, one line, nothing hidden (docs/cli.md).
      "3    2026-05-10T15:00:00.000Z  weather  two\\u000alines\n",
  );
});

Deno.test("read --since with a night date and a duration selects by ts", async () => {
  await using tmp = await tempDir();
  await site(tmp.path);
  const night = await read(tmp.path, ["--since", "2026-05-11"]);
  assert.equal(night.stdout, LINES[3] + "\n");
  // Everything stored lies more than a day before now.
  const recent = await read(tmp.path, ["--since", "1d"]);
  assert.equal(recent.code, 0);
  assert.equal(recent.stdout, "");
});

Deno.test("read explains a bad time, format or field list in one line and exits 2", async () => {
  await using tmp = await tempDir();
  const cases: [string[], string][] = [
    [
      ["--since", "yesterday"],
      `obs-utils telemetry read: --since: Cannot read the time "yesterday": use ISO 8601 with a zone (2026-05-10T03:00:00Z), a night's date (2026-05-10) or a duration back from now (90m, 12h, 7d). Run 'obs-utils telemetry read --help' for usage.`,
    ],
    [
      ["--since", "2026-05-11", "--until", "2026-05-10"],
      "obs-utils telemetry read: --since (2026-05-11T12:00:00.000Z) must be before --until (2026-05-10T12:00:00.000Z). Run 'obs-utils telemetry read --help' for usage.",
    ],
    [
      ["--format", "xml"],
      `obs-utils telemetry read: --format must be ndjson, csv or table, not "xml". Run 'obs-utils telemetry read --help' for usage.`,
    ],
    [
      ["--fields", "a"],
      "obs-utils telemetry read: --fields applies to --format csv or table; ndjson prints whole lines. Run 'obs-utils telemetry read --help' for usage.",
    ],
    [
      ["--format", "csv", "--fields", "a,,b"],
      `obs-utils telemetry read: --fields must be data field names separated by commas, dotted for nested ones (wind,wind.mps), not "a,,b". Run 'obs-utils telemetry read --help' for usage.`,
    ],
    [
      ["--run", "../x"],
      `obs-utils telemetry read: --run "../x" is not a run id; a run id matches ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$. Run 'obs-utils telemetry read --help' for usage.`,
    ],
  ];
  for (const [args, message] of cases) {
    const out = await read(tmp.path, args);
    assert.equal(out.code, 2, args.join(" "));
    assert.equal(out.stdout, "");
    assert.equal(out.stderr, message + "\n");
  }
});

Deno.test("read fails with one line for a missing site directory or an unknown run", async () => {
  await using tmp = await tempDir();
  const missing = join(tmp.path, "nope");
  const gone = await read(missing, []);
  assert.equal(gone.code, 1);
  assert.equal(
    gone.stderr,
    `error: The site directory ${missing} does not exist; pass it with --site-dir or OBS_TELEMETRY_SITE_DIR\n`,
  );
  const run = await read(tmp.path, ["--run", "night-7"]);
  assert.equal(run.code, 1);
  assert.equal(
    run.stderr,
    `error: Cannot find run "night-7" in ${tmp.path}: it is not in runs.ndjson, not the active run and no directory of that name holds a telemetry.ndjson; list the runs with 'obs-utils telemetry runs'\n`,
  );
});

Deno.test("read of a run prints that run's lines", async () => {
  await using tmp = await tempDir();
  await Deno.mkdir(join(tmp.path, "night-1"));
  const runLine = line(1, "2026-05-10T22:00:00.000Z", "status", { run: true });
  await Deno.writeTextFile(join(tmp.path, "night-1", "telemetry.ndjson"), runLine + "\n");
  await site(tmp.path);
  const out = await read(tmp.path, ["--run", "night-1"]);
  assert.equal(out.stdout, runLine + "\n");
});

Deno.test("read streams a large file through a closed pipe without an error", async () => {
  await using tmp = await tempDir();
  const many = Array.from(
    { length: 200_000 },
    (_, i) => line(i + 1, "2026-05-10T13:00:00.000Z", "weather", { i }),
  );
  await Deno.writeTextFile(join(tmp.path, "site_20260510.ndjson"), many.join("\n") + "\n");
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      `--allow-read=${tmp.path}`,
      "--allow-env",
      CLI,
      "telemetry",
      "read",
      "--site-dir",
      tmp.path,
    ],
    env: { OBS_TELEMETRY_TZ: "UTC" },
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const reader = child.stdout.getReader();
  const first = await reader.read();
  assert.ok(first.value && first.value.length > 0);
  await reader.cancel();
  const status = await child.status;
  const stderr = decoder.decode(await new Response(child.stderr).arrayBuffer());
  assert.equal(status.code, 0, stderr);
  assert.equal(stderr, "");
});

Deno.test("read --help prints READ_HELP exactly and exits 0", async () => {
  await using tmp = await tempDir();
  const out = await read(tmp.path, ["--help"]);
  assert.equal(out.code, 0);
  assert.equal(out.stdout, READ_HELP.trimEnd() + "\n");
  assert.match(HELP_TEXT.telemetry!, /^ {2}read {6}Print stored events/m);
});
