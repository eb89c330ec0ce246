/**
 * Process-level faults (docs/operations.md, docs/storage.md): file descriptors running out around the listener and
 * in the middle of a commit, and site or run files renamed or deleted while the service runs.
 * Every test runs `cli.ts telemetry run` as a real child process; the descriptor limit is lowered
 * with `prlimit` (util-linux), and the tests are ignored, with the reason printed, without it.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { assertProblem, freePort, readAllStreams, Rng, seedFromEnv } from "./_shared/fault_util.ts";
import { cliRunArgs, tempDir } from "./_shared/util.ts";

const SEED = seedFromEnv(0x5eed_f0d5);
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Why the descriptor tests cannot run here, or `undefined` when they can. */
async function whyNoPrlimit(): Promise<string | undefined> {
  if (Deno.build.os !== "linux") return `prlimit needs Linux, this is ${Deno.build.os}`;
  try {
    const out = await new Deno.Command("prlimit", {
      args: ["--nofile=64:64", "true"],
      stdout: "null",
      stderr: "piped",
    }).output();
    return out.success ? undefined : `prlimit failed: ${decoder.decode(out.stderr).trim()}`;
  } catch (err) {
    return `prlimit is not available (apt-get install util-linux): ${(err as Error).message}`;
  }
}

const noPrlimit = await whyNoPrlimit();
if (noPrlimit !== undefined) {
  // deno-lint-ignore no-console
  console.log(`fault_process_test.ts: ignoring the descriptor tests: ${noPrlimit}`);
}

/** `cli.ts telemetry run` as a child, optionally under a descriptor limit. */
interface Child extends AsyncDisposable {
  readonly port: number;
  readonly url: string;
  readonly status: Promise<Deno.CommandStatus>;
  /** `true` once the process has exited. */
  exited(): boolean;
  output(): string;
  /** Resolves when the output contains `text`; rejects after `timeoutMs`. */
  waitFor(text: string | RegExp, timeoutMs?: number): Promise<void>;
  kill(signal: Deno.Signal): Promise<Deno.CommandStatus>;
}

async function spawn(siteDir: string, options: { nofile?: number } = {}): Promise<Child> {
  const port = freePort();
  const args = cliRunArgs(siteDir, port);
  const command = options.nofile === undefined
    ? new Deno.Command(Deno.execPath(), { args, stdin: "null", stdout: "piped", stderr: "piped" })
    : new Deno.Command("prlimit", {
      args: [`--nofile=${options.nofile}:${options.nofile}`, Deno.execPath(), ...args],
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    });
  const child = command.spawn();
  let out = "";
  let done = false;
  const status = child.status.then((s) => {
    done = true;
    return s;
  });
  const pump = async (stream: ReadableStream<Uint8Array>) => {
    for await (const text of stream.pipeThrough(new TextDecoderStream())) out += text;
  };
  const pumped = Promise.all([pump(child.stdout), pump(child.stderr)]);
  const waitFor = async (text: string | RegExp, timeoutMs = 15_000) => {
    const deadline = Date.now() + timeoutMs;
    const found = () => typeof text === "string" ? out.includes(text) : text.test(out);
    while (!found()) {
      if (Date.now() > deadline || done) {
        throw new Error(`${done ? "exited" : "timed out"} waiting for ${text}; output:\n${out}`);
      }
      await delay(20);
    }
  };
  const kill = async (signal: Deno.Signal) => {
    try {
      child.kill(signal);
    } catch (err) {
      if (!(err instanceof TypeError)) throw err; // already exited
    }
    const s = await status;
    await pumped;
    return s;
  };
  try {
    await waitFor("listening on", 30_000);
  } catch (err) {
    await kill("SIGKILL");
    throw err;
  }
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    status,
    exited: () => done,
    output: () => out,
    waitFor,
    kill,
    async [Symbol.asyncDispose]() {
      await kill("SIGKILL");
    },
  };
}

