/**
 * A lifecycle pass in a process of its own, for the kill -9 tests: `deno run -A
 * tests/_shared/compress_child.ts <site_dir> <now ISO>` compresses what is due with the default
 * --compress-after and prints `done`.
 * @module
 */

// deno-lint-ignore-file no-console
import { runRetentionPass as runLifecycle } from "../../store/retention.ts";

const [siteDir, now] = Deno.args;
await runLifecycle({
  siteDir: siteDir!,
  timeZone: "UTC",
  compressAfter: 2,
  now: () => Date.parse(now!),
});
console.log("done");
