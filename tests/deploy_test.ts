/**
 * The deploy files (docs/operations.md): the systemd unit passes `systemd-analyze verify` and is
 * hardened; its ExecStart and the supervisord command are the same command, whose `--allow-*`
 * flags are exactly `permissionFlags()` for its own site directory, host and port; and that very
 * command, moved to a temp dir and a free port, runs a server that answers and stops with 0.
 * @module
 */
import assert from "node:assert/strict";
import denoJson from "../deno.json" with { type: "json" };
import { permissionFlags, SERVICE_V8_FLAGS } from "../cli/spawn.ts";
import { resolveRunFlags, runParseOptions } from "../cli/flags.ts";
import { parseArgs } from "node:util";
import { CLI, freePort, readSiteLines, tempDir } from "./_shared/util.ts";
import { assertUnitVerifies, verifyUnit } from "./_shared/deploy_util.ts";

const root = new URL("../deploy/", import.meta.url);
const UNIT = await Deno.readTextFile(new URL("obs-telemetry.service", root));
const SUPERVISOR = await Deno.readTextFile(new URL("supervisord.conf", root));

/** The unit's `[Service]` settings, continuation lines joined; repeated keys keep every value. */
function unitSettings(text: string): Map<string, string[]> {
  const joined = text.replace(/\\\n\s*/g, " ");
  const settings = new Map<string, string[]>();
  let section = "";
  for (const raw of joined.split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#") || line.startsWith(";")) continue;
    const header = /^\[(.+)\]$/.exec(line);
    if (header) {
      section = header[1]!;
      continue;
    }
    const at = line.indexOf("=");
    const key = `${section}.${line.slice(0, at)}`;
    settings.set(key, [...(settings.get(key) ?? []), line.slice(at + 1)]);
  }
  return settings;
}

function one(settings: Map<string, string[]>, key: string): string {
  const values = settings.get(key);
  assert.equal(values?.length, 1, `${key}: ${JSON.stringify(values)}`);
  return values![0]!;
}

const unit = unitSettings(UNIT);
const supervisor = unitSettings(SUPERVISOR);
const execStart = one(unit, "Service.ExecStart").split(/\s+/);
const command = one(supervisor, "program:obs-telemetry.command").split(/\s+/);

/** The command split into deno, its flags, the script, and the `telemetry run` flags. */
function splitCommand(argv: string[]) {
  const script = argv.findIndex((a) => a.endsWith("/cli.ts"));
  assert.ok(script > 0, argv.join(" "));
  assert.deepEqual(argv.slice(script + 1, script + 3), ["telemetry", "run"]);
  const runArgs = argv.slice(script + 3);
  const { values } = parseArgs({ args: runArgs, options: runParseOptions(), strict: true });
  return {
    deno: argv[0]!,
    denoFlags: argv.slice(2, script),
    script: argv[script]!,
    runArgs,
    run: resolveRunFlags(values, () => undefined),
  };
}

Deno.test("the systemd unit and the supervisord program run the same command", () => {
  assert.deepEqual(command, execStart);
});

Deno.test("the unit's --allow-* flags are exactly permissionFlags() for its --site-dir, --host and --port", () => {
  const { deno, denoFlags, run } = splitCommand(execStart);
  assert.equal(deno, "/usr/bin/deno");
  assert.equal(execStart[1], "run");
  const expected = [
    "--no-prompt",
    ...SERVICE_V8_FLAGS,
    ...permissionFlags({ siteDir: run.siteDir, host: run.host, port: run.port }),
  ];
  assert.deepEqual(denoFlags, expected);
  // The recommended LAN set-up of docs/operations.md, the token coming from the environment file.
  assert.equal(run.host, "0.0.0.0");
  assert.equal(run.publicRead, true);
  assert.equal(run.trustLoopback, true);
  assert.equal(run.token, undefined, "the token must not be on the command line (ps shows it)");
});

