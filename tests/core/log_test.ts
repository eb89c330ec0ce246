/**
 * Tests of `core/log.ts`, the service log (docs/operations.md): the line shapes with an injected clock, the
 * rate limit of rejection lines with a stepped clock, and end to end through a real
 * `obs-utils telemetry run` subprocess.
 * @module
 */

import assert from "node:assert/strict";
import { type LogLevel, parseLogFormat, RateLimiter, ServiceLog } from "../../core/log.ts";
import { cliRunArgs, freePort, tempDir } from "../_shared/util.ts";

const T = Date.UTC(2026, 10, 23, 7, 43, 20, 123);

/** A log with a hand-moved clock that collects its lines. */
function capture(format: "text" | "json" = "text") {
  const clock = { now: T };
  const lines: { line: string; level: LogLevel }[] = [];
  const log = new ServiceLog({
    format,
    now: () => clock.now,
    write: (line, level) => lines.push({ line, level }),
    schedule: false,
  });
  return { clock, lines, log, text: () => lines.map((l) => l.line) };
}

const rejection = {
  method: "POST",
  route: "/event",
  status: 400,
  peer: "127.0.0.1",
  detail: 'unknown field "x"',
};

Deno.test("ServiceLog text lines start with the ISO 8601 UTC time and the level", () => {
  const { log, lines } = capture();
  log.info("telemetry service listening on http://localhost:6562 (site dir /srv/t)");
  log.warn("disk low", { free_bytes: 12, mount: "/srv data" });
  assert.deepEqual(lines, [
    {
      line:
        "2026-11-23T07:43:20.123Z info telemetry service listening on http://localhost:6562 (site dir /srv/t)",
      level: "info",
    },
    {
      line: '2026-11-23T07:43:20.123Z warn disk low free_bytes=12 mount="/srv data"',
      level: "warn",
    },
  ]);
});

Deno.test("ServiceLog keeps a message with line breaks or escape codes on one line", () => {
  const { log, text } = capture();
  log.warn("a\nforged 2026-01-01T00:00:00.000Z info line\u001b[31m", { f: "x\ny" });
  assert.deepEqual(text(), [
    '2026-11-23T07:43:20.123Z warn a\\u000aforged 2026-01-01T00:00:00.000Z info line\\u001b[31m f="x\\ny"',
  ]);
});

Deno.test("ServiceLog --log-format json prints one object per line with ts, level, msg and fields", () => {
  const { log, text } = capture("json");
  log.info("hello\nworld", { port: 6562, msg: "cannot overwrite", ok: true });
  log.rejection(rejection);
  const [first, second] = text().map((l) => JSON.parse(l));
  assert.deepEqual(first, {
    ts: "2026-11-23T07:43:20.123Z",
    level: "info",
    msg: "hello\nworld",
    port: 6562,
    ok: true,
  });
  assert.deepEqual(Object.keys(first).slice(0, 3), ["ts", "level", "msg"]);
  assert.deepEqual(second, {
    ts: "2026-11-23T07:43:20.123Z",
    level: "warn",
    msg: "rejected request",
    ...rejection,
  });
  assert.equal(text().every((l) => !l.includes("\n")), true);
});

Deno.test("ServiceLog prints 10 rejection lines a second, then one suppressed line for the rest", () => {
  const { clock, log, lines } = capture();
  for (let i = 0; i < 35; i++) {
    log.rejection(rejection);
    clock.now += 10; // 35 in 350 ms: one second's window
  }
  assert.equal(lines.length, 10);
  assert.ok(lines.every((l) => l.level === "warn"));
  assert.equal(
    lines[0]!.line,
    '2026-11-23T07:43:20.123Z warn rejected POST /event 400 from 127.0.0.1: unknown field "x"',
  );
  // The window is not over: nothing more yet.
  log.flush();
  assert.equal(lines.length, 10);
  clock.now = T + 1000;
  log.flush();
  assert.equal(lines.at(-1)!.line, "2026-11-23T07:43:21.123Z warn suppressed 25 similar lines");
  // Counted once: a second flush has nothing to say, and the next second starts afresh.
  log.flush();
  log.rejection(rejection);
  assert.equal(lines.length, 12);
  assert.match(lines.at(-1)!.line, /warn rejected POST/);
});

Deno.test("ServiceLog reports a suppressed count before the first line of the next burst", () => {
  const { clock, log, text } = capture();
  for (let i = 0; i < 12; i++) log.rejection(rejection);
  clock.now += 5000;
  log.rejection(rejection);
  assert.deepEqual(text().slice(10), [
    "2026-11-23T07:43:25.123Z warn suppressed 2 similar lines",
    '2026-11-23T07:43:25.123Z warn rejected POST /event 400 from 127.0.0.1: unknown field "x"',
  ]);
});

Deno.test("ServiceLog rate limit survives a clock stepped backwards without going silent", () => {
  const { clock, log, text } = capture();
  for (let i = 0; i < 15; i++) log.rejection(rejection);
  clock.now -= 3_600_000; // NTP steps the clock back an hour
  log.rejection(rejection);
  assert.equal(text().length, 12);
  assert.match(text()[10]!, /suppressed 5 similar lines$/);
  assert.match(text()[11]!, /rejected POST/);
});

Deno.test("ServiceLog.flush(true) prints a pending count at shutdown", () => {
  const { log, text } = capture();
  for (let i = 0; i < 11; i++) log.rejection(rejection);
  log.flush(true);
  assert.match(text().at(-1)!, /warn suppressed 1 similar lines$/);
  log.flush(true);
  assert.equal(text().length, 11);
});

