/**
 * The `--notify` and `--notify-format` flags (docs/safety.md#notifications): the variables, the
 * checks of the URLs, the scoped permissions, and start-up refusals in one line.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { resolveRunFlags, runFlagArgs } from "../../cli/flags.ts";
import { runPermissionFlags } from "../../cli/permissions.ts";
import { tempDir, testServer } from "../_shared/util.ts";
import { closedPort } from "../_shared/notify_util.ts";
// --- The flags ------------------------------------------------------------------------------

const noEnv = () => undefined;

Deno.test("--notify is repeatable and OBS_TELEMETRY_NOTIFY takes the URLs separated by commas", () => {
  const given = resolveRunFlags(
    { tz: "UTC", notify: ["https://ntfy.sh/a", "http://10.0.0.5:8080/hook"] },
    noEnv,
  );
  assert.deepEqual(given.notify, ["https://ntfy.sh/a", "http://10.0.0.5:8080/hook"]);
  const env = (name: string) =>
    ({
      OBS_TELEMETRY_NOTIFY: "https://ntfy.sh/a, http://10.0.0.5:8080/hook",
      OBS_TELEMETRY_NOTIFY_FORMAT: "NTFY",
    })[name as "OBS_TELEMETRY_NOTIFY"];
  const fromEnv = resolveRunFlags({ tz: "UTC" }, env);
  assert.deepEqual(fromEnv.notify, ["https://ntfy.sh/a", "http://10.0.0.5:8080/hook"]);
  assert.equal(fromEnv.notifyFormat, "ntfy");
  assert.deepEqual(runFlagArgs(fromEnv).slice(-6), [
    "--notify",
    "https://ntfy.sh/a",
    "--notify",
    "http://10.0.0.5:8080/hook",
    "--notify-format",
    "ntfy",
  ]);
});

Deno.test("a bad --notify URL or format names the flag, or the variable it came from", () => {
  for (const bad of ["ntfy.sh/obs", "ftp://example.org/x", "file:///etc/passwd", ""]) {
    assert.throws(() => resolveRunFlags({ tz: "UTC", notify: [bad] }, noEnv), {
      name: "RangeError",
      message:
        `--notify must be an http:// or https:// URL such as https://ntfy.sh/my-topic, not "${bad}"`,
    });
  }
  assert.throws(
    () => resolveRunFlags({ tz: "UTC", notify: ["https://u:secret@ntfy.sh/a"] }, noEnv),
    {
      message:
        "--notify must not hold a user name or password (https://USER:PASSWORD@...); give the receiver's secret in the URL's path or query instead",
    },
  );
  assert.throws(
    () =>
      resolveRunFlags(
        { tz: "UTC" },
        (n) => n === "OBS_TELEMETRY_NOTIFY" ? "https://a/,gopher://b" : undefined,
      ),
    {
      message:
        'OBS_TELEMETRY_NOTIFY must be an http:// or https:// URL such as https://ntfy.sh/my-topic, not "gopher://b"; fix or unset the variable',
    },
  );
  assert.throws(() => resolveRunFlags({ tz: "UTC", "notify-format": "slack" }, noEnv), {
    message: '--notify-format must be json or ntfy, not "slack"',
  });
});

Deno.test("the scoped run permissions allow the notify hosts at their ports, and nothing else more", () => {
  const flags = runPermissionFlags({
    siteDir: "/srv/t",
    host: "localhost",
    port: 6562,
    notify: [
      "https://ntfy.sh/obs?auth=x",
      "http://10.0.0.5:8080/hook",
      "https://ntfy.sh/other",
      "http://[::1]/h",
    ],
  });
  assert.equal(flags[0], "--allow-net=localhost:6562,ntfy.sh:443,10.0.0.5:8080,[::1]:80");
  assert.ok(
    flags.some((f) =>
      f.startsWith("--allow-env=") && f.includes("OBS_TELEMETRY_NOTIFY,OBS_TELEMETRY_NOTIFY_FORMAT")
    ),
  );
});

const decoder = new TextDecoder();

Deno.test("obs-utils telemetry run refuses a bad --notify URL with one line and exit 2", async () => {
  await using tmp = await tempDir();
  for (
    const [args, env, message] of [
      [
        ["--notify", "ntfy.sh/obs"],
        {},
        '--notify must be an http:// or https:// URL such as https://ntfy.sh/my-topic, not "ntfy.sh/obs"',
      ],
      [
        [],
        { OBS_TELEMETRY_NOTIFY: "ftp://x/y" },
        'OBS_TELEMETRY_NOTIFY must be an http:// or https:// URL such as https://ntfy.sh/my-topic, not "ftp://x/y"; fix or unset the variable',
      ],
    ] as const
  ) {
    const out = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--allow-all",
        new URL("../../cli.ts", import.meta.url).pathname,
        "telemetry",
        "run",
        "--site-dir",
        tmp.path,
        "--port",
        "0",
        ...args,
      ],
      env: { ...env, NO_COLOR: "1" },
      stdout: "piped",
      stderr: "piped",
    }).output();
    const stderr = decoder.decode(out.stderr);
    assert.equal(out.code, 2, stderr);
    assert.equal(stderr.trimEnd().split("\n").length, 1, stderr);
    assert.equal(
      stderr,
      `obs-utils telemetry run: ${message}. Run 'obs-utils telemetry run --help' for usage.\n`,
    );
    assert.equal(decoder.decode(out.stdout), "");
  }
});

Deno.test("run refuses to start, in one line naming the permission, when it may not connect to a --notify host", async () => {
  await using tmp = await tempDir();
  const port = closedPort();
  const stopAfter = new AbortController();
  const timer = setTimeout(() => stopAfter.abort(), 20_000);
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      `--allow-net=127.0.0.1:${port}`,
      `--allow-read=${tmp.path}`,
      `--allow-write=${tmp.path}`,
      "--allow-env",
      new URL("../../cli.ts", import.meta.url).pathname,
      "telemetry",
      "run",
      "--host",
      "127.0.0.1",
      "--port",
      String(port),
      "--tz",
      "UTC",
      "--site-dir",
      tmp.path,
      "--notify",
      "http://127.0.0.2:9/hook?auth=s3cret",
    ],
    env: { NO_COLOR: "1" },
    stdout: "piped",
    stderr: "piped",
    // A service that started anyway is stopped: bounded.
    signal: stopAfter.signal,
  }).output().finally(() => clearTimeout(timer));
  const stderr = decoder.decode(out.stderr);
  assert.equal(out.code, 1, stderr);
  assert.equal(
    stderr,
    "error: Permission denied: requires net access to 127.0.0.2:9; add --allow-net=127.0.0.2:9\n",
  );
  assert.equal(decoder.decode(out.stdout), "");
});

Deno.test("startServer() refuses a notify URL that is not http(s) before opening the site directory", async () => {
  await using tmp = await tempDir();
  await assert.rejects(
    () => testServer({ siteDir: join(tmp.path, "site"), notify: ["mailto:ops@example.org"] }),
    {
      name: "ConfigError",
      message:
        '--notify must be an http:// or https:// URL such as https://ntfy.sh/my-topic, not "mailto:ops@example.org"',
    },
  );
  await assert.rejects(() => Deno.stat(join(tmp.path, "site")), Deno.errors.NotFound);
});
