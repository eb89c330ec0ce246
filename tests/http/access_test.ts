/**
 * Who may read and write without the token (docs/http-api.md, docs/operations.md): every mode combination (token,
 * `--public-read`, `--trust-loopback`, TLS) against GET, POST and DELETE, from a loopback peer and
 * from a peer with a non-loopback address inside a network namespace made for the test.
 * @module
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import {
  curl,
  type CurlResult,
  netns,
  netnsUnavailable,
  opensslMissing,
  selfSignedCert,
} from "../_shared/net.ts";
import { readSiteLines, tempDir, testServer } from "../_shared/util.ts";
import { isPublicRead, PUBLIC_READ_PATHS } from "../../http/guards.ts";
import { resolveRunFlags } from "../../cli/flags.ts";

const TOKEN = "lan-s3cret";
const skipNetns = netnsUnavailable() ?? opensslMissing();
if (skipNetns) {
  // deno-lint-ignore no-console
  console.log(`access_test.ts: skipping the network-namespace tests: ${skipNetns}`);
}

interface Mode {
  token: boolean;
  publicRead: boolean;
  trustLoopback: boolean;
}

const MODES: Mode[] = [
  { token: false, publicRead: false, trustLoopback: false }, // --insecure
  { token: true, publicRead: false, trustLoopback: false },
  { token: true, publicRead: true, trustLoopback: false },
  { token: true, publicRead: false, trustLoopback: true },
  { token: true, publicRead: true, trustLoopback: true },
];

type Peer = "loopback" | "lan";
type Method = "GET" | "HEAD" | "POST" | "DELETE";

/**
 * docs/operations.md as a table: the status a request gets. A request with the token, or one let in
 * without it, reaches its route: GET/HEAD /current 200, POST /event 200, DELETE /current 405 (the
 * route has no DELETE). Let in without the token: reads under --public-read, anything from a
 * loopback peer under --trust-loopback.
 */
function expected(mode: Mode, peer: Peer, method: Method, withToken: boolean): number {
  const reached = method === "DELETE" ? 405 : 200;
  if (!mode.token || withToken) return reached;
  if (mode.publicRead && (method === "GET" || method === "HEAD")) return reached;
  if (mode.trustLoopback && peer === "loopback") return reached;
  return 401;
}

function label(mode: Mode, tls: boolean): string {
  const parts = [
    mode.token ? "--token" : "--insecure",
    ...(mode.publicRead ? ["--public-read"] : []),
    ...(mode.trustLoopback ? ["--trust-loopback"] : []),
    ...(tls ? ["TLS"] : []),
  ];
  return parts.join(" ");
}

Deno.test({
  name:
    "every access mode, with and without TLS, lets in exactly the reads and writes docs/operations.md allows, from this machine and from the LAN",
  ignore: skipNetns !== undefined,
  async fn() {
    await using ns = await netns();
    await using dir = await tempDir();
    const tlsFiles = await selfSignedCert(dir.path, [ns.hostAddr]);
    const failures: string[] = [];
    for (const tls of [false, true]) {
      for (const mode of MODES) {
        await using site = await tempDir();
        await using server = await testServer({
          siteDir: site.path,
          hostname: "0.0.0.0",
          ...(mode.token ? { token: TOKEN } : { insecure: true }),
          publicRead: mode.publicRead,
          trustLoopback: mode.trustLoopback,
          ...(tls ? { tlsCert: tlsFiles.cert, tlsKey: tlsFiles.key } : {}),
        });
        const scheme = tls ? "https" : "http";
        const base: Record<Peer, string> = {
          loopback: `${scheme}://127.0.0.1:${server.addr.port}`,
          lan: `${scheme}://${ns.hostAddr}:${server.addr.port}`,
        };
        const cases: Promise<void>[] = [];
        let accepted = 0;
        for (const peer of ["loopback", "lan"] as const) {
          for (const method of ["GET", "HEAD", "POST", "DELETE"] as const) {
            for (const withToken of [false, true]) {
              const want = expected(mode, peer, method, withToken);
              if (method === "POST" && want === 200) accepted++;
              cases.push((async () => {
                const path = method === "POST" ? "/event" : "/current";
                const res = await curl(`${base[peer]}${path}`, {
                  method,
                  ...(peer === "lan" ? { ns: ns.name } : {}),
                  ...(tls ? { cacert: tlsFiles.cert } : {}),
                  headers: {
                    ...(withToken ? { authorization: `Bearer ${TOKEN}` } : {}),
                    ...(method === "POST" ? { "content-type": "application/json" } : {}),
                  },
                  ...(method === "POST"
                    ? { body: JSON.stringify({ type: `from_${peer}`, data: { token: withToken } }) }
                    : {}),
                });
                if (res.status !== want) {
                  failures.push(
                    `${label(mode, tls)}: ${method} ${path} from ${peer} ${
                      withToken ? "with" : "without"
                    } token: ${res.status} ${res.error}${res.body.slice(0, 200)}, expected ${want}`,
                  );
                }
                if (res.status === 401 && method !== "HEAD") {
                  assert.match(JSON.parse(res.body).detail, /Authorization: Bearer <token>/);
                }
              })());
            }
          }
        }
        await Promise.all(cases);
        assert.deepEqual(failures, []);
        // Nothing refused was stored, and everything let in was.
        await server.shutdown();
        const lines = await readSiteLines(site.path);
        assert.equal(lines.length, accepted, `${label(mode, tls)}: stored lines`);
      }
    }
    assert.deepEqual(failures, []);
  },
});

