/**
 * Helpers of the fault suite (`tests/fault_*_test.ts`): a seeded random source, `cli.ts telemetry
 * run` as a child process under the scoped permissions of docs/cli.md, raw HTTP over a real TCP
 * connection, and readers that check every NDJSON file of a site directory.
 * @module
 */

import assert from "node:assert/strict";
import { join, relative } from "node:path";

/** A small seeded PRNG (mulberry32), so a failing fuzz or crash run can be replayed by seed. */
export class Rng {
  #state: number;
  /** @param seed Any 32-bit integer. */
  constructor(seed: number) {
    this.#state = seed >>> 0;
  }
  /** A float in [0, 1). */
  next(): number {
    let t = (this.#state = (this.#state + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  /** An integer in [min, max]. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }
  /** One element of a non-empty list. */
  pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.next() * items.length)]!;
  }
  /** `true` with probability `p`. */
  chance(p: number): boolean {
    return this.next() < p;
  }
  /** `n` random bytes. */
  bytes(n: number): Uint8Array<ArrayBuffer> {
    const out = new Uint8Array(n);
    for (let i = 0; i < n; i++) out[i] = Math.floor(this.next() * 256);
    return out;
  }
}

/** The seed of this run: `FAULT_SEED` when set (to replay a failure), else the given default. */
export function seedFromEnv(fallback: number): number {
  const text = Deno.env.get("FAULT_SEED");
  return text === undefined ? fallback : Number(text);
}

/** A free TCP port on 127.0.0.1 (closed again; the child binds it right after). */
export { freePort, rawHttp, type RawResponse } from "./util.ts";
import { cliRunArgs } from "./util.ts";
import { permissionFlags } from "../../server.ts";

/** `cli.ts telemetry run` as a child process. */
export interface ChildServer extends AsyncDisposable {
  /** The process. */
  readonly child: Deno.ChildProcess;
  /** `http://127.0.0.1:<port>` */
  readonly url: string;
  /** Everything it printed so far, stdout and stderr, for failure messages. */
  output(): string;
  /** Sends a signal (ignored if it already exited) and waits for the exit status. */
  kill(signal: Deno.Signal): Promise<Deno.CommandStatus>;
}

/**
 * Starts `cli.ts telemetry run` on 127.0.0.1:`port` with exactly the permissions of
 * `permissionFlags()` (or `permissions`) and waits for its ready line; with `nofile`, under that
 * descriptor limit (`prlimit`, util-linux). Throws with the child's output if it exits or stays
 * silent for `timeoutMs`.
 */
