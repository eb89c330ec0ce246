/**
 * Where the service's heap allocations come from (`deno task bench:alloc-profile`): starts the
 * service with the V8 inspector on a loopback port, sends it warm-up events, then samples its
 * allocations (`HeapProfiler.startSampling`, objects collected by either garbage collector
 * included) while it takes `--events` more, and prints the bytes allocated per event by call site
 * (the function and its callers). `bench:commit` gives the total; this says which code to change.
 *
 * `--mode batch-ts` sends batches of 500 six-field readings as a JSON array, each with a `ts` of its
 * own in the stored form, and `Prefer: return=minimal` (`--full`: without it), as
 * `bench:vs-influx`'s row 2 does; `--root DIR` profiles the service of another checkout (e.g.
 * `git worktree add /tmp/base-main main`), for a before and after.
 *
 * Usage: deno run -A bench/alloc_profile.ts [--mode single|batch|batch-ts] [--events 30000]
 *   [--top 25] [--full] [--root DIR]
 *
 * @module
 */

// deno-lint-ignore-file no-console
import { parseArgs } from "node:util";
import { resolve } from "node:path";
import { freePort, serviceArgs, waitReady } from "./_util.ts";

const { values: flags } = parseArgs({
  args: Deno.args.filter((a) => a !== "--"),
  options: {
    mode: { type: "string", default: "single" },
    events: { type: "string", default: "30000" },
    top: { type: "string", default: "25" },
    full: { type: "boolean", default: false },
    root: { type: "string" },
  },
  strict: true,
});
const WITH_TS = flags.mode === "batch-ts";
const BATCH = flags.mode === "batch" || WITH_TS;
if (!BATCH && flags.mode !== "single") throw new Error("--mode is single, batch or batch-ts");
const EVENTS = Number(flags.events);
const EVENT = JSON.stringify({
  type: "weather",
  data: { wind_mps: 2.1, temp_c: -3.5, humidity: 41, sky: "clear" },
});
const BATCH_BODY = Array.from({ length: 1000 }, () => EVENT).join("\n") + "\n";
const PER_REQUEST = WITH_TS ? 500 : BATCH ? 1000 : 1;
const CONNECTIONS = BATCH ? 4 : 16;
const ROOT_DIR = flags.root === undefined ? undefined : resolve(flags.root);

/** Batch `n` of `--mode batch-ts`: 500 readings 2 ms apart in a second of their own. */
function tsBatch(n: number): string {
  const second = Date.UTC(2026, 9, 1) + n * 1000;
  const items = [];
  for (let i = 0; i < 500; i++) {
    items.push(JSON.stringify({
      type: "weather",
      ts: new Date(second + i * 2).toISOString(),
      data: {
        temp_c: 8.12 + i / 100,
        humidity: 61.4,
        pressure_hpa: 751.02,
        wind_mps: 3.9,
        gust_mps: 6.1,
        sky_temp_c: -21.37,
      },
    }));
  }
  return `[${items.join(",")}]`;
}
let batches = 0;

interface ProfileNode {
  callFrame: { functionName: string; url: string };
  selfSize: number;
  children: ProfileNode[];
}

/** A minimal Chrome DevTools Protocol session over the inspector's WebSocket. */
class Inspector {
  #ws: WebSocket;
  #next = 0;
  #waiting = new Map<number, (result: unknown) => void>();

  private constructor(ws: WebSocket) {
    this.#ws = ws;
    ws.onmessage = (e) => {
      const message = JSON.parse(e.data);
      this.#waiting.get(message.id)?.(message.result);
      this.#waiting.delete(message.id);
    };
  }

  static async connect(port: number): Promise<Inspector> {
    const [target] = await (await fetch(`http://127.0.0.1:${port}/json/list`)).json();
    const ws = new WebSocket(target.webSocketDebuggerUrl);
    await new Promise((resolve, reject) => {
      ws.onopen = resolve;
      ws.onerror = reject;
    });
    return new Inspector(ws);
  }

  call<T>(method: string, params: Record<string, unknown> = {}): Promise<T> {
    const id = ++this.#next;
    return new Promise((resolve) => {
      this.#waiting.set(id, resolve as (result: unknown) => void);
      this.#ws.send(JSON.stringify({ id, method, params }));
    });
  }

  close(): void {
    this.#ws.close();
  }
}

/** Sends `events` events over `CONNECTIONS` keep-alive connections. */
async function send(url: string, events: number): Promise<void> {
  let sent = 0;
  await Promise.all(Array.from({ length: CONNECTIONS }, async () => {
    while (sent < events) {
      sent += PER_REQUEST;
      const headers: Record<string, string> = {
        "content-type": BATCH && !WITH_TS ? "application/x-ndjson" : "application/json",
      };
      if (WITH_TS && !flags.full) headers.prefer = "return=minimal";
      const res = await fetch(`${url}${BATCH ? "/events" : "/event"}`, {
        method: "POST",
        headers,
        body: WITH_TS ? tsBatch(batches++) : BATCH ? BATCH_BODY : EVENT,
      });
      await res.arrayBuffer();
      if (!res.ok) throw new Error(`the service answered ${res.status}`);
    }
  }));
}

/** Bytes per call site: `function (file)` and its two callers. */
function bySite(root: ProfileNode): Map<string, number> {
  const out = new Map<string, number>();
  const walk = (node: ProfileNode, stack: string[]) => {
    const { functionName, url } = node.callFrame;
    const here = [...stack, `${functionName || "(anonymous)"} (${url.split("/").pop() || "?"})`];
    if (node.selfSize > 0) {
      const site = here.slice(-3).toReversed().join(" < ");
      out.set(site, (out.get(site) ?? 0) + node.selfSize);
    }
    for (const child of node.children) walk(child, here);
  };
  walk(root, []);
  return out;
}

async function main(): Promise<void> {
  const port = freePort();
  const inspectPort = freePort();
  const siteDir = await Deno.makeTempDir({ prefix: "bench-alloc-" });
  const args = serviceArgs({ siteDir, port, ...(ROOT_DIR ? { root: ROOT_DIR } : {}) });
  args.splice(1, 0, `--inspect=127.0.0.1:${inspectPort}`);
  const child = new Deno.Command(Deno.execPath(), { args, stdout: "null", stderr: "null" })
    .spawn();
  try {
    const url = `http://127.0.0.1:${port}`;
    await waitReady(url, "service");
    const inspector = await Inspector.connect(inspectPort);
    await send(url, BATCH ? 50_000 : 10_000); // warm: optimized code allocates less
    await inspector.call("HeapProfiler.enable");
    await inspector.call("HeapProfiler.startSampling", {
      samplingInterval: 256,
      includeObjectsCollectedByMajorGC: true,
      includeObjectsCollectedByMinorGC: true,
    });
    await send(url, EVENTS);
    const { profile } = await inspector.call<{ profile: { head: ProfileNode } }>(
      "HeapProfiler.stopSampling",
    );
    inspector.close();
    const sites = [...bySite(profile.head)].sort((a, b) => b[1] - a[1]);
    const total = sites.reduce((sum, [, bytes]) => sum + bytes, 0);
    console.log(
      `# ${flags.mode} events: ${Math.round(total / EVENTS)} bytes sampled per event; top sites`,
    );
    for (const [site, bytes] of sites.slice(0, Number(flags.top))) {
      console.log(`${String(Math.round(bytes / EVENTS)).padStart(6)}  ${site}`);
    }
  } finally {
    child.kill("SIGTERM");
    await child.status;
    await Deno.remove(siteDir, { recursive: true });
  }
}

if (import.meta.main) await main();
