/**
 * Safety notifications (docs/safety.md#notifications): the two formats as a real receiver gets
 * them, the queue's schedule (back-off, order, overflow, the hour), shutdown, the metric, and the
 * service's verdict end to end (the flags: notify_flags_test.ts).
 * @module
 */

import assert from "node:assert/strict";
import { type Notification, Notifier, type NotifyLog } from "../../notify/queue.ts";
import { type NotifyFormat, postNotification } from "../../notify/post.ts";
import { ServiceMetrics } from "../../http/metrics.ts";
import {
  openService,
  postJson,
  promtoolCheck,
  promtoolMissing,
  tempDir,
  testServer,
} from "../_shared/util.ts";
import { join } from "node:path";
import { parseTypes } from "../../core/types_registry.ts";
import { spawnServer } from "../../server.ts";
import { closedPort, silentReceiver, startReceiver, waitFor } from "../_shared/notify_util.ts";

const SITE = "0b6f9c1e-7a54-4d0e-9a51-3f1c8f1b2d3a";

const UNSAFE: Notification = {
  kind: "safety",
  safe: false,
  reasons: ["weather: wind_mps 16.2 m/s above alarm 15", "dome: stale for 412 s"],
  ts: "2026-11-27T03:12:40.000Z",
  site: SITE,
};

const TYPE_ALARM: Notification = {
  kind: "type",
  type: "weather",
  state: "alarm",
  previous: "ok",
  reasons: ["weather: wind_mps 16.2 m/s above alarm 15"],
  ts: "2026-11-27T03:12:40.000Z",
  site: SITE,
};

/** A log that keeps its lines. */
function memoryLog(): NotifyLog & { lines: string[] } {
  const lines: string[] = [];
  return {
    lines,
    info: (msg) => lines.push(`info ${msg}`),
    warn: (msg) => lines.push(`warn ${msg}`),
  };
}

/** A notifier that POSTs for real, with a short schedule. */
function notifier(
  receivers: string[],
  options: Partial<ConstructorParameters<typeof Notifier>[0]> & { format?: NotifyFormat } = {},
): Notifier {
  const format = options.format ?? "json";
  return new Notifier({
    receivers,
    send: (url, message, signal) => postNotification(url, message, format, signal),
    firstDelayMs: 20,
    maxDelayMs: 80,
    timeoutMs: 2000,
    ...options,
  });
}

function numbered(i: number): Notification {
  return { ...UNSAFE, reasons: [`message ${i}`] };
}

Deno.test("a json receiver gets each change as application/json with the documented keys and the site id", async () => {
  await using receiver = startReceiver();
  const n = notifier([receiver.url]);
  try {
    n.notify(UNSAFE);
    n.notify(TYPE_ALARM);
    await waitFor(() => receiver.received.length === 2, "two notifications");
  } finally {
    await n.close(1000);
  }
  const [first, second] = receiver.received;
  assert.equal(first!.method, "POST");
  assert.equal(first!.path, "/hook");
  assert.equal(first!.headers["content-type"], "application/json");
  assert.equal(
    first!.body,
    `{"kind":"safety","safe":false,"reasons":["weather: wind_mps 16.2 m/s above alarm 15","dome: stale for 412 s"],"ts":"2026-11-27T03:12:40.000Z","site":"${SITE}"}`,
  );
  assert.deepEqual(JSON.parse(second!.body), {
    kind: "type",
    type: "weather",
    state: "alarm",
    previous: "ok",
    reasons: ["weather: wind_mps 16.2 m/s above alarm 15"],
    ts: "2026-11-27T03:12:40.000Z",
    site: SITE,
  });
  assert.deepEqual(n.counts, { sent: 2, failed: 0, dropped: 0 });
});

Deno.test("an ntfy receiver gets the reasons as text/plain with Title, Priority high when unsafe, and Tags", async () => {
  await using receiver = startReceiver();
  const n = notifier([receiver.url], { format: "ntfy" });
  try {
    n.notify(UNSAFE);
    n.notify({ kind: "safety", safe: true, reasons: [], ts: UNSAFE.ts, site: SITE });
    n.notify(TYPE_ALARM);
    await waitFor(() => receiver.received.length === 3, "three notifications");
  } finally {
    await n.close(1000);
  }
  const [unsafe, safe, type] = receiver.received;
  assert.equal(unsafe!.headers["content-type"], "text/plain; charset=utf-8");
  assert.equal(unsafe!.body, "weather: wind_mps 16.2 m/s above alarm 15\ndome: stale for 412 s");
  assert.equal(unsafe!.headers["title"], "Site UNSAFE");
  assert.equal(unsafe!.headers["priority"], "high");
  assert.equal(unsafe!.headers["tags"], "warning,telemetry,safety");
  assert.equal(safe!.headers["title"], "Site safe");
  assert.equal(safe!.headers["priority"], "default");
  assert.equal(safe!.headers["tags"], "white_check_mark,telemetry,safety");
  assert.equal(safe!.body, "every critical type is fine");
  assert.equal(type!.headers["title"], "weather: alarm (was ok)");
  assert.equal(type!.headers["priority"], "high");
});

