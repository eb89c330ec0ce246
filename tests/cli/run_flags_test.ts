/**
 * The table of `run` flags and what is derived from it: the help, the `parseArgs` options, the
 * `--allow-env` list and the arguments `spawnServer()` gives its child.
 * @module
 */

import assert from "node:assert/strict";
import { parseArgs } from "node:util";
import denoJson from "../../deno.json" with { type: "json" };
import { HELP_TEXT } from "../../cli.ts";
import {
  DEFAULT_BODY_TIMEOUT_MS,
  DEFAULT_HOST,
  DEFAULT_MAX_BODY,
  DEFAULT_MAX_SNAPSHOT_BYTES,
  DEFAULT_MAX_TYPES,
  DEFAULT_MIN_FREE_BYTES,
  DEFAULT_PORT,
  DEFAULT_SITE_TYPES,
  permissionFlags,
  SERVER_ENV_VARS,
  type SpawnOptions,
  spawnServer,
} from "../../server.ts";
import { TelemetryClient, TelemetryHttpError } from "../../client.ts";
import {
  DEFAULT_SITE_DIR,
  parseBytes,
  resolveRunFlags,
  RUN_FLAGS,
  runFlagArgs,
  type RunFlagValues,
  runParseOptions,
} from "../../cli/flags.ts";
import { cliRunArgs, freePort, postJson, tempDir, testServer } from "../_shared/util.ts";
import { join } from "node:path";
import { siteInUse } from "../../cli/serve.ts";
import { DEFAULT_MAX_HISTORY } from "../../http/history.ts";
import { SiteInUseError } from "../../core/errors.ts";
import { SiteLock } from "../../store/lock.ts";

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
  maxHistory: 3,
  maxTypes: 12,
  maxSnapshotBytes: 4096,
  insecure: true,
  verbose: true,
  typesFile: "/etc/obs/types.json",
  minFreeBytes: 2 * 1024 ** 3,
  publicRead: true,
  trustLoopback: true,
  wrapCurrent: true,
  tlsCert: "/etc/obs/cert.pem",
  tlsKey: "/etc/obs/key.pem",
  logFormat: "json",
  compressAfter: 3,
  retain: 30,
  headTimeout: 2.5,
  idleTimeout: 90,
  maxConnsPerPeer: 8,
  maxConns: 300,
  bodyTimeout: 4.5,
  notify: ["http://127.0.0.1:9/hook", "https://ntfy.sh/obs-site"],
  notifyFormat: "ntfy",
  alpacaPort: 11111,
  alpacaDiscoveryPort: 32228,
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
  // The tasks that run the service or the CLI (build:npm runs the TypeScript compiler instead);
  // the forwarder is its own program with its own list (FORWARD_ENV_VARS, tests/fleet/forward_test.ts).
  const tasks = Object.entries(denoJson.tasks).filter(([, task]) =>
    task.includes("--allow-env") && / cli\.ts\b/.test(task)
  );
  assert.ok(tasks.length > 0);
  for (const [name, task] of tasks) {
    const list = /--allow-env=(\S+)/.exec(task)?.[1]?.split(",");
    assert.ok(list, `task ${name} grants every variable: ${task}`);
    // Deno grants a set, but operators compare these lines with docs/cli.md and the README.
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
    const entry = help.slice(found, next ? help.indexOf(`  --${next.name} `, found) : undefined);
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
  assert.equal(shown("max-history"), String(DEFAULT_MAX_HISTORY));
  assert.equal(shown("max-types"), String(DEFAULT_MAX_TYPES));
  assert.equal(shown("max-snapshot"), String(DEFAULT_MAX_SNAPSHOT_BYTES));
  assert.equal(shown("body-timeout"), String(DEFAULT_BODY_TIMEOUT_MS / 1000));
  assert.equal(parseBytes(shown("min-free")!), DEFAULT_MIN_FREE_BYTES);
});

Deno.test("--min-free reads bytes with binary units and names the flag for anything else", () => {
  assert.equal(parseBytes("0"), 0);
  assert.equal(parseBytes("1073741824"), 1024 ** 3);
  assert.equal(parseBytes("1GiB"), 1024 ** 3);
  assert.equal(parseBytes("1.5g"), 1.5 * 1024 ** 3);
  assert.equal(parseBytes("500M"), 500 * 1024 ** 2);
  for (const bad of ["", "-1", "1 GB?", "lots", "1e9", "9".repeat(30), "2X"]) {
    assert.throws(() => parseBytes(bad), {
      name: "RangeError",
      message:
        `--min-free must be a size in bytes such as 1073741824, 500M or 1GiB (units K, M, G, T, binary), not "${bad}"`,
    });
  }
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
    publicRead: false,
    trustLoopback: false,
    wrapCurrent: false,
    notify: [],
  });
});