Deno.test({
  name:
    "--trust-loopback trusts neither a foreign Host or Origin from this machine nor a loopback Host sent from the LAN",
  ignore: skipNetns !== undefined,
  async fn() {
    await using ns = await netns();
    await using site = await tempDir();
    await using server = await testServer({
      siteDir: site.path,
      hostname: "0.0.0.0",
      token: TOKEN,
      trustLoopback: true,
    });
    const port = server.addr.port;
    const post = (base: string, headers: Record<string, string>, inNs = false) =>
      curl(`${base}/event`, {
        method: "POST",
        headers: { "content-type": "application/json", ...headers },
        body: '{"type":"probe","data":{}}',
        ...(inNs ? { ns: ns.name } : {}),
      });
    const local = `http://127.0.0.1:${port}`;
    const results: [string, CurlResult, number][] = [
      ["loopback peer, loopback Host", await post(local, {}), 200],
      ["loopback peer, rebinding Host", await post(local, { host: `evil.example:${port}` }), 401],
      ["loopback peer, LAN Host", await post(local, { host: `${ns.hostAddr}:${port}` }), 401],
      [
        "loopback peer, foreign Origin",
        await post(local, { origin: "http://evil.example" }),
        403,
      ],
      ["loopback peer, Origin null", await post(local, { origin: "null" }), 403],
      [
        "LAN peer claiming Host localhost",
        await post(`http://${ns.hostAddr}:${port}`, { host: `localhost:${port}` }, true),
        401,
      ],
      [
        "LAN peer with the token but a foreign Origin",
        await post(
          `http://${ns.hostAddr}:${port}`,
          { authorization: `Bearer ${TOKEN}`, origin: "http://evil.example" },
          true,
        ),
        403,
      ],
      [
        "LAN peer with the token from the dashboard's own origin",
        await post(
          `http://${ns.hostAddr}:${port}`,
          { authorization: `Bearer ${TOKEN}`, origin: `http://${ns.hostAddr}:${port}` },
          true,
        ),
        200,
      ],
    ];
    for (const [what, res, want] of results) {
      assert.equal(res.status, want, `${what}: ${res.body}`);
      if (want !== 200) assert.match(JSON.parse(res.body).detail, /\.$/);
    }
    await server.shutdown();
    assert.equal((await readSiteLines(site.path)).length, 2);
  },
});

