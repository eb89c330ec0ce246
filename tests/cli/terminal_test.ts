/**
 * Hostile strings in data, `meta` and answers never reach the operator's terminal raw: every
 * human-readable output of the command line shows control characters as `\uXXXX` escapes, and
 * JSON printed on a terminal keeps its value with C1 escaped (docs/cli.md, "Human output and
 * terminals"). @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { CLI, postJson, tempDir, testServer } from "../_shared/util.ts";

/** Window title, screen clear, 8-bit CSI, an OSC 52 clipboard write, CR, backspace, bidi. */
const HOSTILE = {
  title: "\x1b]0;pwned\x07",
  clear: "\x1b[2J",
  csi: "\u009b31m",
  clip: "\x1b]52;c;ZXZpbA==\x07",
  cr: "ok\rFAIL",
  bs: "ab\b\bcd",
  bidi: "\u202etxt",
};

/** Anything a terminal acts on, except the LF that ends each line. */
const RAW_CONTROL =
  // deno-lint-ignore no-control-regex -- the point is to find them
  /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;

function assertPrintable(text: string, what: string): void {
  const found = RAW_CONTROL.exec(text);
  assert.equal(
    found,
    null,
    `${what} printed U+${found?.[0].charCodeAt(0).toString(16).padStart(4, "0")}: ${
      JSON.stringify(text)
    }`,
  );
}

async function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-all", CLI, "telemetry", ...args],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const d = new TextDecoder();
  return { code: out.code, stdout: d.decode(out.stdout), stderr: d.decode(out.stderr) };
}

Deno.test("current prints hostile data and meta with every control character escaped", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const posted = await postJson(`${server.url}/event`, {
    type: "weather",
    data: HOSTILE,
    meta: { note: HOSTILE.title },
  });
  assert.equal(posted.status, 200, JSON.stringify(posted.body));
  const r = await cli(["current", "--host", "127.0.0.1", "--port", String(server.addr.port)]);
  assert.equal(r.code, 0, r.stderr);
  assertPrintable(r.stdout, "current");
  assert.match(r.stdout, /title=\\u001b\]0;pwned\\u0007/);
  assert.match(r.stdout, /csi=\\u009b31m/);
});

Deno.test("current --follow redraws hostile data with every control character escaped", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  await postJson(`${server.url}/event`, { type: "weather", data: HOSTILE });
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-all",
      CLI,
      "telemetry",
      "current",
      "--follow",
      "--host",
      "127.0.0.1",
      "--port",
      String(server.addr.port),
    ],
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let out = "";
  const deadline = Date.now() + 15_000;
  while (!out.includes("clip=") && Date.now() < deadline) {
    const { value, done } = await reader.read();
    if (done) break;
    out += value;
  }
  child.kill("SIGINT");
  while (true) {
    const { value, done } = await reader.read();
    if (done) break;
    out += value;
  }
  await child.stderr.cancel();
  assert.equal((await child.status).code, 0);
  assert.ok(out.includes("clip="), out);
  assertPrintable(out, "current --follow");
});

Deno.test("read --format table prints hostile cells with every control character escaped", async () => {
  await using dir = await tempDir();
  const line = JSON.stringify({
    seq: 1,
    ts: "2026-05-10T13:00:00.000Z",
    type: "weather",
    data: HOSTILE,
    meta: {},
  });
  await Deno.writeTextFile(join(dir.path, "site_20260510.ndjson"), line + "\n");
  for (const fields of [[], ["--fields", Object.keys(HOSTILE).join(",")]]) {
    const r = await cli(["read", "--site-dir", dir.path, "--format", "table", ...fields]);
    assert.equal(r.code, 0, r.stderr);
    assertPrintable(r.stdout, `read --format table ${fields.join(" ")}`);
    assert.match(r.stdout, /\\u001b\[2J/);
  }
});

Deno.test("start-run and stop-run print a hostile meta.target with every control character escaped", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const conn = ["--host", "127.0.0.1", "--port", String(server.addr.port)];
  const target = Object.values(HOSTILE).join("|");
  const started = await cli(["start-run", "m31", "--meta", JSON.stringify({ target }), ...conn]);
  assert.equal(started.code, 0, started.stderr);
  assertPrintable(started.stdout, "start-run");
  assert.match(started.stdout, /target \\u001b\]0;pwned\\u0007\|/);
  const stopped = await cli(["stop-run", ...conn]);
  assert.equal(stopped.code, 0, stopped.stderr);
  assertPrintable(stopped.stdout, "stop-run");
  assert.match(stopped.stdout, /^run m31 started .*target \\u001b/);
});

/** Runs `cli.ts telemetry ...` on a pseudo-terminal; `undefined` without util-linux `script`. */
async function onTerminal(args: string[]): Promise<{ code: number; stdout: string } | undefined> {
  const noScript = await new Deno.Command("script", { args: ["--version"], stdout: "null" })
    .output().then((o) => !o.success, () => true);
  if (noScript) {
    // deno-lint-ignore no-console
    console.log("skipping: util-linux 'script' (a pseudo-terminal) is not installed");
    return undefined;
  }
  const deno = [Deno.execPath(), "run", "--allow-all", CLI, "telemetry", ...args];
  const out = await new Deno.Command("script", {
    args: ["-qfec", deno.map((a) => `'${a}'`).join(" "), "/dev/null"],
    env: { NO_COLOR: "1", TERM: "xterm", OBS_TELEMETRY_TZ: "UTC" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  // The pseudo-terminal turns LF into CRLF (and CSV's own CRLF into CR CR LF): line ends only.
  return { code: out.code, stdout: new TextDecoder().decode(out.stdout).replace(/\r+\n/g, "\n") };
}

async function hostileSite(dir: string): Promise<string> {
  const stored = JSON.stringify({
    seq: 1,
    ts: "2026-05-10T13:00:00.000Z",
    type: "weather",
    data: HOSTILE,
    meta: {},
  });
  await Deno.writeTextFile(join(dir, "site_20260510.ndjson"), stored + "\n");
  return stored;
}

Deno.test("read on a terminal prints ndjson with C1 escaped, parsing to the same values", async () => {
  await using dir = await tempDir();
  const stored = await hostileSite(dir.path);
  const r = await onTerminal(["read", "--site-dir", dir.path]);
  if (!r) return;
  assert.equal(r.code, 0, r.stdout);
  assertPrintable(r.stdout, "read on a terminal");
  assert.deepEqual(JSON.parse(r.stdout.trim()), JSON.parse(stored));
  // Into a pipe the line stays byte for byte as stored.
  const piped = await cli(["read", "--site-dir", dir.path]);
  assert.equal(piped.stdout, stored + "\n");
});

Deno.test("read --format csv on a terminal prints every control character in a cell escaped", async () => {
  await using dir = await tempDir();
  await hostileSite(dir.path);
  const fields = ["--fields", Object.keys(HOSTILE).join(",")];
  const r = await onTerminal(["read", "--site-dir", dir.path, "--format", "csv", ...fields]);
  if (!r) return;
  assert.equal(r.code, 0, r.stdout);
  assertPrintable(r.stdout, "read --format csv on a terminal");
  assert.match(r.stdout, /,\\u001b\]0;pwned\\u0007,/);
  // Into a file the cells stay exact.
  const piped = await cli(["read", "--site-dir", dir.path, "--format", "csv", ...fields]);
  assert.ok(piped.stdout.includes(`,${HOSTILE.clear},`), piped.stdout);
});
