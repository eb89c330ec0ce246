/**
 * `obs-utils telemetry safety hold|release|waive|unwaive` and `safety --profile` (docs/cli.md,
 * docs/safety.md#safety-events, #waivers) as child processes against a real service on 127.0.0.1
 * port 0.
 * @module
 */

import assert from "node:assert/strict";
import { parseTypes } from "../../core/types_registry.ts";
import type { ServerHandle } from "../../server.ts";
import { CLI, getJson, postJson, siteEventData, tempDir, testServer } from "../_shared/util.ts";

const TYPES = parseTypes(
  JSON.stringify({
    weather: {
      critical: true,
      stale_after_s: 3600,
      fields: { wind_mps: { unit: "m/s", alarm_above: 15 } },
    },
    roof_b: { critical_for: ["roofb"], stale_after_s: 3600, fields: { rain: { alarm_if: true } } },
  }),
  "types.json",
);

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** `obs-utils telemetry safety ARGS` against the server, with only the given variables set. */
async function runSafety(
  server: ServerHandle | undefined,
  args: string[],
  env: Record<string, string> = {},
): Promise<Run> {
  const at = server ? ["--host", "127.0.0.1", "--port", String(server.addr.port)] : [];
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-net", "--allow-env", CLI, "telemetry", "safety", ...args, ...at],
    env,
    clearEnv: true,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const d = new TextDecoder();
  return { code: out.code, stdout: d.decode(out.stdout), stderr: d.decode(out.stderr) };
}

async function safeSite(siteDir: string, options: { token?: string } = {}): Promise<ServerHandle> {
  const server = await testServer({ siteDir, types: TYPES, ...options });
  const headers: Record<string, string> = options.token
    ? { authorization: `Bearer ${options.token}` }
    : {};
  for (const [type, data] of [["weather", { wind_mps: 3 }], ["roof_b", { rain: false }]] as const) {
    assert.equal((await postJson(`${server.url}/event`, { type, data }, headers)).status, 200);
  }
  return server;
}

Deno.test("safety hold then release through the CLI returns the site to safe and leaves two telemetry.safety.external events with via cli", async () => {
  await using dir = await tempDir();
  await using server = await safeSite(dir.path);
  const hold = await runSafety(server, ["hold", "roof-jammed", "--reason", "roof motor stalled"]);
  assert.deepEqual(hold, {
    code: 0,
    stdout: "held roof-jammed (every profile): external: obs-utils telemetry safety hold: " +
      "roof motor stalled\nrelease it with: obs-utils telemetry safety release roof-jammed\n",
    stderr: "",
  });
  const unsafe = await runSafety(server, []);
  assert.equal(unsafe.code, 1);
  assert.match(
    unsafe.stdout,
    /^UNSAFE since \S+Z\n {2}external: obs-utils telemetry safety hold: roof motor stalled \(Id roof-jammed\)\n$/,
  );
  assert.deepEqual(await runSafety(server, ["release", "roof-jammed"]), {
    code: 0,
    stdout: "released roof-jammed\n",
    stderr: "",
  });
  assert.equal((await runSafety(server, ["--quiet"])).code, 0);
  const audit = await siteEventData(dir.path, "telemetry.safety.external");
  assert.deepEqual(audit.map((a) => [a.action, a.via, a.peer]), [
    ["set", "cli", "127.0.0.1"],
    ["clear", "cli", "127.0.0.1"],
  ]);
  assert.deepEqual(audit[0]!.event, {
    Source: "obs-utils telemetry safety hold",
    Name: "hold",
    Id: "roof-jammed",
    Type: "Safety",
    Trigger: "Active",
    Description: "roof motor stalled",
    EventTimeUtc: (audit[0]!.event as { EventTimeUtc: string }).EventTimeUtc,
  });
});

Deno.test("safety hold --source --profile holds only that profile, named by its source", async () => {
  await using dir = await tempDir();
  await using server = await safeSite(dir.path);
  const hold = await runSafety(server, [
    "hold",
    "dome-b-work",
    "--reason",
    "people in dome B",
    "--source",
    "night assistant",
    "--profile",
    "roofb",
  ]);
  assert.equal(hold.code, 0, hold.stderr);
  assert.match(hold.stdout, /^held dome-b-work \(profile roofb\): external: night assistant: /);
  const roofb = await runSafety(server, ["--profile", "roofb"]);
  assert.equal(roofb.code, 1);
  assert.match(
    roofb.stdout,
    /^UNSAFE since \S+Z \(profile roofb\)\n {2}external: night assistant: people in dome B \(Id dome-b-work\)\n$/,
  );
  const site = await runSafety(server, []);
  assert.equal(site.code, 0, site.stdout);
});