Deno.test("an ntfy title with letters beyond ASCII is sent as an RFC 2047 encoded word", async () => {
  await using receiver = startReceiver();
  const n = notifier([receiver.url], { format: "ntfy" });
  try {
    n.notify({ ...TYPE_ALARM, type: "météo" });
    await waitFor(() => receiver.received.length === 1, "one notification");
  } finally {
    await n.close(1000);
  }
  const title = receiver.received[0]!.headers["title"]!;
  const m = /^=\?UTF-8\?B\?([A-Za-z0-9+/=]+)\?=$/.exec(title);
  assert.ok(m, title);
  const text = new TextDecoder().decode(Uint8Array.from(atob(m[1]!), (c) => c.charCodeAt(0)));
  assert.equal(text, "météo: alarm (was ok)");
});

Deno.test("a receiver that is down and then up gets the queued message after the back-off, with one log line each way", async () => {
  const port = closedPort();
  const log = memoryLog();
  const n = notifier([`http://127.0.0.1:${port}/hook`], { log });
  let receiver: ReturnType<typeof startReceiver> | undefined;
  try {
    n.notify(numbered(1));
    n.notify(numbered(2));
    await waitFor(() => n.counts.failed >= 3, "three failed tries");
    receiver = startReceiver({ port });
    await waitFor(() => receiver!.received.length === 2, "both messages after the receiver is up");
  } finally {
    await n.close(1000);
    await receiver?.close();
  }
  assert.deepEqual(receiver.received.map((r) => JSON.parse(r.body).reasons[0]), [
    "message 1",
    "message 2",
  ]);
  const counts = n.counts;
  assert.equal(counts.sent, 2);
  assert.equal(counts.dropped, 0);
  assert.ok(counts.failed >= 3, String(counts.failed));
  assert.equal(log.lines.length, 2, log.lines.join("\n"));
  assert.match(
    log.lines[0]!,
    new RegExp(
      `^warn notification receiver http://127\\.0\\.0\\.1:${port}/hook is down \\(.+\\); retrying each message for 60 min, at most 0\\.08 s apart$`,
    ),
  );
  assert.match(
    log.lines[1]!,
    new RegExp(
      `^info notification receiver http://127\\.0\\.0\\.1:${port}/hook is up again after \\d+ failed tries$`,
    ),
  );
});

Deno.test("the wait between tries doubles from the first delay and never passes the cap", async () => {
  const tries: number[] = [];
  const n = new Notifier({
    receivers: ["http://127.0.0.1:9/hook"],
    send: () => {
      tries.push(performance.now());
      return Promise.reject(new Error("refused"));
    },
    firstDelayMs: 20,
    maxDelayMs: 80,
  });
  try {
    n.notify(numbered(1));
    await waitFor(() => tries.length >= 6, "six tries", 5000);
  } finally {
    await n.close(0);
  }
  const gaps = tries.slice(1, 6).map((t, i) => t - tries[i]!);
  // 20, 40, 80, 80, 80 ms: timers fire late, never early.
  for (const [i, want] of [20, 40, 80, 80, 80].entries()) {
    assert.ok(gaps[i]! >= want - 2, `gap ${i}: ${gaps[i]} ms, want at least ${want}`);
  }
  assert.ok(gaps[4]! < 80 + 400, `gap 4 ${gaps[4]} ms stays near the cap`);
});

Deno.test("messages to one receiver arrive in order, and a dead receiver does not hold back another", async () => {
  await using receiver = startReceiver();
  const dead = `http://127.0.0.1:${closedPort()}/hook`;
  const n = notifier([dead, receiver.url]);
  try {
    for (let i = 1; i <= 20; i++) n.notify(numbered(i));
    // Sent once answered: a message the receiver has but whose answer is still on its way when
    // close(0) aborts the try is dropped too.
    await waitFor(() => receiver.received.length === 20 && n.counts.sent === 20, "twenty sent");
  } finally {
    await n.close(0);
  }
  assert.deepEqual(
    receiver.received.map((r) => JSON.parse(r.body).reasons[0]),
    Array.from({ length: 20 }, (_, i) => `message ${i + 1}`),
  );
  // The dead receiver's 20 are dropped at shutdown.
  assert.equal(n.counts.dropped, 20);
});

