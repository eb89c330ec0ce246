/**
 * Resume faults (docs/storage.md): seq and `/current` after a clock stepped back across local noon, a
 * kill -9 after a run stopped, after a rotation and at random points while types move between
 * run and site files, and with a checkpoint that is corrupt, of another format or no longer
 * matches its files. Sessions that must die run in a child process that SIGKILLs itself
 * (`tests/_shared/resume_child.ts`) or as `cli.ts telemetry run` killed by the test.
 *
 * Replay a failing run with `FAULT_SEED=<seed> deno test -A tests/fault_resume_test.ts`.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { freePort, Rng, seedFromEnv, spawnCliServer } from "./_shared/fault_util.ts";
import { type Envelope, openService, parseEnvelope, tempDir } from "./_shared/util.ts";
import { CHECKPOINT_FORMAT } from "../core/snapshot.ts";

const SEED = seedFromEnv(0x5eed_0a11);
const CHILD = new URL("./_shared/resume_child.ts", import.meta.url).pathname;
const JSON_HEADERS = { "content-type": "application/json" };

/** One session in a child process; returns the snapshot it opened with and what it printed. */
async function session(
  dir: string,
  plan: { clock?: string; ops?: unknown[]; end: "close" | "kill" },
): Promise<{ current: Record<string, Envelope>; lines: string[]; stderr: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", CHILD, dir, JSON.stringify(plan)],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const stderr = new TextDecoder().decode(out.stderr);
  if (plan.end === "kill") assert.equal(out.signal, "SIGKILL", stderr);
  else assert.equal(out.code, 0, stderr);
  const [first, ...lines] = new TextDecoder().decode(out.stdout).split("\n").filter((l) => l);
  return { current: JSON.parse(first!), lines, stderr };
}

/** Makes a file's mtime lie the way a clock stepped back by `seconds` writes it. */
async function backdate(path: string, than: string, seconds: number): Promise<void> {
  const mtime = (await Deno.stat(than)).mtime!.getTime() - seconds * 1000;
  await Deno.utime(path, new Date(mtime), new Date(mtime));
}

/** Opens a service in-process, collecting its warnings. */
async function openWatched(dir: string) {
  const warnings: string[] = [];
  const service = await openService(dir, { onWarning: (w) => warnings.push(w) });
  return { service, warnings };
}

const STEPPED_BACK = [
  { clock: "2026-05-10T13:00:00Z" }, // night 20260510
  { type: "probe", data: { n: 1 } },
  { type: "probe", data: { n: 2 } },
  { type: "probe", data: { n: 3 } },
  { clock: "2026-05-10T11:00:00Z" }, // stepped back across noon: night 20260509
  { type: "probe", data: { n: 4 } },
  { type: "probe", data: { n: 5 } },
  { type: "probe", data: { n: 6 } },
];

/**
 * Runs {@linkcode STEPPED_BACK} ending as told, makes the older night's file look newer, then
 * checks that the restarted service shows the last event and hands out seq 7, not a used one.
 */
async function assertSeqGoesOnAfterSteppedClock(end: "close" | "kill"): Promise<void> {
  await using dir = await tempDir();
  await session(dir.path, { ops: STEPPED_BACK, end });
  const newer = join(dir.path, "site_20260510.ndjson");
  await backdate(join(dir.path, "site_20260509.ndjson"), newer, 3600);
  await using service = await openService(dir.path);
  assert.deepEqual(parseEnvelope(service.currentLine("probe")!).data, { n: 6 });
  const [event] = await service.record([{ type: "probe", data: { n: 7 } }]);
  assert.equal(event!.seq, 7);
}

Deno.test("TelemetryService.open() never repeats a site seq after the clock stepped back across noon and a clean restart", () =>
  assertSeqGoesOnAfterSteppedClock("close"));

Deno.test("TelemetryService.open() never repeats a site seq after the clock stepped back across noon and a kill -9", () =>
  assertSeqGoesOnAfterSteppedClock("kill"));

Deno.test("TelemetryService.open() continues a run's seq above the counter its checkpoint saved", async () => {
  await using dir = await tempDir();
  await session(dir.path, {
    ops: [{ start: { run_id: "R" } }, { type: "cam", data: { n: 1 } }, {
      type: "cam",
      data: { n: 2 },
      store_permanently: false,
    }],
    end: "close",
  });
  await Deno.remove(join(dir.path, "R", ".seq-mark.json")).catch(() => {});
  await using service = await openService(dir.path);
  const [event] = await service.record([{ type: "cam", data: { n: 3 } }]);
  assert.equal(event!.seq, 3, "the saved run counter (2) must not be handed out again");
});