Deno.test({
  name: "POST /shutdown from the LAN is refused with 403 even with the token and --trust-loopback",
  ignore: skipNetns !== undefined,
  async fn() {
    await using ns = await netns();
    await using site = await tempDir();
    await using server = await testServer({
      siteDir: site.path,
      hostname: "0.0.0.0",
      token: TOKEN,
      publicRead: true,
      trustLoopback: true,
    });
    const res = await curl(`http://${ns.hostAddr}:${server.addr.port}/shutdown`, {
      method: "POST",
      ns: ns.name,
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    assert.equal(res.status, 403, res.body);
    const ready = await fetch(`http://127.0.0.1:${server.addr.port}/ready`);
    assert.equal(ready.status, 200);
    await ready.body?.cancel();
  },
});

Deno.test("a loopback-bound server refuses a rebinding Host and a foreign Origin in every mode", async () => {
  for (const mode of MODES.filter((m) => m.token)) {
    await using site = await tempDir();
    await using server = await testServer({
      siteDir: site.path,
      token: TOKEN,
      publicRead: mode.publicRead,
      trustLoopback: mode.trustLoopback,
    });
    const url = `http://127.0.0.1:${server.addr.port}/current`;
    for (
      const headers of [
        { host: `evil.example:${server.addr.port}` },
        { origin: "http://evil.example" },
        { origin: "null" },
        { host: `evil.example`, authorization: `Bearer ${TOKEN}` },
      ]
    ) {
      const res = await curl(url, { headers });
      assert.equal(res.status, 403, `${JSON.stringify(mode)} ${JSON.stringify(headers)}`);
    }
  }
});

Deno.test("--public-read opens only GET and HEAD of the listed read routes; other paths and methods still need the token", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path, token: TOKEN, publicRead: true });
  const base = `http://127.0.0.1:${server.addr.port}`;
  const cases: [string, string, number][] = [
    ["GET", "/", 200],
    ["GET", "/ready", 200],
    ["GET", "/metrics", 200],
    ["HEAD", "/current", 200],
    ["HEAD", "/stream", 200],
    ["HEAD", "/", 200],
    ["GET", "/current/never-posted", 404],
    ["GET", "/run", 404],
    ["GET", "/nowhere", 401],
    ["GET", "/shutdown", 401],
    ["GET", "/currentx", 401],
    ["GET", "/event", 401],
    ["POST", "/current", 401],
    ["POST", "/run/start", 401],
    ["PUT", "/current", 401],
    ["OPTIONS", "/current", 401],
  ];
  for (const [method, path, want] of cases) {
    const res = await fetch(`${base}${path}`, { method });
    assert.equal(res.status, want, `${method} ${path}`);
    if (want === 401) {
      assert.match(
        (await res.json()).detail,
        new RegExp(`token for ${method} ${path} \\(only GET and HEAD`),
      );
    } else await res.body?.cancel();
  }
  // A stream opened without the token gets its snapshot.
  const stream = await fetch(`${base}/stream`);
  assert.equal(stream.status, 200);
  await stream.body?.cancel();
});

Deno.test("isPublicRead() covers the read routes of docs/operations.md, /types and /check included, and nothing else", () => {
  for (
    const path of [
      "/",
      "/health",
      "/ready",
      "/run",
      "/current",
      "/types",
      "/check",
      "/stream",
      "/metrics",
      "/current/a/b",
    ]
  ) {
    assert.equal(isPublicRead("GET", path), true, path);
    assert.equal(isPublicRead("HEAD", path), true, path);
    for (const method of ["POST", "DELETE", "PUT", "PATCH", "OPTIONS"]) {
      assert.equal(isPublicRead(method, path), false, `${method} ${path}`);
    }
  }
  for (
    const path of [
      "/run/start",
      "/events",
      "/event",
      "/shutdown",
      "//current",
      "/stream/x",
      "/healthz",
    ]
  ) {
    assert.equal(isPublicRead("GET", path), false, path);
  }
  assert.ok(PUBLIC_READ_PATHS.includes("/types") && PUBLIC_READ_PATHS.includes("/check"));
});

Deno.test("the access switches read 1/0 from OBS_TELEMETRY_* and refuse any other value naming the variable", () => {
  const env = (values: Record<string, string>) => (name: string) => values[name];
  const on = resolveRunFlags(
    { tz: "UTC" },
    env({
      OBS_TELEMETRY_PUBLIC_READ: "1",
      OBS_TELEMETRY_TRUST_LOOPBACK: "TRUE",
      OBS_TELEMETRY_WRAP_CURRENT: "yes",
    }),
  );
  assert.deepEqual([on.publicRead, on.trustLoopback, on.wrapCurrent], [true, true, true]);
  const off = resolveRunFlags({ tz: "UTC" }, env({ OBS_TELEMETRY_PUBLIC_READ: "0" }));
  assert.deepEqual([off.publicRead, off.trustLoopback, off.wrapCurrent], [false, false, false]);
  const flagWins = resolveRunFlags(
    { tz: "UTC", "public-read": true },
    env({ OBS_TELEMETRY_PUBLIC_READ: "0" }),
  );
  assert.equal(flagWins.publicRead, true);
  assert.throws(
    () => resolveRunFlags({ tz: "UTC" }, env({ OBS_TELEMETRY_TRUST_LOOPBACK: "maybe" })),
    {
      name: "RangeError",
      message: 'OBS_TELEMETRY_TRUST_LOOPBACK must be 1 or 0 (true or false), not "maybe"',
    },
  );
});

/** The small part of playwright-core the LAN dashboard test uses. */
interface LanPage {
  goto(url: string): Promise<unknown>;
  waitForFunction<A>(
    fn: (arg: A) => boolean,
    arg: A,
    options: { timeout: number },
  ): Promise<unknown>;
  evaluate<R>(fn: () => Promise<R>): Promise<R>;
  screenshot(options: { path: string; fullPage?: boolean }): Promise<unknown>;
}
interface LanBrowser {
  newPage(options: { viewport: { width: number; height: number } }): Promise<LanPage>;
  close(): Promise<void>;
}

