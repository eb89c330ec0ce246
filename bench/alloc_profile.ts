/**
 * Where the service's heap allocations come from (`deno task bench:alloc-profile`): starts the
 * service with the V8 inspector on a loopback port, sends it warm-up events, then samples its
 * allocations (`HeapProfiler.startSampling`, objects collected by either garbage collector
 * included) while it takes `--events` more, and prints the bytes allocated per event by call site
 * (the function and its callers). `bench:commit` gives the total; this says which code to change.
 *
 * Usage: deno run -A bench/alloc_profile.ts [--mode single|batch] [--events 30000] [--top 25]
 *
 * @module
 */

// deno-lint-ignore-file no-console
import { parseArgs } from "node:util";
import { freePort, serviceArgs, waitReady } from "./_util.ts";

const { values: flags } = parseArgs({
  args: Deno.args.filter((a) => a !== "--"),
  options: {
    mode: { type: "string", default: "single" },
    events: { type: "string", default: "30000" },
    top: { type: "string", default: "25" },
  },
  strict: true,
});
const BATCH = flags.mode === "batch";
if (!BATCH && flags.mode !== "single") throw new Error("--mode is single or batch");
const EVENTS = Number(flags.events);
const EVENT = JSON.stringify({
  type: "weather",
  data: { wind_mps: 2.1, temp_c: -3.5, humidity: 41, sky: "clear" },
});
const BATCH_BODY = Array.from({ length: 1000 }, () => EVENT).join("\n") + "\n";
const PER_REQUEST = BATCH ? 1000 : 1;
const CONNECTIONS = BATCH ? 4 : 16;

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
      const res = await fetch(`${url}${BATCH ? "/events" : "/event"}`, {
        method: "POST",
        headers: { "content-type": BATCH ? "application/x-ndjson" : "application/json" },
        body: BATCH ? BATCH_BODY : EVENT,
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
  const args = serviceArgs({ siteDir, port });
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
