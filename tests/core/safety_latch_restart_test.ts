/**
 * The safety latch survives restarts (docs/safety.md): a clean restart and a kill -9 inside the
 * latch both stay unsafe until it ends, and a damaged or missing latch file errs on unsafe.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import type { SafetyVerdict } from "../../server.ts";
import { parseTypes } from "../../core/types_registry.ts";
import { cliRunArgs, freePort, getJson, postJson, tempDir, testServer } from "../_shared/util.ts";
import { permissionFlags } from "../../cli/spawn.ts";

const TYPES = {
  weather: {
    critical: true,
    stale_after_s: 600,
    clear_after_s: 60,
    fields: { wind_mps: { unit: "m/s", alarm_above: 15 } },
  },
};

async function verdict(url: string): Promise<SafetyVerdict> {
  const { status, body } = await getJson(`${url}/safety`);
  assert.equal(status, 200);
  return body as SafetyVerdict;
}

async function weather(url: string, wind: number): Promise<void> {
  assert.equal(
    (await postJson(`${url}/event`, { type: "weather", data: { wind_mps: wind } })).status,
    200,
  );
}

/** `cli.ts telemetry run --types FILE` as a child, ready when it says it listens. */
async function spawnChild(
  siteDir: string,
  typesFile: string,
  port: number,
  env: Record<string, string> = {},
) {
  const child = new Deno.Command(Deno.execPath(), {
    args: cliRunArgs(
      siteDir,
      port,
      ["--types", typesFile],
      permissionFlags({ siteDir, host: "127.0.0.1", port, readFiles: [typesFile] }),
    ),
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    env,
  }).spawn();
  let out = "";
  let ready = () => {};
  const listening = new Promise<void>((r) => (ready = r));
  const pumped = Promise.all([child.stdout, child.stderr].map(async (stream) => {
    for await (const text of stream.pipeThrough(new TextDecoderStream())) {
      out += text;
      if (out.includes("listening on")) ready();
    }
  }));
  let timer: ReturnType<typeof setTimeout> | undefined;
  const outcome = await Promise.race([
    listening.then(() => "ready"),
    child.status.then(() => "exited"),
    new Promise((r) => (timer = setTimeout(() => r("timeout"), 30_000))),
  ]);
  clearTimeout(timer);
  const kill = async (signal: Deno.Signal) => {
    try {
      child.kill(signal);
    } catch {
      // already exited
    }
    const status = await child.status;
    await pumped;
    return status;
  };
  if (outcome !== "ready") {
    await kill("SIGKILL");
    throw new Error(`the server child did not become ready (${outcome}):\n${out}`);
  }
  return { url: `http://127.0.0.1:${port}`, kill, output: () => out };
}

/** Alarm, then fine: the type is latched for clear_after_s from now. */
async function latch(url: string): Promise<number> {
  await weather(url, 20);
  await weather(url, 3);
  const latched = await verdict(url);
  assert.equal(latched.safe, false);
  const until = latched.types.weather?.latched_until;
  assert.ok(until, JSON.stringify(latched));
  return Date.parse(until);
}

function assertStillLatched(after: SafetyVerdict, until: number, context: string): void {
  assert.equal(after.safe, false, context);
  assert.equal(after.types.weather?.state, "ok", context);
  const now = Date.parse(after.types.weather?.latched_until ?? "");
  // The same end (counted again from the start it would be later by the restart's time).
  assert.ok(
    now >= until - 5 && now <= until + 100,
    `${context}: ${new Date(now).toISOString()} vs ${new Date(until).toISOString()}`,
  );
  assert.match(
    after.reasons[0]!,
    /^weather: clearing, safe at \S+Z \(clear_after_s 60\)$/,
    context,
  );
}

Deno.test("kill -9 inside the latch: the restarted service is still unsafe until the latch ends", async () => {
  await using dir = await tempDir();
  const siteDir = join(dir.path, "site");
  const typesFile = join(dir.path, "types.json");
  await Deno.writeTextFile(typesFile, JSON.stringify(TYPES));
  const port = freePort();
  let server = await spawnChild(siteDir, typesFile, port);
  try {
    const until = await latch(server.url);
    assert.equal((await server.kill("SIGKILL")).signal, "SIGKILL");
    server = await spawnChild(siteDir, typesFile, port);
    assertStillLatched(await verdict(server.url), until, "after kill -9");
  } finally {
    await server.kill("SIGKILL");
  }
});

Deno.test("a clean restart inside the latch: still unsafe until the latch ends", async () => {
  await using dir = await tempDir();
  const siteDir = join(dir.path, "site");
  const types = parseTypes(JSON.stringify(TYPES), "types.json");
  let server = await testServer({ siteDir, types });
  try {
    const until = await latch(server.url);
    await server.shutdown();
    server = await testServer({ siteDir, types });
    assertStillLatched(await verdict(server.url), until, "after a clean restart");
  } finally {
    await server.shutdown();
  }
});