export async function spawnCliServer(options: {
  siteDir: string;
  port: number;
  args?: string[];
  /** Files it reads at start-up (`--types FILE`), added to its read permission. */
  readFiles?: string[];
  /** The permission flags, when the arguments need more than the site directory and port's. */
  flags?: readonly string[];
  /** Another command that serves `siteDir` on `port` (a program and its arguments). */
  command?: readonly [string, readonly string[]];
  /** Variables set in the child's environment on top of this process's. */
  env?: Record<string, string>;
  timeoutMs?: number;
  /** The Deno permission flags instead of the scoped ones, such as `["--allow-all"]`. */
  permissions?: string[];
  /** The soft and hard limit of open files of the child. */
  nofile?: number;
}): Promise<ChildServer> {
  const { siteDir, port, readFiles = [], nofile } = options;
  const flags = options.flags ?? options.permissions ??
    permissionFlags({ siteDir, host: "127.0.0.1", port, readFiles });
  const [command, commandArgs] = options.command ??
    [Deno.execPath(), cliRunArgs(siteDir, port, options.args ?? [], flags)];
  const child = new Deno.Command(nofile === undefined ? command : "prlimit", {
    args: nofile === undefined
      ? [...commandArgs]
      : [`--nofile=${nofile}:${nofile}`, command, ...commandArgs],
    ...(options.env ? { env: options.env } : {}),
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let out = "";
  let ready: () => void = () => {};
  const readyPromise = new Promise<void>((resolve) => (ready = resolve));
  const pump = async (stream: ReadableStream<Uint8Array>) => {
    for await (const text of stream.pipeThrough(new TextDecoderStream())) {
      out += text;
      if (out.includes("listening on")) ready();
    }
  };
  // Both pipes are drained for the child's whole life, so it never blocks on a full pipe.
  const pumped = Promise.all([pump(child.stdout), pump(child.stderr)]);
  let timer: ReturnType<typeof setTimeout> | undefined;
  const outcome = await Promise.race([
    readyPromise.then(() => "ready" as const),
    child.status.then(() => "exited" as const),
    new Promise<"timeout">((
      r,
    ) => (timer = setTimeout(() => r("timeout"), options.timeoutMs ?? 30_000))),
  ]);
  clearTimeout(timer);
  const kill = async (signal: Deno.Signal) => {
    try {
      child.kill(signal);
    } catch (err) {
      if (!(err instanceof TypeError)) throw err; // "Child process has already terminated"
    }
    const status = await child.status;
    await pumped;
    return status;
  };
  if (outcome !== "ready") {
    await kill("SIGKILL");
    throw new Error(`The server child did not become ready (${outcome}); its output:\n${out}`);
  }
  return {
    child,
    url: `http://127.0.0.1:${port}`,
    output: () => out,
    kill,
    async [Symbol.asyncDispose]() {
      await kill("SIGKILL");
    },
  };
}

/** Asserts an RFC 9457 problem body (docs/http-api.md) with a non-empty `detail`; returns it. */
export function assertProblem(
  status: number,
  contentType: string | null,
  text: string,
  context: string,
): { detail: string } {
  assert.match(
    contentType ?? "",
    /^application\/problem\+json\b/,
    `${context}: ${text.slice(0, 300)}`,
  );
  const body = JSON.parse(text);
  assert.equal(body.status, status, context);
  assert.equal(typeof body.detail, "string", context);
  assert.ok(body.detail.trim().length > 0, `${context}: empty detail`);
  return body;
}

/** Every file and directory below `root`, as sorted relative paths with a size for files. */
export async function listTree(root: string): Promise<string[]> {
  const out: string[] = [];
  const walk = async (dir: string) => {
    for await (const entry of Deno.readDir(dir)) {
      const path = join(dir, entry.name);
      const rel = relative(root, path);
      if (entry.isDirectory) {
        out.push(rel + "/");
        await walk(path);
      } else if (entry.isSymlink) {
        out.push(`${rel} -> ${await Deno.readLink(path)}`);
      } else {
        // A temporary file of an atomic write (the snapshot checkpoint) may be renamed away
        // between readDir and stat.
        const size = await Deno.stat(path).then((s) => s.size, (err) => {
          if (err instanceof Deno.errors.NotFound) return undefined;
          throw err;
        });
        if (size !== undefined) out.push(`${rel} (${size})`);
      }
    }
  };
  await walk(root);
  return out.sort();
}

/** One parsed line of a stream file. */
export interface StoredLine {
  /** Path relative to the site directory. */
  file: string;
  /** The raw line. */
  line: string;
  seq: number;
  ts: string;
  type: string;
  data: Record<string, unknown>;
  meta: Record<string, unknown>;
}

/**
 * Reads every `*.ndjson` stream file below a site directory (not the run log) and asserts that each line is one envelope
 * with exactly the keys seq, ts, type, data, meta (docs/storage.md), that each file ends with `\n`,
 * and that seq strictly increases within each file.
 *
 * @returns The lines per file, keyed by path relative to the site directory.
 */
export async function readAllStreams(siteDir: string): Promise<Map<string, StoredLine[]>> {
  const files = new Map<string, StoredLine[]>();
  for (const entry of await listTree(siteDir)) {
    const m = /^(.+\.ndjson) \(\d+\)$/.exec(entry);
    if (!m) continue;
    const rel = m[1]!;
    // The run log holds run records, not envelopes (docs/cli.md).
    if (rel === "runs.ndjson") continue;
    const text = await Deno.readTextFile(join(siteDir, rel));
    assert.ok(text === "" || text.endsWith("\n"), `${rel} does not end with a newline`);
    const lines: StoredLine[] = [];
    let lastSeq = 0;
    for (const [i, line] of text.split("\n").slice(0, -1).entries()) {
      let env;
      try {
        env = JSON.parse(line);
      } catch {
        throw new assert.AssertionError({ message: `${rel}:${i + 1} does not parse: ${line}` });
      }
      assert.deepEqual(Object.keys(env), ["seq", "ts", "type", "data", "meta"], `${rel}:${i + 1}`);
      assert.ok(
        Number.isSafeInteger(env.seq) && env.seq > lastSeq,
        `${rel}:${i + 1}: seq ${env.seq} does not follow ${lastSeq}`,
      );
      lastSeq = env.seq;
      lines.push({ file: rel, line, ...env });
    }
    files.set(rel, lines);
  }
  return files;
}

/** Whether a path relative to the site directory is a site-stream file. */
export function isSiteFile(rel: string): boolean {
  return /^site_\d{8}\.ndjson$/.test(rel);
}

/** POSTs a body and returns status, content type and text, never throwing on HTTP errors. */
export async function send(
  url: string,
  init: RequestInit & { client?: Deno.HttpClient },
): Promise<{ status: number; contentType: string | null; text: string }> {
  const res = await fetch(url, init);
  return {
    status: res.status,
    contentType: res.headers.get("content-type"),
    text: await res.text(),
  };
}
