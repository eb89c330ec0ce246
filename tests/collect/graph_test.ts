/**
 * The collector stays out of the service's and the other commands' module graphs (docs/collect.md,
 * docs/architecture.md): `cli.ts` loads it with a computed specifier, so neither the service nor
 * `current`, `post`... ever load its inputs or their npm packages; `deno task cache` caches its
 * program for an offline start.
 *
 * @module
 */

import assert from "node:assert/strict";
import denoJson from "../../deno.json" with { type: "json" };
import { moduleGraph as graph } from "../_shared/util.ts";

Deno.test("the service, the CLI, its launcher and the client never load the collector's modules", async () => {
  for (
    const entry of ["cli.ts", "cli/launch.ts", "server.ts", "mod.ts", "client.ts", "forward.ts"]
  ) {
    const root = new URL("../..", import.meta.url).href;
    const collect = (await graph(entry))
      .map((s) => s.replace(root, ""))
      .filter((s) => /^collect(\/|\.ts$)|^cli\/collect\.ts$/.test(s));
    assert.deepEqual(collect, [], entry);
  }
});

Deno.test("the collector's program holds the collector and its inputs, and deno task cache caches it", async () => {
  const modules = await graph("cli/collect_main.ts");
  for (
    const file of [
      "collect/collector.ts",
      "collect/inputs/http.ts",
      "collect/inputs/file.ts",
      "cli/collect.ts",
    ]
  ) {
    assert.ok(modules.some((s) => s.endsWith(file)), file);
  }
  const cache = (denoJson.tasks as Record<string, string>).cache!.split(" ");
  assert.ok(cache.includes("cli/collect_main.ts"), cache.join(" "));
});
