/**
 * Process-level faults (CONTRACT 10, 4.4): file descriptors running out around the listener and
 * in the middle of a commit, and site or run files renamed or deleted while the service runs.
 * Every test runs `cli.ts telemetry run` as a real child process; the descriptor limit is lowered
 * with `prlimit` (util-linux), and the tests are ignored, with the reason printed, without it.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { assertProblem, freePort, readAllStreams, Rng, seedFromEnv } from "./_fault_util.ts";
import { cliRunArgs, tempDir } from "./_util.ts";

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
      if (err instanceof Deno.errors.ConnectionRefused) return conns;
      throw err;
    }
  }
  for (const c of conns) c.close();
  throw new Error("2000 connections were accepted: the descriptor limit did not apply");
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
            if (!(e instanceof Deno.errors.ConnectionRefused)) throw e;
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
