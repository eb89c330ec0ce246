/**
 * The table of `run` flags and what is derived from it: the help, the `parseArgs` options, the
 * `--allow-env` list and the arguments `spawnServer()` gives its child.
 * @module
 */

import assert from "node:assert/strict";
import { parseArgs } from "node:util";
import denoJson from "../deno.json" with { type: "json" };
import { HELP_TEXT } from "../cli.ts";
import {
  DEFAULT_HOST,
  DEFAULT_MAX_BODY,
  DEFAULT_MAX_SNAPSHOT_BYTES,
  DEFAULT_MAX_TYPES,
  DEFAULT_PORT,
  DEFAULT_SITE_TYPES,
  permissionFlags,
  SERVER_ENV_VARS,
  type SpawnOptions,
  spawnServer,
} from "../server.ts";
import { TelemetryClient, TelemetryHttpError } from "../client.ts";
import {
  DEFAULT_SITE_DIR,
  resolveRunFlags,
  RUN_FLAGS,
  runFlagArgs,
  type RunFlagValues,
  runParseOptions,
} from "../_run_flags.ts";
import { tempDir } from "./_util.ts";

const noEnv = () => undefined;

/** A value for every flag, none of them a default. */
const EVERY_FLAG: RunFlagValues = {
  siteDir: "/srv/site",
  host: "127.0.0.2",
  port: 7001,
  timeZone: "America/Santiago",
  siteTypes: ["weather", "dome"],
  fsync: "always",
  token: "s3cret",
  allowRunRoots: ["/data/a", "/data/b"],
  maxBody: 2048,
  maxTypes: 12,
  maxSnapshotBytes: 4096,
  insecure: true,
  verbose: true,
  compressAfter: 3,
  retain: 30,
};

Deno.test("RUN_FLAGS names each environment variable OBS_TELEMETRY_ and the flag in capitals", () => {
  for (const flag of RUN_FLAGS) {
    if (flag.env === undefined) continue;
    assert.equal(flag.env, `OBS_TELEMETRY_${flag.name.toUpperCase().replaceAll("-", "_")}`);
  }
});

Deno.test("SERVER_ENV_VARS holds the variable of every flag that has one", () => {
  const withEnv = RUN_FLAGS.flatMap((flag) => flag.env === undefined ? [] : [flag.env]);
  assert.deepEqual(SERVER_ENV_VARS.toSorted(), withEnv.toSorted());
  assert.equal(new Set(SERVER_ENV_VARS).size, SERVER_ENV_VARS.length);
});

Deno.test("SERVER_ENV_VARS is the --allow-env list of every deno.json task", () => {
  const tasks = Object.entries(denoJson.tasks).filter(([, task]) => task.includes("--allow-env"));
  assert.ok(tasks.length > 0);
  for (const [name, task] of tasks) {
    const list = /--allow-env=(\S+)/.exec(task)?.[1]?.split(",");
    assert.ok(list, `task ${name} grants every variable: ${task}`);
    // Deno grants a set, but operators compare these lines with CONTRACT 6 and the README.
    assert.deepEqual(list, SERVER_ENV_VARS, `task ${name}`);
  }
});

Deno.test("permissionFlags() grants exactly SERVER_ENV_VARS", () => {
  const flags = permissionFlags({ siteDir: "/srv/site", host: "localhost", port: 6562 });
  assert.ok(flags.includes(`--allow-env=${SERVER_ENV_VARS.join(",")}`), flags.join(" "));
});

Deno.test("HELP_TEXT.run lists every flag of the table, in its order, with its variable", () => {
  const help = HELP_TEXT.run!;
  let at = 0;
  for (const flag of RUN_FLAGS) {
    const line = `  --${flag.name}${flag.arg === undefined ? "" : ` ${flag.arg}`} `;
    const found = help.indexOf(line, at);
    assert.ok(found > at, `--${flag.name} after the previous flag`);
    at = found;
    const next = RUN_FLAGS[RUN_FLAGS.indexOf(flag) + 1];
    const entry = help.slice(found, next ? help.indexOf(`  --${next.name}`, found) : undefined);
    assert.ok(entry.includes(flag.help), `--${flag.name}: ${flag.help}`);
    if (flag.env !== undefined) assert.ok(entry.includes(`[env ${flag.env}`), entry);
  }
  assert.ok(help.endsWith("  -h, --help            Show this help\n"));
});