Deno.test("TelemetryService.open() shows a stopped run's newest event after a kill -9", async () => {
  await using dir = await tempDir();
  await session(dir.path, { ops: [{ type: "camera", data: { v: 0 } }], end: "close" });
  const { lines } = await session(dir.path, {
    ops: [
      { start: { run_id: "R" } },
      { type: "camera", data: { v: 1 } },
      { type: "camera", data: { v: 2 }, ts: "2000-01-01T00:00:00Z" }, // an old ts is still newest
      { stop: true },
      { type: "status", data: { s: 1 } },
    ],
    end: "kill",
  });
  const { current } = await session(dir.path, { end: "close" });
  assert.deepEqual(current.camera, JSON.parse(lines[1]!));
  assert.deepEqual(current.status, JSON.parse(lines[2]!));
});

Deno.test("TelemetryService.open() shows an older night's newest event after a rotation and a kill -9", async () => {
  await using dir = await tempDir();
  await session(dir.path, { ops: [{ type: "dome", data: { v: 0 } }], end: "close" });
  const { lines } = await session(dir.path, {
    ops: [
      { clock: "2026-05-11T11:00:00Z" }, // night 20260510
      { type: "dome", data: { v: 1 } },
      { clock: "2026-05-11T12:30:00Z" }, // night 20260511: rotation
      { type: "status", data: { s: 1 } },
    ],
    end: "kill",
  });
  const { current } = await session(dir.path, { end: "close" });
  assert.deepEqual(current.dome, JSON.parse(lines[0]!));
  assert.deepEqual(current.status, JSON.parse(lines[1]!));
});

Deno.test("TelemetryService.open() warns about a truncated checkpoint, rebuilds and saves a fresh one", async () => {
  await using dir = await tempDir();
  await session(dir.path, {
    ops: [{ type: "weather", data: { w: 1 } }, { type: "weather", data: { w: 2 } }],
    end: "close",
  });
  const path = join(dir.path, ".snapshot.json");
  const text = await Deno.readTextFile(path);
  await Deno.writeTextFile(path, text.slice(0, text.length >> 1));
  const { service, warnings } = await openWatched(dir.path);
  await using _ = service;
  assert.match(warnings.join("\n"), /\.snapshot\.json/);
  assert.deepEqual(parseEnvelope(service.currentLine("weather")!).data, { w: 2 });
  const fresh = JSON.parse(await Deno.readTextFile(path));
  assert.equal(fresh.format, CHECKPOINT_FORMAT, "a fresh checkpoint is saved on opening");
  assert.equal((await service.record([{ type: "weather", data: {} }]))[0]!.seq, 3);
});

Deno.test("TelemetryService.open() ignores a checkpoint of an unknown format with a warning", async () => {
  await using dir = await tempDir();
  await session(dir.path, { ops: [{ type: "weather", data: { w: 1 } }], end: "close" });
  const ghost = '{"seq":99,"ts":"2026-05-10T13:00:00.000Z","type":"ghost","data":{},"meta":{}}';
  await Deno.writeTextFile(
    join(dir.path, ".snapshot.json"),
    `{"format":"obs-telemetry-checkpoint/99","site_seq":1,"run_dir":null,"run_seq":0,"current":{"ghost":${ghost}}}`,
  );
  const { service, warnings } = await openWatched(dir.path);
  await using _ = service;
  assert.match(warnings.join("\n"), /obs-telemetry-checkpoint\/99/);
  assert.equal(service.currentLine("ghost"), undefined);
  assert.deepEqual(parseEnvelope(service.currentLine("weather")!).data, { w: 1 });
});

Deno.test("TelemetryService.open() falls back with a warning when the checkpoint's site file was truncated, and seq never repeats", async () => {
  await using dir = await tempDir();
  await session(dir.path, {
    ops: Array.from({ length: 5 }, (_, i) => ({ type: "weather", data: { w: i + 1 } })),
    end: "close",
  });
  const file = join(dir.path, "site_20260510.ndjson");
  const kept = (await Deno.readTextFile(file)).split("\n").slice(0, 2).join("\n") + "\n";
  await Deno.writeTextFile(file, kept);
  const { service, warnings } = await openWatched(dir.path);
  await using _ = service;
  assert.match(warnings.join("\n"), /no longer matches/);
  assert.deepEqual(parseEnvelope(service.currentLine("weather")!).data, { w: 5 });
  assert.equal((await service.record([{ type: "weather", data: {} }]))[0]!.seq, 6);
});

Deno.test("TelemetryService.open() falls back with a warning when the checkpoint's site file was replaced", async () => {
  await using dir = await tempDir();
  await session(dir.path, {
    ops: Array.from({ length: 3 }, (_, i) => ({ type: "weather", data: { w: i + 1 } })),
    end: "close",
  });
  const replaced = Array.from(
    { length: 10 },
    (_, i) =>
      `{"seq":${
        i + 1
      },"ts":"2026-05-10T13:00:00.000Z","type":"weather","data":{"replaced":${i}},"meta":{}}\n`,
  ).join("");
  await Deno.writeTextFile(join(dir.path, "site_20260510.ndjson"), replaced);
  const { service, warnings } = await openWatched(dir.path);
  await using _ = service;
  assert.match(warnings.join("\n"), /no longer matches/);
  assert.deepEqual(parseEnvelope(service.currentLine("weather")!).data, { replaced: 9 });
  assert.equal((await service.record([{ type: "weather", data: {} }]))[0]!.seq, 11);
});