Deno.test("a full queue drops the oldest waiting message, counts each, and warns once", async () => {
  const release = Promise.withResolvers<number>();
  await using receiver = startReceiver({
    answer: (req) => JSON.parse(req.body).reasons[0] === "message 1" ? release.promise : 200,
  });
  const log = memoryLog();
  const n = notifier([receiver.url], { capacity: 3, log });
  try {
    n.notify(numbered(1));
    await waitFor(() => receiver.received.length === 1, "the first message in flight");
    for (let i = 2; i <= 7; i++) n.notify(numbered(i));
    // 1 in flight, then 2..7 into a queue of 3 (1 included): 2, 3, 4 and 5 are dropped.
    assert.equal(n.counts.dropped, 4);
    assert.equal(n.waiting, 3);
    release.resolve(200);
    await waitFor(() => receiver.received.length === 3, "the rest");
  } finally {
    await n.close(1000);
  }
  assert.deepEqual(receiver.received.map((r) => JSON.parse(r.body).reasons[0]), [
    "message 1",
    "message 6",
    "message 7",
  ]);
  assert.deepEqual(n.counts, { sent: 3, failed: 0, dropped: 4 });
  const warnings = log.lines.filter((l) => l.startsWith("warn"));
  assert.deepEqual(warnings, [
    `warn notification queue of ${receiver.url} is full (3 messages): dropping the oldest until it has room`,
  ]);
});

Deno.test("messages tried for the maximum age are dropped together with one warning", async () => {
  let now = 0;
  const log = memoryLog();
  const n = notifier([`http://127.0.0.1:${closedPort()}/hook`], {
    now: () => now,
    maxAgeMs: 1000,
    log,
  });
  try {
    n.notify(numbered(1));
    n.notify(numbered(2));
    await waitFor(() => n.counts.failed >= 1, "a failed try");
    now = 1000;
    await waitFor(() => n.counts.dropped === 2, "both dropped");
    assert.equal(n.waiting, 0);
  } finally {
    await n.close(0);
  }
  const warnings = log.lines.filter((l) => l.startsWith("warn"));
  assert.equal(warnings.length, 2, warnings.join("\n"));
  assert.match(
    warnings[1]!,
    /^warn dropped 2 notifications to http:\/\/127\.0\.0\.1:\d+\/hook after trying for 0 min$/,
  );
});

Deno.test("a receiver that never answers is a failed try after the timeout, logged once", async () => {
  await using silent = silentReceiver();
  const log = memoryLog();
  const n = notifier([silent.url], { timeoutMs: 100, log });
  try {
    n.notify(numbered(1));
    await waitFor(() => n.counts.failed >= 2, "two timed-out tries");
  } finally {
    await n.close(0);
  }
  assert.equal(n.counts.sent, 0);
  assert.equal(n.counts.dropped, 1);
  const down = log.lines.filter((l) => l.includes("is down"));
  assert.equal(down.length, 1, log.lines.join("\n"));
  assert.match(down[0]!, /is down \(no answer within 100 ms\)/);
});

Deno.test("close() with a receiver that never answers returns within the drain and drops what is left", async () => {
  await using silent = silentReceiver();
  const log = memoryLog();
  const n = notifier([silent.url], { timeoutMs: 60_000, log });
  n.notify(numbered(1));
  n.notify(numbered(2));
  await waitFor(() => silent.accepted >= 1, "the connection");
  const started = performance.now();
  await n.close(200);
  const took = performance.now() - started;
  assert.ok(took >= 190 && took < 1500, `close took ${took} ms`);
  assert.deepEqual(n.counts, { sent: 0, failed: 0, dropped: 2 });
  assert.deepEqual(log.lines, ["warn dropped 2 unsent notifications at shutdown"]);
  // After close, notify() is ignored.
  n.notify(numbered(3));
  assert.equal(n.waiting, 0);
});