Deno.test("resolveRunFlags() throws RangeError naming the flag or variable of a bad value", () => {
  assert.throws(() => resolveRunFlags({ "max-types": "0" }, noEnv), {
    name: "RangeError",
    message: '--max-types must be a positive whole number, not "0"',
  });
  assert.throws(() => resolveRunFlags({ "max-history": "0" }, noEnv), {
    name: "RangeError",
    message: '--max-history must be a positive whole number, not "0"',
  });
  assert.throws(
    () => resolveRunFlags({}, (name) => name === "OBS_TELEMETRY_FSYNC" ? "x" : undefined),
    {
      name: "RangeError",
      message:
        'OBS_TELEMETRY_FSYNC must be always, interval or never, not "x"; fix or unset the variable',
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
    maxHistory: "flag",
    maxTypes: "flag",
    maxSnapshotBytes: "flag",
    insecure: "flag",
    verbose: "flag",
    typesFile: "flag",
    minFreeBytes: "flag",
    publicRead: "flag",
    trustLoopback: "flag",
    wrapCurrent: "flag",
    tlsCert: "flag",
    tlsKey: "flag",
    logFormat: "flag",
    compressAfter: "flag",
    retain: "flag",
    headTimeout: "flag",
    idleTimeout: "flag",
    maxConnsPerPeer: "flag",
    maxConns: "flag",
    bodyTimeout: "flag",
    notify: "flag",
    notifyFormat: "flag",
    alpacaPort: "flag",
    alpacaDiscoveryPort: "flag",
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

// --- Messages that name what the operator set (docs/cli.md) ---------------------------------

Deno.test("resolveRunFlags() names the environment variable, not the flag, for a bad variable", () => {
  const cases: [string, string, string][] = [
    ["OBS_TELEMETRY_PORT", "abc", 'OBS_TELEMETRY_PORT must be a number from 0 to 65535, not "abc"'],
    [
      "OBS_TELEMETRY_PORT",
      "70000",
      'OBS_TELEMETRY_PORT must be a number from 0 to 65535, not "70000"',
    ],
    [
      "OBS_TELEMETRY_FSYNC",
      "sometimes",
      'OBS_TELEMETRY_FSYNC must be always, interval or never, not "sometimes"',
    ],
    ["OBS_TELEMETRY_TZ", "Mars/Olympus", "OBS_TELEMETRY_TZ: "],
  ];
  for (const [name, value, message] of cases) {
    assert.throws(
      () =>
        resolveRunFlags(
          {},
          (n) => n === name ? value : n === "OBS_TELEMETRY_TZ" ? "UTC" : undefined,
        ),
      (err: Error) => {
        assert.ok(err instanceof RangeError);
        assert.ok(err.message.startsWith(message), err.message);
        assert.ok(err.message.endsWith("; fix or unset the variable"), err.message);
        assert.ok(!/--(port|fsync|tz)\b/.test(err.message), err.message);
        return true;
      },
    );
  }
  // The flag, when given, wins over a bad variable, and a bad flag is named as the flag.
  const env = (n: string) => n === "OBS_TELEMETRY_PORT" ? "abc" : undefined;
  assert.equal(resolveRunFlags({ port: "7000", tz: "UTC" }, env).port, 7000);
  assert.throws(() => resolveRunFlags({ port: "x", tz: "UTC" }, env), {
    message: '--port must be a number from 0 to 65535, not "x"',
  });
});

Deno.test("resolveRunFlags() reads --fsync and --log-format in any letter case", () => {
  const values = resolveRunFlags({ tz: "UTC", fsync: "ALWAYS", "log-format": "Json" }, noEnv);
  assert.equal(values.fsync, "always");
  assert.equal(values.logFormat, "json");
  const fromEnv = resolveRunFlags(
    { tz: "UTC" },
    (n) => n === "OBS_TELEMETRY_FSYNC" ? "Never" : undefined,
  );
  assert.equal(fromEnv.fsync, "never");
  assert.throws(() => resolveRunFlags({ tz: "UTC", "log-format": "xml" }, noEnv), {
    message: '--log-format must be text or json, not "xml"',
  });
});

const decoder = new TextDecoder();

/** Runs the CLI with an environment and returns exit code and stderr. */
async function cliWithEnv(args: string[], env: Record<string, string>) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-all", new URL("../../cli.ts", import.meta.url).pathname, ...args],
    env,
    stdout: "piped",
    stderr: "piped",
  }).output();
  return { code: out.code, stderr: decoder.decode(out.stderr) };
}

Deno.test("obs-utils telemetry run and stop name OBS_TELEMETRY_PORT for a bad port in the environment", async () => {
  await using tmp = await tempDir();
  const run = await cliWithEnv(["telemetry", "run", "--site-dir", tmp.path], {
    OBS_TELEMETRY_PORT: "65536",
  });
  assert.equal(run.code, 2);
  assert.equal(run.stderr.trimEnd().split("\n").length, 1, run.stderr);
  assert.match(
    run.stderr,
    /OBS_TELEMETRY_PORT must be a number from 0 to 65535, not "65536"; fix or unset the variable/,
  );
  assert.doesNotMatch(run.stderr, /--port must/);
  const stop = await cliWithEnv(["telemetry", "stop"], { OBS_TELEMETRY_PORT: "http" });
  assert.equal(stop.code, 2);
  assert.match(stop.stderr, /OBS_TELEMETRY_PORT must be a number from 0 to 65535, not "http"/);
});

Deno.test("obs-utils telemetry run refused a site directory names the holding process, its address and how to stop it", async () => {
  await using tmp = await tempDir();
  const port = freePort();
  const holder = new Deno.Command(Deno.execPath(), {
    args: cliRunArgs(tmp.path, port),
    stdout: "piped",
    stderr: "null",
  }).spawn();
  try {
    const reader = holder.stdout.pipeThrough(new TextDecoderStream()).getReader();
    let seen = "";
    while (!seen.includes("listening on")) {
      const { value, done } = await reader.read();
      if (done) break;
      seen += value;
    }
    const second = freePort();
    const out = await new Deno.Command(Deno.execPath(), {
      args: cliRunArgs(tmp.path, second),
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(out.code, 1);
    const real = await Deno.realPath(tmp.path);
    assert.equal(
      decoder.decode(out.stderr),
      `error: site directory ${real} is in use by another telemetry server (pid ${holder.pid} at http://127.0.0.1:${port}); stop it with 'obs-utils telemetry stop --host 127.0.0.1 --port ${port}' or choose another --site-dir\n`,
    );
    assert.equal(decoder.decode(out.stdout), "");
    reader.releaseLock();
  } finally {
    holder.kill("SIGTERM");
    await holder.stdout.cancel().catch(() => {});
    await holder.status;
  }
});

Deno.test("siteInUse() falls back to the pid, or to generic advice, when the lock file says less", () => {
  assert.equal(
    siteInUse(new SiteInUseError("/srv/t", { pid: 42 })),
    "site directory /srv/t is in use by another telemetry server (pid 42); stop it with 'kill 42' (it is not listening yet, or is a migration) or choose another --site-dir",
  );
  assert.equal(
    siteInUse(new SiteInUseError("/srv/t", { pid: 42, url: "http://localhost:6562" })),
    "site directory /srv/t is in use by another telemetry server (pid 42 at http://localhost:6562); stop it with 'obs-utils telemetry stop' or choose another --site-dir",
  );
  assert.equal(
    siteInUse(new SiteInUseError("/srv/t", { url: "http://[::1]:7000" })),
    "site directory /srv/t is in use by another telemetry server (at http://[::1]:7000); stop it with 'obs-utils telemetry stop --host ::1 --port 7000' or choose another --site-dir",
  );
  assert.match(
    siteInUse(new SiteInUseError("/srv/t")),
    /in use by another telemetry server; stop it \(/,
  );
});

Deno.test("the site lock file records the holder's pid and address, also after it was deleted and taken again", async () => {
  await using tmp = await tempDir();
  const warnings: string[] = [];
  await using server = await testServer({
    siteDir: tmp.path,
    onWarning: (message) => warnings.push(message),
  });
  const lockPath = join(server.service.siteDir, ".lock");
  assert.equal(await Deno.readTextFile(lockPath), `${Deno.pid}\n${server.url}\n`);
  await Deno.remove(lockPath);
  for (let i = 0; i < 50 && !warnings.some((w) => w.includes("took the lock again")); i++) {
    await postJson(`${server.url}/event`, { type: "a", data: { i } });
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.ok(warnings.some((w) => w.includes("took the lock again")), warnings.join("\n"));
  assert.equal(await Deno.readTextFile(lockPath), `${Deno.pid}\n${server.url}\n`);
  // A second open in this process is refused with what the file says.
  await assert.rejects(() => testServer({ siteDir: tmp.path }), (err: unknown) => {
    assert.ok(err instanceof SiteInUseError);
    assert.equal(err.holderPid, Deno.pid);
    assert.equal(err.holderUrl, server.url);
    return true;
  });
});

Deno.test("a forged lock file cannot put escape codes or a huge text into the in-use message", async () => {
  await using tmp = await tempDir();
  const lock = await SiteLock.acquire(tmp.path);
  try {
    for (
      const [text, pid, url] of [
        ["12\nhttp://x\u001b[31m:1\n", 12, undefined],
        [`7\nhttp://${"a".repeat(5000)}\n`, 7, undefined],
        ["not a pid\nhttps://127.0.0.1:9\n", undefined, "https://127.0.0.1:9"],
        ["", undefined, undefined],
      ] as const
    ) {
      await Deno.writeTextFile(join(tmp.path, ".lock"), text);
      await assert.rejects(() => SiteLock.acquire(tmp.path), (err: unknown) => {
        assert.ok(err instanceof SiteInUseError);
        assert.equal(err.holderPid, pid);
        assert.equal(err.holderUrl, url);
        // deno-lint-ignore no-control-regex
        assert.ok(!/[\u0000-\u001f]/.test(siteInUse(err)), siteInUse(err));
        return true;
      });
    }
  } finally {
    await lock.release();
  }
});