Deno.test("safety waive and unwaive through the CLI set and end a waiver, with the token from OBS_TELEMETRY_TOKEN", async () => {
  await using dir = await tempDir();
  const token = "cli-s3cret";
  await using server = await safeSite(dir.path, { token });
  const env = { OBS_TELEMETRY_TOKEN: token };
  const auth = { authorization: `Bearer ${token}` };
  await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 20 } }, auth);
  const waive = await runSafety(server, [
    "waive",
    "weather",
    "--for",
    "1h30m",
    "--reason",
    "anemometer iced",
  ], env);
  assert.equal(waive.code, 0, waive.stderr);
  const until = /^waived weather until (\S+Z) \(anemometer iced\)\n/.exec(waive.stdout)?.[1];
  assert.ok(until, waive.stdout);
  assert.match(waive.stdout, /\nend it early with: obs-utils telemetry safety unwaive weather\n$/);
  // 90 minutes from now, whole seconds rounded up.
  const left = Date.parse(until) - Date.now();
  assert.ok(left > 5_300_000 && left <= 5_401_000, `${left} ms`);
  const safe = await runSafety(server, [], env);
  assert.deepEqual(safe, {
    code: 0,
    stdout: `SAFE since ${
      /since (\S+):/.exec(safe.stdout)?.[1]
    }: 0 critical types fine, 1 waived\n  weather: WAIVED until ${until} (anemometer iced)\n`,
    stderr: "",
  });
  assert.deepEqual(await runSafety(server, ["unwaive", "weather"], env), {
    code: 0,
    stdout: "ended the waiver of weather; it is judged again\n",
    stderr: "",
  });
  assert.equal((await runSafety(server, [], env)).code, 1);
  const audit = await siteEventData(dir.path, "telemetry.safety.waiver");
  assert.deepEqual(audit.map((a) => [a.action, a.via, a.early]), [
    ["set", "cli", undefined],
    ["end", "cli", true],
  ]);
});

Deno.test("safety waive refuses a --for outside 60s..12h, a malformed one, or no --reason with exit 2, sending nothing", async () => {
  await using dir = await tempDir();
  await using server = await safeSite(dir.path);
  const cases: [string[], string][] = [
    [
      ["--for", "59s", "--reason", "x"],
      '--for must be from 60s to 12h (a waiver is bounded, docs/safety.md#waivers), not "59s"',
    ],
    [
      ["--for", "12h1s", "--reason", "x"],
      '--for must be from 60s to 12h (a waiver is bounded, docs/safety.md#waivers), not "12h1s"',
    ],
    [
      ["--for", "2 hours", "--reason", "x"],
      '--for must be a duration such as 90s, 30m, 2h or 1h30m, not "2 hours"',
    ],
    [
      ["--for", "30m1h", "--reason", "x"],
      '--for must be a duration such as 90s, 30m, 2h or 1h30m, not "30m1h"',
    ],
    [["--for", "2h"], "--reason is required"],
  ];
  for (const [flags, message] of cases) {
    const run = await runSafety(server, ["waive", "weather", ...flags]);
    assert.equal(run.code, 2, flags.join(" "));
    assert.equal(run.stdout, "");
    assert.ok(
      run.stderr.startsWith(`obs-utils telemetry safety waive: ${message}`),
      `${flags.join(" ")}: ${run.stderr}`,
    );
  }
  assert.deepEqual(await siteEventData(dir.path, "telemetry.safety.waiver"), []);
  assert.equal(
    (await runSafety(server, ["waive", "weather", "--for", "12h", "--reason", "x"])).code,
    0,
  );
});

Deno.test("safety release of an Id the service does not hold exits 1 with the service's message", async () => {
  await using dir = await tempDir();
  await using server = await safeSite(dir.path);
  const release = await runSafety(server, ["release", "no-such-hold"]);
  assert.equal(release.code, 1);
  assert.equal(release.stdout, "");
  assert.match(
    release.stderr,
    /^error: The service answered 404: Nothing was cleared: "no-such-hold" is not an external event/,
  );
  const usage = await runSafety(server, ["release"]);
  assert.equal(usage.code, 2);
  assert.match(usage.stderr, /safety release: missing ID/);
});

Deno.test("safety hold against a service that wants a token exits 1 saying how to give it, and holds nothing", async () => {
  await using dir = await tempDir();
  await using server = await safeSite(dir.path, { token: "t0ken" });
  const hold = await runSafety(server, ["hold", "x", "--reason", "y"]);
  assert.equal(hold.code, 1);
  assert.equal(
    hold.stderr,
    `error: The service at http://127.0.0.1:${server.addr.port} requires a token; pass --token or set OBS_TELEMETRY_TOKEN\n`,
  );
  const { body } = await getJson(`${server.url}/safety`, { authorization: "Bearer t0ken" });
  assert.equal((body as { safe: boolean }).safe, true);
});

Deno.test("safety --profile of a profile the types file does not name exits 1 with the profiles", async () => {
  await using dir = await tempDir();
  await using server = await safeSite(dir.path);
  const run = await runSafety(server, ["--profile", "north"]);
  assert.equal(run.code, 1);
  assert.match(
    run.stderr,
    /^error: The service answered 404: There is no safety profile "north"; the profiles are site, roofb /,
  );
  const json = await runSafety(server, ["--profile", "roofb", "--json"]);
  assert.equal(json.code, 0, json.stdout);
  assert.equal(JSON.parse(json.stdout).profile, "roofb");
});