function delay(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** One HTTP/1.1 exchange on an open keep-alive connection. */
async function exchange(
  conn: Deno.Conn,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; contentType: string | null; text: string }> {
  const payload = body === undefined ? "" : JSON.stringify(body);
  const head = `${method} ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n` +
    (body === undefined ? "" : "Content-Type: application/json\r\n") +
    `Content-Length: ${encoder.encode(payload).length}\r\n\r\n`;
  const bytes = encoder.encode(head + payload);
  for (let off = 0; off < bytes.length;) off += await conn.write(bytes.subarray(off));
  let text = "";
  const buf = new Uint8Array(16 * 1024);
  while (true) {
    const split = text.indexOf("\r\n\r\n");
    if (split >= 0) {
      const length = Number(/content-length: *(\d+)/i.exec(text.slice(0, split))?.[1] ?? 0);
      if (encoder.encode(text.slice(split + 4)).length >= length) {
        const headers = text.slice(0, split);
        return {
          status: Number(headers.split(" ")[1]),
          contentType: /content-type: *([^\r\n]+)/i.exec(headers)?.[1] ?? null,
          text: text.slice(split + 4),
        };
      }
    }
    const n = await conn.read(buf);
    if (n === null) throw new Error(`connection closed mid-answer: ${text}`);
    text += decoder.decode(buf.subarray(0, n));
  }
}

/**
 * Opens connections to the child until one is refused: by then `accept` has failed for want of
 * descriptors and the listener has ended. Returns the open connections.
 */
async function exhaust(port: number): Promise<Deno.Conn[]> {
  const conns: Deno.Conn[] = [];
  for (let i = 0; i < 2000; i++) {
    try {
      conns.push(await Deno.connect({ hostname: "127.0.0.1", port }));
    } catch (err) {
      // Refused, or reset in the handshake as the listener ended under it.
      if (isRefused(err)) return conns;
      throw err;
    }
  }
  for (const c of conns) c.close();
  throw new Error("2000 connections were accepted: the descriptor limit did not apply");
}

function isRefused(err: unknown): boolean {
  return err instanceof Deno.errors.ConnectionRefused || err instanceof Deno.errors.ConnectionReset;
}

function closeAll(conns: Deno.Conn[]): void {
  for (const c of conns) {
    try {
      c.close();
    } catch (err) {
      if (!(err instanceof Deno.errors.BadResource)) throw err;
    }
  }
  conns.length = 0;
}

/** Polls `GET /health` on fresh connections until it answers 200. */
async function waitHealthy(url: string, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (true) {
    try {
      const res = await fetch(`${url}/health`);
      await res.body?.cancel();
      if (res.ok) return;
    } catch {
      // refused while the listener is down: try again
    }
    if (Date.now() > deadline) throw new Error(`${url} did not answer /health again`);
    await delay(50);
  }
}

async function postEvent(url: string, type: string, data: unknown): Promise<number> {
  const res = await fetch(`${url}/event`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ type, data }),
  });
  const body = await res.json();
  assert.equal(res.status, 200, JSON.stringify(body));
  return body.seq;
}

Deno.test({
  name: "the service survives running out of file descriptors and exits 0 only on SIGTERM",
  ignore: noPrlimit !== undefined,
  async fn() {
    const rng = new Rng(SEED);
    await using tmp = await tempDir();
    await using child = await spawn(tmp.path, { nofile: 64 });
    const seqs: number[] = [];
    for (let i = 0; i < rng.int(3, 8); i++) seqs.push(await postEvent(child.url, "probe", { i }));
    const conns = await exhaust(child.port);
    try {
      await child.waitFor("stopped accepting connections");
    } finally {
      closeAll(conns);
    }
    await waitHealthy(child.url);
    for (let i = 0; i < rng.int(3, 8); i++) seqs.push(await postEvent(child.url, "probe", { i }));
    assert.equal(child.exited(), false, child.output());
    const status = await child.kill("SIGTERM");
    assert.equal(status.code, 0, child.output());
    const lines = [...(await readAllStreams(tmp.path)).values()].flat();
    assert.deepEqual(lines.map((l) => l.seq), seqs);
  },
});

Deno.test({
  name: "the service exits non-zero when its listener ends and the port cannot be taken again",
  ignore: noPrlimit !== undefined,
  async fn() {
    await using tmp = await tempDir();
    await using child = await spawn(tmp.path, { nofile: 64 });
    const seq = await postEvent(child.url, "probe", { before: true });
    const conns = await exhaust(child.port);
    let holder: Deno.Listener | undefined;
    try {
      // Each connection the re-opened listener takes ends it again (no descriptor left to
      // accept with); in one of those gaps this test takes the port for itself.
      const deadline = Date.now() + 15_000;
      while (!holder && Date.now() < deadline) {
        try {
          holder = Deno.listen({ hostname: "127.0.0.1", port: child.port });
        } catch (err) {
          if (!(err instanceof Deno.errors.AddrInUse)) throw err;
          try {
            conns.push(await Deno.connect({ hostname: "127.0.0.1", port: child.port }));
          } catch (e) {
            if (!isRefused(e)) throw e;
          }
          await delay(5);
        }
      }
      assert.ok(holder, `never got the port; output:\n${child.output()}`);
      closeAll(conns);
      const status = await Promise.race([
        child.status,
        delay(30_000).then(() => undefined),
      ]);
      assert.ok(status, `still running; output:\n${child.output()}`);
      assert.equal(status.code, 1, child.output());
      assert.match(child.output(), /Cannot listen on 127\.0\.0\.1:\d+ again after \d+ tries/);
    } finally {
      closeAll(conns);
      holder?.close();
    }
    // It shut down in order: the event is on disk, and the lock is free for a restart.
    const lines = [...(await readAllStreams(tmp.path)).values()].flat();
    assert.deepEqual(lines.map((l) => l.seq), [seq]);
    await using again = await spawn(tmp.path);
    assert.equal(await postEvent(again.url, "probe", { after: true }), seq + 1);
    assert.equal((await again.kill("SIGTERM")).code, 0);
  },
});