Deno.test("/metrics has telemetry_notifications_total by result, and promtool accepts it", async (t) => {
  await using tmp = await tempDir();
  await using service = await openService(tmp.path);
  await using receiver = startReceiver({
    answer: (req) => req.body.includes("message 2") ? 500 : 200,
  });
  const n = notifier([receiver.url], { maxAgeMs: 60_000 });
  const metrics = new ServiceMetrics(service, { notifications: () => n.counts });
  try {
    n.notify(numbered(1));
    n.notify(numbered(2));
    await waitFor(() => n.counts.failed >= 2, "two failed tries of message 2");
  } finally {
    await n.close(0);
  }
  const text = metrics.render();
  assert.match(text, /^# TYPE telemetry_notifications_total counter$/m);
  assert.match(text, /^telemetry_notifications_total\{result="sent"\} 1$/m);
  assert.match(text, /^telemetry_notifications_total\{result="failed"\} [2-9]\d*$/m);
  assert.match(text, /^telemetry_notifications_total\{result="dropped"\} 1$/m);
  const missing = promtoolMissing();
  await t.step({
    name: "promtool check metrics",
    ignore: missing !== undefined,
    fn: async () => {
      const { ok, report } = await promtoolCheck(text);
      assert.ok(ok, report);
    },
  });
  // deno-lint-ignore no-console
  if (missing) console.log(`notify_test.ts: skipping promtool: ${missing}`);
});

// --- End to end: the service's verdict ---------------------------------------------------------

/** A critical weather type with a wind alarm, cleared at once. */
const WEATHER_TYPES = {
  weather: {
    critical: true,
    stale_after_s: 600,
    clear_after_s: 0,
    fields: { wind_mps: { unit: "m/s", alarm_above: 15 } },
  },
};

Deno.test("a critical type going to alarm and back is notified to a json receiver with the site's id", async () => {
  await using tmp = await tempDir();
  await using receiver = startReceiver();
  const server = await testServer({
    siteDir: join(tmp.path, "site"),
    types: parseTypes(JSON.stringify(WEATHER_TYPES), "types.json"),
    notify: [receiver.url],
  });
  try {
    const siteId = JSON.parse(await Deno.readTextFile(join(server.service.siteDir, ".site.json")))
      .site_id;
    assert.equal(
      (await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 20 } })).status,
      200,
    );
    await waitFor(() => receiver.received.length >= 1, "the alarm's notification");
    assert.equal(
      (await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 3 } })).status,
      200,
    );
    await waitFor(
      () => receiver.received.some((r) => JSON.parse(r.body).safe === true),
      "safe again",
    );
    const bodies = receiver.received.map((r) => JSON.parse(r.body));
    const alarm = bodies.find((b) => b.kind === "type" && b.state === "alarm");
    assert.ok(alarm, JSON.stringify(bodies));
    assert.equal(alarm.type, "weather");
    assert.equal(alarm.previous, "stale");
    assert.deepEqual(alarm.reasons, ["wind_mps 20 m/s above alarm 15"]);
    assert.equal(alarm.site, siteId);
    assert.ok(!Number.isNaN(Date.parse(alarm.ts)), alarm.ts);
    const safe = bodies.find((b) => b.kind === "safety" && b.safe === true);
    assert.deepEqual(safe.reasons, []);
    assert.equal(safe.site, siteId);
    // Counted once the receiver's answer is in.
    let metrics = "";
    await waitFor(async () => {
      metrics = await (await fetch(`${server.url}/metrics`)).text();
      const sent = /^telemetry_notifications_total\{result="sent"\} (\d+)$/m.exec(metrics)?.[1];
      return Number(sent) === receiver.received.length;
    }, "the sent count in /metrics");
    assert.match(metrics, /^telemetry_notifications_total\{result="failed"\} 0$/m);
  } finally {
    await server.shutdown();
  }
});

Deno.test("spawnServer() with --notify and --notify-format ntfy may reach the receiver under its scoped permissions", async () => {
  await using tmp = await tempDir();
  await using receiver = startReceiver();
  const typesFile = join(tmp.path, "types.json");
  await Deno.writeTextFile(typesFile, JSON.stringify(WEATHER_TYPES));
  await using server = await spawnServer({
    siteDir: join(tmp.path, "site"),
    host: "127.0.0.1",
    port: 0,
    timeZone: "UTC",
    typesFile,
    notify: [receiver.url],
    notifyFormat: "ntfy",
    output: "null",
  });
  const cmdline = (await Deno.readTextFile(`/proc/${server.pid}/cmdline`)).split("\0");
  assert.ok(
    cmdline.some((a) => a.startsWith("--allow-net=") && a.endsWith(`,127.0.0.1:${receiver.port}`)),
    cmdline.join(" "),
  );
  assert.equal(
    (await postJson(`${server.url}/event`, { type: "weather", data: { wind_mps: 20 } })).status,
    200,
  );
  await waitFor(() => receiver.received.length >= 1, "the alarm's notification");
  const alarm = receiver.received[0]!;
  assert.equal(alarm.headers["title"], "weather: alarm (was stale)");
  assert.equal(alarm.headers["priority"], "high");
  assert.equal(alarm.body, "wind_mps 20 m/s above alarm 15");
});

Deno.test("the log line of a receiver that is down says what failed and never shows the URL's query", async () => {
  const port = closedPort();
  const log = memoryLog();
  const n = notifier([`http://127.0.0.1:${port}/hook?auth=s3cret`], { log });
  try {
    n.notify(numbered(1));
    await waitFor(() => n.counts.failed >= 1, "a failed try");
  } finally {
    await n.close(0);
  }
  assert.match(
    log.lines[0]!,
    new RegExp(
      `^warn notification receiver http://127\\.0\\.0\\.1:${port}/hook is down \\(Connection refused \\(os error 111\\)\\); `,
    ),
  );
  assert.ok(!log.lines.some((l) => l.includes("s3cret")), log.lines.join("\n"));
});