Deno.test("the unit is hardened: dedicated user, strict read-only system, only the site directory writable, restarted on failure", () => {
  const { run } = splitCommand(execStart);
  assert.equal(one(unit, "Service.User"), "obs-telemetry");
  assert.equal(one(unit, "Service.Group"), "obs-telemetry");
  assert.equal(one(unit, "Service.ProtectSystem"), "strict");
  assert.equal(one(unit, "Service.ReadWritePaths"), run.siteDir);
  assert.equal(one(unit, "Service.WorkingDirectory"), run.siteDir);
  assert.equal(one(unit, "Service.Restart"), "on-failure");
  assert.equal(one(unit, "Service.KillSignal"), "SIGTERM");
  assert.equal(one(unit, "Service.NoNewPrivileges"), "yes");
  assert.equal(one(unit, "Service.ProtectHome"), "yes");
  assert.equal(one(unit, "Service.CapabilityBoundingSet"), "");
  // V8's JIT needs writable-and-executable memory.
  assert.equal(unit.has("Service.MemoryDenyWriteExecute"), false);
  assert.equal(one(supervisor, "program:obs-telemetry.user"), "obs-telemetry");
  assert.equal(one(supervisor, "program:obs-telemetry.autorestart"), "unexpected");
  assert.equal(one(supervisor, "program:obs-telemetry.exitcodes"), "0");
  assert.equal(one(supervisor, "program:obs-telemetry.stopsignal"), "TERM");
});

Deno.test("the compile tasks for x86_64 and aarch64 carry the compile task's permission flags and their target", () => {
  const tasks = denoJson.tasks as Record<string, string>;
  const flagsOf = (task: string) =>
    task.split(/\s+/).filter((a) => a.startsWith("--allow-") || a.startsWith("--v8-flags"));
  const base = flagsOf(tasks.compile!);
  assert.ok(base.length >= 5);
  for (
    const [task, target] of [["compile:x86_64", "x86_64-unknown-linux-gnu"], [
      "compile:aarch64",
      "aarch64-unknown-linux-gnu",
    ]]
  ) {
    const text = tasks[task!]!;
    assert.deepEqual(flagsOf(text), base, String(task));
    assert.match(text, new RegExp(`--target ${target} `), String(task));
    assert.match(text, / cli\.ts$/, String(task));
  }
});

Deno.test("systemd-analyze verify accepts the unit without a warning", async () => {
  if (!(await assertUnitVerifies(UNIT, "obs-telemetry.service"))) return;
  // And it does catch a mistake, so the check above can fail.
  const bad = await verifyUnit(
    UNIT.replace("Restart=on-failure", "Restart=sometimes"),
    "obs-telemetry.service",
  );
  assert.match(bad!.stderr, /restart specifier/);
});

Deno.test("the unit's exact command, moved to a temp site directory and a free port, serves and stops with 0 on SIGTERM", async () => {
  await using site = await tempDir();
  const port = freePort();
  const { run } = splitCommand(execStart);
  // The same words with the site directory, the port and the address swapped for test ones.
  const moved = execStart.slice(1).map((arg) =>
    arg.replaceAll(run.siteDir, site.path).replaceAll(`:${run.port}`, `:${port}`)
      .replaceAll("0.0.0.0", "127.0.0.1").replace(/^\/opt\/obs-telemetry\/cli\.ts$/, CLI)
  ).map((arg, i, all) => all[i - 1] === "--port" ? String(port) : arg);
  const child = new Deno.Command(Deno.execPath(), {
    args: moved,
    env: { NO_COLOR: "1", OBS_TELEMETRY_TOKEN: "unit-token", OBS_TELEMETRY_TZ: "UTC" },
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  const ready = await lines.read();
  assert.match(
    ready.value ?? "",
    /listening on http:\/\/127\.0\.0\.1:\d+ .*token required, reads public, loopback trusted/,
  );
  const base = `http://127.0.0.1:${port}`;
  // From this machine no token is needed (trust-loopback); the token variable was readable.
  const posted = await fetch(`${base}/event`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: '{"type":"weather","data":{"wind_mps":1}}',
  });
  assert.equal(posted.status, 200, await posted.clone().text());
  await posted.body?.cancel();
  child.kill("SIGTERM");
  const status = await child.status;
  await lines.cancel();
  const stderr = await new Response(child.stderr).text();
  assert.equal(status.code, 0, stderr);
  assert.equal((await readSiteLines(site.path)).length, 1);
});