Deno.test("RateLimiter allows at most the limit in any seeded sequence within one window", () => {
  let seed = 7;
  const rand = (n: number) => (seed = (seed * 1103515245 + 12345) % 2147483648) % n;
  for (let round = 0; round < 50; round++) {
    const limiter = new RateLimiter(10, 1000);
    let now = rand(1_000_000);
    let windowStart = now;
    let allowedInWindow = 0;
    let suppressedTotal = 0;
    let reported = 0;
    for (let i = 0; i < 200; i++) {
      now += rand(60);
      const { allowed, suppressed } = limiter.take(now);
      if (suppressed > 0 || now >= windowStart + 1000) {
        if (now >= windowStart + 1000) {
          windowStart = now;
          allowedInWindow = 0;
        }
      }
      reported += suppressed;
      if (allowed) allowedInWindow++;
      else suppressedTotal++;
      assert.ok(allowedInWindow <= 10, `round ${round}: ${allowedInWindow} lines in one second`);
    }
    reported += limiter.drain(now, true);
    assert.equal(reported, suppressedTotal, `round ${round}: every suppressed line is counted`);
  }
});

Deno.test("parseLogFormat() accepts any letter case and names the flag otherwise", () => {
  assert.equal(parseLogFormat("Json"), "json");
  assert.equal(parseLogFormat("TEXT"), "text");
  assert.throws(() => parseLogFormat("yaml"), {
    name: "RangeError",
    message: '--log-format must be text or json, not "yaml"',
  });
});

// --- End to end: the running service --------------------------------------------------------

/** Runs the service as a subprocess, waits for its ready line, and collects stdout and stderr. */
async function service(extra: string[] = []) {
  const dir = await tempDir();
  const port = freePort();
  const child = new Deno.Command(Deno.execPath(), {
    args: cliRunArgs(dir.path, port, extra),
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let seen = "";
  while (!seen.includes("listening on")) {
    const { value, done } = await reader.read();
    if (done) break;
    seen += value;
  }
  const stderr = new Response(child.stderr).text();
  return {
    url: `http://127.0.0.1:${port}`,
    async stop(): Promise<{ code: number; stdout: string; stderr: string }> {
      child.kill("SIGTERM");
      let rest = "";
      while (true) {
        const { value, done } = await reader.read();
        if (done) break;
        rest += value;
      }
      const { code } = await child.status;
      await dir[Symbol.asyncDispose]();
      return { code, stdout: seen + rest, stderr: await stderr };
    },
  };
}

const STAMPED = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (debug|info|warn|error) \S/;

Deno.test("obs-utils telemetry run stamps every line and logs a burst of rejections rate-limited", async () => {
  const server = await service();
  const json = { "content-type": "application/json" };
  // Not logged: a reader polling for a type nobody sent yet.
  for (let i = 0; i < 3; i++) await (await fetch(`${server.url}/current/rain`)).body?.cancel();
  for (let i = 0; i < 30; i++) {
    const res = await fetch(`${server.url}/event`, {
      method: "POST",
      headers: json,
      body: `{"type":"a","data":{},"date":"${i}"}`,
    });
    assert.equal(res.status, 400);
    await res.body?.cancel();
  }
  const done = await server.stop();
  assert.equal(done.code, 0, done.stderr);
  const out = done.stdout.trimEnd().split("\n");
  const err = done.stderr.trimEnd().split("\n");
  for (const line of [...out, ...err]) assert.match(line, STAMPED);
  assert.match(
    out[0]!,
    / info telemetry service listening on http:\/\/127\.0\.0\.1:\d+ \(site dir /,
  );
  assert.match(out.at(-1)!, / info telemetry service stopped; all files flushed and closed$/);
  const rejected = err.filter((l) => / warn rejected /.test(l));
  assert.ok(rejected.length >= 10 && rejected.length <= 30, done.stderr);
  assert.match(
    rejected[0]!,
    /Z warn rejected POST \/event 400 from 127\.0\.0\.1: unknown field "date"; the event time is `ts`; /,
  );
  // However the 30 fell into seconds, at most 10 lines per second and every one counted.
  const suppressed = err.flatMap((l) => /suppressed (\d+) similar lines$/.exec(l)?.[1] ?? []);
  assert.equal(rejected.length + suppressed.reduce((n, s) => n + Number(s), 0), 30, done.stderr);
  const perSecond = new Map<string, number>();
  for (const l of rejected) perSecond.set(l.slice(0, 19), (perSecond.get(l.slice(0, 19)) ?? 0) + 1);
  assert.ok([...perSecond.values()].every((n) => n <= 20), done.stderr);
  assert.ok(!done.stderr.includes("/current/{type} 404"), done.stderr);
});

Deno.test("obs-utils telemetry run --log-format JSON prints one JSON object per line", async () => {
  const server = await service(["--log-format", "JSON"]);
  const res = await fetch(`${server.url}/nope`);
  await res.body?.cancel();
  const done = await server.stop();
  assert.equal(done.code, 0, done.stderr);
  const lines = [...done.stdout.trimEnd().split("\n"), ...done.stderr.trimEnd().split("\n")];
  const objects = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
  for (const o of objects) {
    assert.match(String(o.ts), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    assert.ok(["info", "warn"].includes(String(o.level)));
    assert.equal(typeof o.msg, "string");
  }
  assert.match(String(objects[0]!.msg), /^telemetry service listening on /);
  const warn = objects.find((o) => o.level === "warn")!;
  assert.deepEqual(
    { method: warn.method, route: warn.route, status: warn.status, peer: warn.peer },
    { method: "GET", route: "other", status: 404, peer: "127.0.0.1" },
  );
  assert.match(String(warn.detail), /^No endpoint at \/nope; /);
});