/**
 * Starts a child under a low descriptor limit with one keep-alive connection already open,
 * then uses up every descriptor: the listener ends, is opened again and holds the last one.
 */
async function exhausted(
  siteDir: string,
): Promise<{ child: Child; conn: Deno.Conn; conns: Deno.Conn[] }> {
  const child = await spawn(siteDir, { nofile: 64 });
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: child.port });
  assert.equal((await exchange(conn, "GET", "/health")).status, 200);
  const conns = await exhaust(child.port);
  await child.waitFor("Listening again");
  return { child, conn, conns };
}

Deno.test({
  name:
    "the service answers a 5xx problem naming the file when descriptors run out as it opens a site file",
  ignore: noPrlimit !== undefined,
  async fn() {
    await using tmp = await tempDir();
    const { child, conn, conns } = await exhausted(tmp.path);
    await using _child = child;
    try {
      const res = await exchange(conn, "POST", "/event", { type: "probe", data: { n: 1 } });
      assert.equal(res.status, 500, res.text);
      const { detail } = assertProblem(500, res.contentType, res.text, "POST /event");
      assert.match(detail, /site_\d{8}\.ndjson/);
      assert.match(detail, /Too many open files/);
    } finally {
      conn.close();
      closeAll(conns);
    }
    await waitHealthy(child.url);
    // Nothing was stored and no seq was used: the first stored event is seq 1.
    assert.equal(await postEvent(child.url, "probe", { n: 2 }), 1);
    assert.equal((await child.kill("SIGTERM")).code, 0, child.output());
    const lines = [...(await readAllStreams(tmp.path)).values()].flat();
    assert.deepEqual(lines.map((l) => [l.seq, l.data]), [[1, { n: 2 }]]);
  },
});

Deno.test({
  name:
    "the service answers a 5xx problem when descriptors run out as it opens a run file, and starts the run once they are back",
  ignore: noPrlimit !== undefined,
  async fn() {
    await using tmp = await tempDir();
    const { child, conn, conns } = await exhausted(tmp.path);
    await using _child = child;
    try {
      const res = await exchange(conn, "POST", "/run/start", { run_id: "r1" }).catch((e) => {
        throw new Error(`${e.message}; server output:\n${child.output()}`);
      });
      assert.ok(res.status >= 500, res.text);
      assertProblem(res.status, res.contentType, res.text, "POST /run/start");
    } finally {
      conn.close();
      closeAll(conns);
    }
    await waitHealthy(child.url);
    const res = await fetch(`${child.url}/run/start`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ run_id: "r1" }),
    });
    assert.equal(res.status, 201, await res.text());
    assert.equal(await postEvent(child.url, "probe", { n: 1 }), 1);
    assert.equal((await child.kill("SIGTERM")).code, 0, child.output());
    const streams = await readAllStreams(tmp.path);
    assert.deepEqual(streams.get(join("r1", "telemetry.ndjson"))?.map((l) => l.seq), [1]);
  },
});

// --- files and directories removed under the running service ----------------------------------

async function postMany(url: string, rng: Rng, type = "probe"): Promise<number[]> {
  const seqs: number[] = [];
  for (let i = 0, n = rng.int(2, 6); i < n; i++) seqs.push(await postEvent(url, type, { i }));
  return seqs;
}

async function theSiteFile(siteDir: string): Promise<string> {
  const names = (await Array.fromAsync(Deno.readDir(siteDir))).map((e) => e.name)
    .filter((n) => /^site_\d{8}\.ndjson$/.test(n));
  assert.equal(names.length, 1, names.join(", "));
  return join(siteDir, names[0]!);
}

/**
 * The guarantee after a deletion: every seq acknowledged after it is kept; the only others are
 * the last ones before it (written since the last check found the file in place).
 */
function assertKeeps(kept: number[], before: number[], after: number[]): void {
  assert.deepEqual(kept.filter((s) => after.includes(s)), after, `lost some of ${after}: ${kept}`);
  const carried = kept.filter((s) => !after.includes(s));
  assert.deepEqual(carried, before.slice(before.length - carried.length), String(kept));
}