Deno.test("a damaged latch file keeps every critical type unsafe for clear_after_s from the start", async () => {
  await using dir = await tempDir();
  const siteDir = join(dir.path, "site");
  const types = parseTypes(JSON.stringify(TYPES), "types.json");
  const warnings: string[] = [];
  let server = await testServer({
    siteDir,
    types: parseTypes(
      JSON.stringify({
        weather: { ...TYPES.weather, clear_after_s: 0 },
      }),
      "types.json",
    ),
  });
  try {
    await weather(server.url, 3);
    assert.equal((await verdict(server.url)).safe, true);
    await server.shutdown();
    await Deno.writeTextFile(join(siteDir, ".safety.json"), '{"version": 1, "types": {"wea');
    const started = Date.now();
    server = await testServer({ siteDir, types, onWarning: (m) => warnings.push(m) });
    const after = await verdict(server.url);
    assert.equal(after.safe, false);
    const until = Date.parse(after.types.weather?.latched_until ?? "");
    assert.ok(
      until >= started + 60_000 - 5 && until <= Date.now() + 60_000,
      after.types.weather?.latched_until ?? "",
    );
    assert.ok(warnings.some((w) => w.includes(".safety.json is unreadable")), warnings.join("\n"));
  } finally {
    await server.shutdown();
  }
});

Deno.test("a missing latch file keeps every critical type unsafe for clear_after_s from the start", async () => {
  await using dir = await tempDir();
  const siteDir = join(dir.path, "site");
  const types = parseTypes(JSON.stringify(TYPES), "types.json");
  let server = await testServer({
    siteDir,
    types: parseTypes(
      JSON.stringify({
        weather: { ...TYPES.weather, clear_after_s: 0 },
      }),
      "types.json",
    ),
  });
  try {
    await weather(server.url, 3);
    await server.shutdown();
    await Deno.remove(join(siteDir, ".safety.json"));
    const started = Date.now();
    server = await testServer({ siteDir, types });
    const after = await verdict(server.url);
    assert.equal(after.safe, false);
    assert.ok(Date.parse(after.types.weather?.latched_until ?? "") >= started + 60_000 - 5);
  } finally {
    await server.shutdown();
  }
});

Deno.test("a latch that ended before a clean restart stays ended: the restarted site is safe at once", async () => {
  await using dir = await tempDir();
  const siteDir = join(dir.path, "site");
  const types = parseTypes(
    JSON.stringify({ weather: { ...TYPES.weather, clear_after_s: 1 } }),
    "types.json",
  );
  let server = await testServer({ siteDir, types });
  try {
    await weather(server.url, 20);
    await weather(server.url, 3);
    const deadline = Date.now() + 10_000;
    while (!(await verdict(server.url)).safe && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.equal((await verdict(server.url)).safe, true);
    const since = (await verdict(server.url)).since;
    await server.shutdown();
    server = await testServer({ siteDir, types });
    const after = await verdict(server.url);
    assert.equal(after.safe, true, after.reasons.join("; "));
    assert.equal(after.since, since);
  } finally {
    await server.shutdown();
  }
});

/** libfaketime's library, or why the clock-step test cannot run here. */
function faketimeLib(): { lib?: string; missing?: string } {
  const candidates = [
    Deno.env.get("FAKETIME_LIB"),
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
  ];
  for (const lib of candidates) {
    if (lib === undefined) continue;
    try {
      if (Deno.statSync(lib).isFile) return { lib };
    } catch {
      // not there
    }
  }
  return { missing: "libfaketime is not installed (apt-get install -y libfaketime)" };
}

const faketime = faketimeLib();
if (faketime.missing) {
  // deno-lint-ignore no-console
  console.log(`safety_latch_restart_test.ts: skipping the clock-step test: ${faketime.missing}`);
}

Deno.test({
  name:
    "the wall clock of a real service stepping forward an hour (libfaketime) does not end its latch early",
  ignore: faketime.lib === undefined,
  async fn() {
    await using dir = await tempDir();
    const siteDir = join(dir.path, "site");
    const typesFile = join(dir.path, "types.json");
    await Deno.writeTextFile(typesFile, JSON.stringify(TYPES));
    const clockFile = join(dir.path, "faketime");
    await Deno.writeTextFile(clockFile, "+0");
    const port = freePort();
    const server = await spawnChild(siteDir, typesFile, port, {
      LD_PRELOAD: faketime.lib!,
      FAKETIME_TIMESTAMP_FILE: clockFile,
      FAKETIME_NO_CACHE: "1",
      FAKETIME_DONT_FAKE_MONOTONIC: "1",
    });
    try {
      const until = await latch(server.url);
      await Deno.writeTextFile(clockFile, "+1h");
      // The service's clock stepped: an event it stamps now is an hour ahead of ours.
      await weather(server.url, 3);
      const stamped = (await getJson(`${server.url}/current/weather`)).body as { ts: string };
      assert.ok(Date.parse(stamped.ts) > Date.now() + 3_500_000, stamped.ts);
      const after = await verdict(server.url);
      assert.equal(after.safe, false, after.reasons.join("; "));
      assert.equal(after.types.weather?.state, "ok");
      // Still about 60 s of real time to go, shown on the stepped clock.
      const end = Date.parse(after.types.weather?.latched_until ?? "");
      assert.ok(end > until + 3_500_000, `${after.types.weather?.latched_until}`);
      assert.match(after.reasons[0]!, /^weather: clearing, safe at \S+Z \(clear_after_s 60\)$/);
    } finally {
      await server.kill("SIGKILL");
    }
  },
});
