/**
 * `GET /history` (docs/history.md, docs/http-api.md) against a real service on port 0 over real
 * site directories: the lines it answers are the lines the files hold.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { CLI, tempDir, testServer } from "../_shared/util.ts";
import { compressFile } from "../../store/compress.ts";
import { TelemetryClient } from "../../client.ts";

const ZONE = "America/Santiago";

/** A stored line as the service writes it. */
function line(seq: number, ms: number, type: string, data: unknown): string {
  return `{"seq":${seq},"ts":"${new Date(ms).toISOString()}","type":"${type}","data":${
    JSON.stringify(data)
  },"meta":{}}`;
}

/** A seeded generator (mulberry32): the same data on every run. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The night key (YYYYMMDD) of an instant in `zone`: local noon to noon. */
function nightOf(ms: number, zone: string): string {
  const local = Temporal.Instant.fromEpochMilliseconds(ms).toZonedDateTimeISO(zone);
  const date = local.hour < 12 ? local.toPlainDate().subtract({ days: 1 }) : local.toPlainDate();
  return date.toString().replaceAll("-", "");
}

/**
 * Three nights around the end of Chile's daylight time (2026-04-04/05, 00:00 -> 23:00 local),
 * one event every 7 minutes: the first night compressed, the last with a torn last line.
 */
async function santiagoSite(dir: string): Promise<string[]> {
  const rnd = random(29);
  const byNight = new Map<string, string[]>();
  const all: string[] = [];
  const from = Date.parse("2026-04-03T16:00:00Z"), to = Date.parse("2026-04-06T19:00:00Z");
  let seq = 1;
  for (let ms = from; ms < to; ms += 7 * 60_000) {
    const type = rnd() < 0.5 ? "weather" : "dome";
    const data = type === "weather"
      ? { wind: { mps: Math.round(rnd() * 200) / 10 }, note: rnd() < 0.1 ? 'gust, "strong"' : "ok" }
      : { open: rnd() < 0.5 };
    const text = line(seq++, ms, type, data);
    all.push(text);
    const night = nightOf(ms, ZONE);
    byNight.set(night, [...(byNight.get(night) ?? []), text]);
  }
  for (const [night, lines] of byNight) {
    await Deno.writeTextFile(join(dir, `site_${night}.ndjson`), lines.join("\n") + "\n");
  }
  assert.deepEqual([...byNight.keys()], ["20260403", "20260404", "20260405", "20260406"]);
  await compressFile(join(dir, "site_20260403.ndjson"));
  // A torn last line (a crash mid-write): never answered.
  await Deno.writeTextFile(join(dir, "site_20260406.ndjson"), '{"seq":99999,"ts":"2026-04', {
    append: true,
  });
  return all;
}

function inRange(lines: string[], since: number, until: number, types: string[] = []): string[] {
  return lines.filter((l) => {
    const { ts, type } = JSON.parse(l);
    const ms = Date.parse(ts);
    return ms >= since && ms < until && (types.length === 0 || types.includes(type));
  });
}

async function getText(url: string, headers: Record<string, string> = {}) {
  const res = await fetch(url, { headers });
  return { status: res.status, type: res.headers.get("content-type"), text: await res.text() };
}

Deno.test("GET /history answers the stored lines exactly, across local noon, a DST night, .gz and a torn last line", async () => {
  await using tmp = await tempDir();
  const all = await santiagoSite(tmp.path);
  await using server = await testServer({ siteDir: tmp.path, timeZone: ZONE });
  const cases: [string, number, number, string[]][] = [
    // local noon of 2026-04-04 (15:00Z, still daylight time) into the DST night and past it
    [
      "2026-04-04T10:00:00Z",
      Date.parse("2026-04-04T10:00:00Z"),
      Date.parse("2026-04-05T20:00:00Z"),
      [],
    ],
    // night dates: from local noon to local noon, the DST night being 25 hours long
    ["2026-04-04", Date.parse("2026-04-04T15:00:00Z"), Date.parse("2026-04-05T16:00:00Z"), [
      "weather",
    ]],
    ["2026-04-03", Date.parse("2026-04-03T15:00:00Z"), Date.parse("2026-04-06T16:00:00Z"), [
      "dome",
    ]],
  ];
  for (const [since, sinceMs, untilMs, types] of cases) {
    const until = since.length === 10 ? undefined : new Date(untilMs).toISOString();
    const q = new URLSearchParams({ since });
    if (until) q.set("until", until);
    else q.set("until", since === "2026-04-04" ? "2026-04-05" : "2026-04-06");
    if (types.length) q.set("type", types.join(","));
    const res = await getText(`${server.url}/history?${q}`);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.type, "application/x-ndjson; charset=utf-8");
    const want = inRange(all, sinceMs, untilMs, types);
    assert.ok(want.length > 100, `${since}: ${want.length}`);
    assert.equal(res.text, want.map((l) => l + "\n").join(""), `${q}`);
  }
});