async function seqsIn(path: string): Promise<number[]> {
  const text = await Deno.readTextFile(path);
  return text.split("\n").filter((l) => l !== "").map((l) => JSON.parse(l).seq);
}

Deno.test("the service keeps every event acknowledged after its site file was deleted, across kill -9", async () => {
  const rng = new Rng(SEED + 1);
  await using tmp = await tempDir();
  await using child = await spawn(tmp.path);
  const before = await postMany(child.url, rng);
  const path = await theSiteFile(tmp.path);
  await Deno.remove(path);
  const after = await postMany(child.url, rng);
  await child.waitFor(`${path} was deleted while the service had it open`);
  await child.kill("SIGKILL");
  assertKeeps(await seqsIn(path), before, after);
  await readAllStreams(tmp.path); // whole lines, seq increasing
});

Deno.test("the service starts a new site file after the old one was renamed, duplicating nothing", async () => {
  const rng = new Rng(SEED + 2);
  await using tmp = await tempDir();
  await using child = await spawn(tmp.path);
  const before = await postMany(child.url, rng);
  const path = await theSiteFile(tmp.path);
  const archive = join(tmp.path, "archive.ndjson");
  await Deno.rename(path, archive);
  // A busy writer looks at its path at most every 100 ms (an lstat costs as much as the
  // append); events acknowledged inside that window follow the renamed file, none is lost.
  await new Promise((resolve) => setTimeout(resolve, 150));
  const after = await postMany(child.url, rng);
  assert.equal((await child.kill("SIGTERM")).code, 0, child.output());
  assert.match(child.output(), /was renamed or moved away while the service had it open/);
  assert.deepEqual(await seqsIn(archive), before);
  assert.deepEqual(await seqsIn(path), after);
});

Deno.test("events acknowledged right after a rename land once, in the renamed or the new file", async () => {
  const rng = new Rng(SEED + 5);
  await using tmp = await tempDir();
  await using child = await spawn(tmp.path);
  const before = await postMany(child.url, rng);
  const path = await theSiteFile(tmp.path);
  const archive = join(tmp.path, "archive.ndjson");
  await Deno.rename(path, archive);
  const after = await postMany(child.url, rng); // inside the 100 ms a busy writer trusts its path
  assert.equal((await child.kill("SIGTERM")).code, 0, child.output());
  const archived = await seqsIn(archive);
  const current = await Deno.lstat(path).then(() => seqsIn(path), () => []);
  assert.deepEqual(archived.slice(0, before.length), before);
  assert.deepEqual([...archived, ...current], [...before, ...after]);
});

/**
 * `rm -r` of a directory the service is writing in: a file created between the listing and the
 * rmdir makes it fail with "Directory not empty", as it would for an operator; try again.
 */
async function removeWhileWritten(dir: string): Promise<void> {
  for (let attempt = 1;; attempt++) {
    try {
      await Deno.remove(dir, { recursive: true });
      return;
    } catch (err) {
      if (attempt >= 20 || !/Directory not empty/.test(String(err))) throw err;
    }
  }
}

Deno.test("the service recreates a deleted site directory and takes its lock again", async () => {
  const rng = new Rng(SEED + 3);
  await using tmp = await tempDir();
  const siteDir = join(tmp.path, "site");
  await using child = await spawn(siteDir);
  const before = await postMany(child.url, rng);
  await removeWhileWritten(siteDir);
  const after = await postMany(child.url, rng);
  await child.waitFor("was deleted while the service ran; took the lock again");
  // The new lock keeps a second server out, as the first one did.
  await assert.rejects(spawn(siteDir), /in use by another telemetry server/);
  assert.equal((await child.kill("SIGTERM")).code, 0, child.output());
  assertKeeps(await seqsIn(await theSiteFile(siteDir)), before, after);
});

Deno.test("the service recreates a deleted run directory and keeps the run's events", async () => {
  const rng = new Rng(SEED + 4);
  await using tmp = await tempDir();
  await using child = await spawn(tmp.path);
  const res = await fetch(`${child.url}/run/start`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ run_id: "r1" }),
  });
  assert.equal(res.status, 201, await res.text());
  const before = await postMany(child.url, rng);
  await Deno.remove(join(tmp.path, "r1"), { recursive: true });
  const after = await postMany(child.url, rng);
  assert.equal((await child.kill("SIGTERM")).code, 0, child.output());
  assert.match(child.output(), /r1 and the file/);
  assertKeeps(await seqsIn(join(tmp.path, "r1", "telemetry.ndjson")), before, after);
});
