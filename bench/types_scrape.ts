/**
 * What the types registry costs a scrape: `GET /metrics`, `GET /types` and `GET /check` of a
 * real in-process server holding N types (default 10,000), with `examples/types.json` loaded,
 * 20 requests each; and `ServiceMetrics.render()` alone, with and without the registry.
 *
 * Usage: deno run -A bench/types_scrape.ts [--types 10000]
 * @module
 */

// deno-lint-ignore-file no-console
import { parseArgs } from "node:util";
import { startServer } from "../server.ts";
import { ServiceMetrics } from "../http/metrics.ts";
import { loadTypes } from "../core/types_registry.ts";

const { values } = parseArgs({
  args: Deno.args.filter((a) => a !== "--"),
  options: { types: { type: "string", default: "10000" } },
});
const count = Number(values.types);
const registry = await loadTypes(new URL("../examples/types.json", import.meta.url).pathname);
const dir = await Deno.makeTempDir({ prefix: "obs-bench-types-" });
const server = await startServer({
  siteDir: dir,
  hostname: "127.0.0.1",
  port: 0,
  timeZone: "UTC",
  fsync: "never",
  types: registry,
});
try {
  for (let i = 0; i < count; i += 1000) {
    const items = Array.from(
      { length: Math.min(1000, count - i) },
      (_, k) => ({ type: `t${i + k}`, data: { a: 1, b: 2.5, c: true, nested: { d: "3.5 m" } } }),
    );
    const res = await fetch(`${server.url}/events`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(items),
    });
    await res.body?.cancel();
  }
  const median = (xs: number[]) => xs.toSorted((a, b) => a - b)[xs.length >> 1]!;
  for (const path of ["/metrics", "/types", "/check"]) {
    const times: number[] = [];
    let bytes = 0;
    for (let i = 0; i < 20; i++) {
      const t0 = performance.now();
      bytes = (await (await fetch(`${server.url}${path}`)).arrayBuffer()).byteLength;
      times.push(performance.now() - t0);
    }
    console.log(
      `GET ${path}: ${count} types, ${bytes} bytes, median ${median(times).toFixed(1)} ms, max ${
        Math.max(...times).toFixed(1)
      } ms`,
    );
  }
  for (const [name, options] of [["without", {}], ["with", { types: registry }]] as const) {
    const metrics = new ServiceMetrics(server.service, options);
    metrics.render(); // fills the segment cache
    const times: number[] = [];
    for (let i = 0; i < 20; i++) {
      const t0 = performance.now();
      metrics.render({ diskFreeBytes: 1 });
      times.push(performance.now() - t0);
    }
    console.log(`render() ${name} the registry: median ${median(times).toFixed(2)} ms`);
  }
} finally {
  await server.shutdown();
  await Deno.remove(dir, { recursive: true });
}