Deno.test("GET /history defaults since to 24 hours ago and takes several types", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  for (const type of ["weather", "dome", "other"]) {
    const res = await fetch(`${server.url}/event`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ type, data: { v: 1 } }),
    });
    assert.equal(res.status, 200, await res.text());
  }
  const res = await getText(`${server.url}/history?type=weather,dome`);
  assert.equal(res.status, 200);
  const got = res.text.trim().split("\n").map((l) => JSON.parse(l).type);
  assert.deepEqual(got, ["weather", "dome"]);
  const old = await getText(`${server.url}/history?until=25h`);
  assert.equal(old.status, 400, old.text);
  assert.match(JSON.parse(old.text).detail, /since/);
});

Deno.test("GET /history?format=csv answers exactly what read --format csv prints", async () => {
  await using tmp = await tempDir();
  await santiagoSite(tmp.path);
  await using server = await testServer({ siteDir: tmp.path, timeZone: ZONE });
  const args = ["--since", "2026-04-04", "--until", "2026-04-06"];
  for (const fields of [undefined, "wind.mps,note"]) {
    const q = new URLSearchParams({ since: "2026-04-04", until: "2026-04-06", format: "csv" });
    if (fields) q.set("fields", fields);
    q.set("type", "weather");
    const res = await getText(`${server.url}/history?${q}`);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.type, "text/csv; charset=utf-8; header=present");
    const out = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        CLI,
        "telemetry",
        "read",
        "weather",
        "--site-dir",
        tmp.path,
        "--tz",
        ZONE,
        "--format",
        "csv",
        ...args,
        ...(fields ? ["--fields", fields] : []),
      ],
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
    const printed = new TextDecoder().decode(out.stdout);
    assert.ok(printed.split("\r\n").length > 100);
    assert.equal(res.text, printed);
  }
});