Deno.test("TelemetryService.open() falls back with a warning when the active run's file was truncated", async () => {
  await using dir = await tempDir();
  await session(dir.path, {
    ops: [{ start: { run_id: "R" } }, { type: "cam", data: { n: 1 } }, {
      type: "cam",
      data: { n: 2 },
    }],
    end: "close",
  });
  await Deno.writeTextFile(join(dir.path, "R", "telemetry.ndjson"), "");
  const { service, warnings } = await openWatched(dir.path);
  await using _ = service;
  assert.match(warnings.join("\n"), /no longer matches/);
  assert.deepEqual(parseEnvelope(service.currentLine("cam")!).data, { n: 2 });
  assert.equal((await service.record([{ type: "cam", data: {} }]))[0]!.seq, 3);
});

/**
 * What a restart must show for one type: the event acknowledged last, or one that was in flight
 * when the kill came (it may have reached the file without an answer).
 */
interface TypeExpectation {
  acked: string | undefined;
  inFlight: string[];
}

Deno.test("the service shows each type's last acknowledged event after kill -9 at random points while types move between run and site files", async () => {
  const rng = new Rng(SEED);
  await using dir = await tempDir();
  const types = ["weather", "environment", "status", "camera", "dome"];
  const expected = new Map<string, TypeExpectation>();
  let runActive = false;
  let runNo = 0;
  for (let round = 0; round < 4; round++) {
    const port = freePort();
    await using server = await spawnCliServer({ siteDir: dir.path, port });
    const current = await (await fetch(`${server.url}/current`)).json();
    for (const [type, want] of expected) {
      const got = JSON.stringify(current[type]);
      const allowed = [want.acked, ...want.inFlight].filter((l) => l !== undefined);
      assert.ok(
        allowed.some((l) => JSON.stringify(JSON.parse(l!)) === got),
        `seed ${SEED} round ${round}: /current/${type} is ${got}, expected ${allowed.join(" or ")}`,
      );
      want.acked = got === undefined ? undefined : JSON.stringify(current[type]);
      want.inFlight = [];
    }
    runActive = (await (await fetch(`${server.url}/ready`)).json()).run_active;
    const steps = rng.int(5, 30);
    for (let k = 0; k < steps; k++) {
      const roll = rng.next();
      if (roll < 0.12 && !runActive) {
        const res = await fetch(`${server.url}/run/start`, {
          method: "POST",
          headers: JSON_HEADERS,
          body: JSON.stringify({ run_id: `r${round}-${runNo++}` }),
        });
        await res.body?.cancel();
        assert.equal(res.status, 201);
        runActive = true;
      } else if (roll < 0.24 && runActive) {
        const res = await fetch(`${server.url}/run/stop`, { method: "POST" });
        await res.body?.cancel();
        assert.equal(res.status, 200);
        runActive = false;
      } else {
        const type = rng.pick(types);
        // Clients may send their own ts: newest means acknowledged last, not largest ts.
        const ts = rng.chance(0.3) ? new Date(rng.int(0, 2e12)).toISOString() : undefined;
        const res = await fetch(`${server.url}/event`, {
          method: "POST",
          headers: JSON_HEADERS,
          body: JSON.stringify({ type, data: { round, k }, ...(ts ? { ts } : {}) }),
        });
        const text = await res.text();
        assert.equal(res.status, 200, text);
        const want = expected.get(type) ?? { acked: undefined, inFlight: [] };
        want.acked = text;
        expected.set(type, want);
      }
    }
    // Kill with one event possibly in flight.
    const type = rng.pick(types);
    const body = JSON.stringify({ type, data: { round, inFlight: true } });
    const flight = fetch(`${server.url}/event`, { method: "POST", headers: JSON_HEADERS, body })
      .then((r) => r.text(), () => undefined);
    await new Promise((r) => setTimeout(r, rng.int(0, 5)));
    await server.kill("SIGKILL");
    const answered = await flight;
    const want = expected.get(type) ?? { acked: undefined, inFlight: [] };
    if (answered !== undefined && answered.startsWith('{"seq"')) want.acked = answered;
    else {
      // Unanswered: the file may or may not hold it; any stored copy will do.
      want.inFlight = await storedCopies(dir.path, round);
    }
    expected.set(type, want);
  }
});

/** Every stored line of the in-flight event of a round (its run or site copy), if any. */
async function storedCopies(siteDir: string, round: number): Promise<string[]> {
  const out: string[] = [];
  const walk = async (path: string) => {
    for await (const entry of Deno.readDir(path)) {
      const child = join(path, entry.name);
      if (entry.isDirectory) await walk(child);
      else if (entry.name.endsWith(".ndjson")) {
        for (const line of (await Deno.readTextFile(child)).split("\n")) {
          if (line.includes(`"data":{"round":${round},"inFlight":true}`)) out.push(line);
        }
      }
    }
  };
  await walk(siteDir);
  return out;
}