Deno.test("HELP_TEXT.run shows the defaults the server really uses", () => {
  const shown = (name: string) => {
    const entry = HELP_TEXT.run!.split(/\n(?= {2}-)/).find((e) => e.startsWith(`  --${name} `));
    return /default ([^\]]+)\]/.exec(entry ?? "")?.[1];
  };
  assert.equal(shown("site-dir"), DEFAULT_SITE_DIR);
  assert.equal(shown("host"), DEFAULT_HOST);
  assert.equal(shown("port"), String(DEFAULT_PORT));
  assert.equal(shown("site-types"), DEFAULT_SITE_TYPES.join(","));
  assert.equal(shown("max-body"), String(DEFAULT_MAX_BODY));
  assert.equal(shown("max-types"), String(DEFAULT_MAX_TYPES));
  assert.equal(shown("max-snapshot"), String(DEFAULT_MAX_SNAPSHOT_BYTES));
});

Deno.test("runParseOptions() accepts every flag that runFlagArgs() writes", () => {
  const args = runFlagArgs(EVERY_FLAG);
  const { values } = parseArgs({ args, options: runParseOptions(), strict: true });
  assert.deepEqual(Object.keys(values).toSorted(), RUN_FLAGS.map((f) => f.name).toSorted());
});

Deno.test("resolveRunFlags() reads back every value runFlagArgs() writes", () => {
  const args = runFlagArgs(EVERY_FLAG);
  const { values } = parseArgs({ args, options: runParseOptions(), strict: true });
  assert.deepEqual(resolveRunFlags(values, noEnv), EVERY_FLAG);
});

Deno.test("resolveRunFlags() takes a flag over its variable and a variable over the default", () => {
  const env = (name: string) =>
    ({ OBS_TELEMETRY_PORT: "7002", OBS_TELEMETRY_FSYNC: "never" })[
      name as "OBS_TELEMETRY_PORT"
    ];
  const values = resolveRunFlags({ port: "7003", tz: "UTC" }, env);
  assert.equal(values.port, 7003);
  assert.equal(values.fsync, "never");
  assert.equal(values.siteDir, DEFAULT_SITE_DIR);
  assert.equal(values.host, DEFAULT_HOST);
});

Deno.test("resolveRunFlags() leaves out what the server defaults itself", () => {
  const values = resolveRunFlags({ tz: "UTC" }, noEnv);
  assert.deepEqual(values, {
    siteDir: DEFAULT_SITE_DIR,
    host: DEFAULT_HOST,
    port: DEFAULT_PORT,
    timeZone: "UTC",
    fsync: "interval",
    allowRunRoots: [],
    insecure: false,
    verbose: false,
  });
});

Deno.test("resolveRunFlags() throws RangeError naming the flag of a bad value", () => {
  assert.throws(() => resolveRunFlags({ "max-types": "0" }, noEnv), {
    name: "RangeError",
    message: '--max-types must be a positive whole number, not "0"',
  });
  assert.throws(
    () => resolveRunFlags({}, (name) => name === "OBS_TELEMETRY_FSYNC" ? "x" : undefined),
    {
      name: "RangeError",
      message: '--fsync must be always, interval or never, not "x"',
    },
  );
});

Deno.test("spawnServer() takes an option for every run flag and no other but output and wait", () => {
  // A compile-time list of SpawnOptions: a key added there and not here fails `deno check`.
  const spawnKeys: Record<keyof SpawnOptions, "flag" | "spawn"> = {
    siteDir: "flag",
    host: "flag",
    port: "flag",
    timeZone: "flag",
    siteTypes: "flag",
    fsync: "flag",
    token: "flag",
    allowRunRoots: "flag",
    maxBody: "flag",
    maxTypes: "flag",
    maxSnapshotBytes: "flag",
    insecure: "flag",
    verbose: "flag",
    compressAfter: "flag",
    retain: "flag",
    output: "spawn",
    readyTimeoutMs: "spawn",
  };
  const flagKeys = Object.entries(spawnKeys).filter(([, kind]) => kind === "flag").map(([k]) => k);
  assert.deepEqual(flagKeys.toSorted(), RUN_FLAGS.map((f) => f.key).toSorted());
});

Deno.test("spawnServer() passes --max-types to the child", async () => {
  await using tmp = await tempDir();
  await using server = await spawnServer({
    siteDir: tmp.path,
    host: "127.0.0.1",
    port: 0,
    timeZone: "UTC",
    maxTypes: 2,
    output: "null",
  });
  const cmdline = (await Deno.readTextFile(`/proc/${server.pid}/cmdline`)).split("\0");
  const at = cmdline.indexOf("--max-types");
  assert.ok(at > 0 && cmdline[at + 1] === "2", cmdline.join(" "));
  const client = new TelemetryClient({ baseUrl: server.url });
  await client.postEvent("weather", { wind_mps: 2.1 });
  await client.postEvent("dome", { open: true });
  const err = await client.postEvent("status", { ok: true }).catch((e) => e);
  assert.ok(err instanceof TelemetryHttpError, String(err));
  assert.equal(err.status, 400);
  assert.match(err.detail, /--max-types/);
});