Deno.test("GET /history?run= answers that run's stored lines, and 404 names an unknown run", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const post = async (path: string, body: unknown) => {
    const res = await fetch(`${server.url}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    assert.ok(res.ok, await res.text());
  };
  await post("/event", { type: "weather", data: { v: 0 } });
  await post("/run/start", { run_id: "m31-1" });
  for (let i = 1; i <= 5; i++) await post("/event", { type: "weather", data: { v: i } });
  await post("/run/stop", {});
  await post("/event", { type: "weather", data: { v: 9 } });
  const runFile = await Deno.readTextFile(join(tmp.path, "m31-1", "telemetry.ndjson"));
  const res = await getText(`${server.url}/history?run=m31-1&since=1d`);
  assert.equal(res.status, 200, res.text);
  assert.equal(res.text, runFile);
  const missing = await getText(`${server.url}/history?run=nope-1`);
  assert.equal(missing.status, 404);
  assert.match(JSON.parse(missing.text).detail, /nope-1/);
});

Deno.test("GET /history answers 400 naming each bad parameter", async () => {
  await using tmp = await tempDir();
  await using server = await testServer({ siteDir: tmp.path });
  const cases: [string, string][] = [
    ["every=5s", "every"],
    ["every=8d", "every"],
    ["every=5x", "every"],
    ["every=5m&agg=median", "agg"],
    ["every=5m&agg=mean,mean", "agg"],
    ["agg=mean", "agg"],
    ["since=yesterday", "since"],
    ["until=2026-02-30", "until"],
    ["since=2026-05-10T03:00:00Z&until=2026-05-10T02:00:00Z", "since"],
    ["limit=0", "limit"],
    ["limit=1000001", "limit"],
    ["limit=ten", "limit"],
    ["format=xml", "format"],
    ["format=csv&every=5m", "format"],
    ["fields=a", "fields"],
    ["format=csv&fields=a,,b", "fields"],
    ["run=../x", "run"],
    ["type=" + encodeURIComponent("a\u0007b"), "type"],
    ["since=1h&since=2h", "since"],
    ["evry=5m", '"evry"'],
  ];
  for (const [query, name] of cases) {
    const res = await getText(`${server.url}/history?${query}`);
    assert.equal(res.status, 400, `${query}: ${res.text}`);
    assert.match(res.type ?? "", /^application\/problem\+json/);
    const detail: string = JSON.parse(res.text).detail;
    assert.ok(detail.includes(`parameter ${name} `), `${query}: ${detail}`);
  }
});

Deno.test("--public-read lets GET /history in without the token; without it the token is asked", async () => {
  await using tmp = await tempDir();
  {
    await using open = await testServer({ siteDir: tmp.path, token: "s3cret", publicRead: true });
    const res = await getText(`${open.url}/history`);
    assert.equal(res.status, 200, res.text);
  }
  await using closed = await testServer({ siteDir: tmp.path, token: "s3cret" });
  const denied = await getText(`${closed.url}/history`);
  assert.equal(denied.status, 401);
  const allowed = await getText(`${closed.url}/history`, { authorization: "Bearer s3cret" });
  assert.equal(allowed.status, 200);
});

Deno.test("GET /history with a limit, continued from next_since, loses no line (seeded data, clock steps)", async () => {
  await using tmp = await tempDir();
  const rnd = random(4711);
  const lines: string[] = [];
  let ms = Date.parse("2026-05-10T16:00:00Z");
  for (let seq = 1; seq <= 3000; seq++) {
    // Mostly forward, sometimes the same ms, now and then a clock step back.
    const r = rnd();
    ms += r < 0.2 ? 0 : r < 0.97 ? Math.floor(rnd() * 20_000) : -Math.floor(rnd() * 600_000);
    lines.push(line(seq, ms, rnd() < 0.7 ? "weather" : "dome", { v: seq }));
  }
  await Deno.writeTextFile(join(tmp.path, "site_20260510.ndjson"), lines.join("\n") + "\n");
  await using server = await testServer({ siteDir: tmp.path });
  const since = "2026-05-10T12:00:00Z", until = "2026-05-11T12:00:00Z";
  const want = inRange(lines, Date.parse(since), Date.parse(until), ["weather"]);
  for (const limit of [1, 7, 500]) {
    const got = new Set<string>();
    let from = since, lim = limit;
    for (let page = 0; page < 10_000; page++) {
      const res = await getText(
        `${server.url}/history?type=weather&since=${from}&until=${until}&limit=${lim}`,
      );
      assert.equal(res.status, 200, res.text);
      const answer = res.text.trimEnd().split("\n").filter((l) => l !== "");
      const last = answer.at(-1) ? JSON.parse(answer.at(-1)!) : undefined;
      const body = last?.truncated ? answer.slice(0, -1) : answer;
      assert.ok(body.length <= lim);
      for (const l of body) got.add(l);
      if (!last?.truncated) break;
      assert.match(last.next_since, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      assert.ok(Date.parse(last.next_since) >= Date.parse(from));
      // A page whose lines all lie at or after next_since (more lines of one ts than the
      // limit, or a clock step back longer than the page) moves nothing on: ask for more.
      if (Date.parse(last.next_since) === Date.parse(from)) lim *= 2;
      from = last.next_since;
    }
    assert.deepEqual([...want].filter((l) => !got.has(l)), [], `limit ${limit}`);
  }
});

Deno.test("TelemetryClient.history follows next_since by itself and gives each stored event once", async () => {
  await using tmp = await tempDir();
  const rnd = random(99);
  const lines: string[] = [];
  let ms = Date.parse("2026-05-10T16:00:00Z");
  for (let seq = 1; seq <= 1500; seq++) {
    const r = rnd();
    ms += r < 0.3 ? 0 : r < 0.98 ? Math.floor(rnd() * 20_000) : -Math.floor(rnd() * 300_000);
    lines.push(line(seq, ms, "weather", { v: seq % 17 }));
  }
  await Deno.writeTextFile(join(tmp.path, "site_20260510.ndjson"), lines.join("\n") + "\n");
  await using server = await testServer({ siteDir: tmp.path });
  const client = new TelemetryClient({ baseUrl: server.url });
  const since = "2026-05-10T12:00:00Z", until = "2026-05-11T12:00:00Z";
  const got: string[] = [];
  for await (const event of client.history({ since, until, limit: 40 })) {
    got.push(JSON.stringify(event));
  }
  const want = inRange(lines, Date.parse(since), Date.parse(until));
  assert.equal(got.length, want.length, "no event lost, none repeated");
  assert.deepEqual(new Set(got), new Set(want));
  const buckets = [];
  for await (const b of client.history({ since, until, every: "1h", agg: ["count"], limit: 3 })) {
    buckets.push(b);
  }
  assert.equal(buckets.reduce((n, b) => n + b.count, 0), want.length);
  assert.equal(new Set(buckets.map((b) => b.t)).size, buckets.length);
  // Stopping early lets go of the answer (--trace-leaks would name a body left open).
  for await (const _ of client.history({ since, until })) break;
  await assert.rejects(
    async () => {
      for await (const _ of client.history({ every: "1s" })) break;
    },
    (err: Error) => err.name === "TelemetryHttpError" && /every/.test(err.message),
  );
});