const CHROMIUM = "/usr/bin/chromium";

async function loadChromium(): Promise<
  | {
    launch(o: { executablePath: string; args: string[]; headless: boolean }): Promise<LanBrowser>;
  }
  | string
> {
  try {
    Deno.statSync(CHROMIUM);
  } catch {
    return `${CHROMIUM} is missing (apt-get install -y chromium)`;
  }
  const specifier = ["npm:playwright-core", "1"].join("@");
  try {
    return (await import(specifier)).chromium;
  } catch (err) {
    return `${specifier} cannot be loaded (${err instanceof Error ? err.message : err})`;
  }
}

const chromium = skipNetns === undefined ? await loadChromium() : skipNetns;
const skipBrowser = typeof chromium === "string" ? chromium : undefined;
if (skipBrowser && !skipNetns) {
  // deno-lint-ignore no-console
  console.log(`access_test.ts: skipping the LAN dashboard test: ${skipBrowser}`);
}

Deno.test({
  name:
    "with --public-read the dashboard works read-only in a browser on the LAN, and its writes without the token are 401",
  ignore: skipBrowser !== undefined,
  async fn() {
    await using ns = await netns();
    await using site = await tempDir();
    await using dir = await tempDir();
    await using server = await testServer({
      siteDir: site.path,
      hostname: "0.0.0.0",
      token: TOKEN,
      publicRead: true,
      trustLoopback: true,
    });
    const port = server.addr.port;
    // Chromium runs inside the namespace: every request it makes comes from the LAN address.
    const wrapper = join(dir.path, "chromium-in-netns");
    await Deno.writeTextFile(
      wrapper,
      `#!/bin/sh\nexec ip netns exec ${ns.name} ${CHROMIUM} "$@"\n`,
    );
    await Deno.chmod(wrapper, 0o755);
    // The observatory software on this machine posts without the token (--trust-loopback).
    const local = await fetch(`http://127.0.0.1:${port}/event`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: '{"type":"weather","data":{"wind_mps":2.1}}',
    });
    assert.equal(local.status, 200);
    await local.body?.cancel();
    const browser = await (chromium as Exclude<typeof chromium, string>).launch({
      executablePath: wrapper,
      args: [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
      ],
      headless: true,
    });
    try {
      const page = await browser.newPage({ viewport: { width: 900, height: 500 } });
      await page.goto(`http://${ns.hostAddr}:${port}/`);
      const cell = '[data-type="weather"] [data-field="wind_mps"] dd';
      const shows = (want: string) =>
        page.waitForFunction(
          ([sel, text]) =>
            (globalThis as unknown as {
              document: { querySelector(s: string): { textContent: string | null } | null };
            }).document.querySelector(sel)?.textContent === text,
          [cell, want] as const,
          { timeout: 5000 },
        );
      await shows("2.1");
      const next = await fetch(`http://127.0.0.1:${port}/event`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: '{"type":"weather","data":{"wind_mps":3.4}}',
      });
      await next.body?.cancel();
      await shows("3.4");
      // The page itself (same origin, no token) cannot write.
      const status = await page.evaluate(async () => {
        const res = await fetch("event", {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: '{"type":"weather","data":{"wind_mps":99}}',
        });
        return res.status;
      });
      assert.equal(status, 401);
      await Deno.mkdir(new URL("../artifacts/", import.meta.url), { recursive: true });
      await page.screenshot({
        path: new URL("../artifacts/dashboard-lan.png", import.meta.url).pathname,
      });
    } finally {
      await browser.close();
    }
    assert.equal((await readSiteLines(site.path)).length, 2);
  },
});

Deno.test("--public-read or --trust-loopback without a token says, after the ready line, that it has no effect", async () => {
  await using site = await tempDir();
  const warnings: string[] = [];
  await using server = await testServer({
    siteDir: site.path,
    publicRead: true,
    trustLoopback: true,
    onWarning: (message) => warnings.push(message),
  });
  assert.deepEqual(warnings.filter((w) => w.includes("has no effect")), [
    "--public-read has no effect without --token: every request is already let in; set --token (or OBS_TELEMETRY_TOKEN) to require it for the rest.",
    "--trust-loopback has no effect without --token: every request is already let in; set --token (or OBS_TELEMETRY_TOKEN) to require it for the rest.",
  ]);
  const res = await fetch(`${server.url}/event`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: '{"type":"a","data":{}}',
  });
  assert.equal(res.status, 200);
  await res.body?.cancel();
});
