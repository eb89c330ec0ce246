/**
 * Test helper for the interrupted-run test: runs `migrate(SOURCE, DEST)` in its own process.
 * With `PHASE:N` it stops right after the N-th progress report of that phase (for example
 * `commit:3`, after the third file was renamed into place), prints `PAUSED` and blocks, so the
 * parent can SIGKILL it at a known point instead of racing a timer.
 *
 * ```sh
 * deno run -A tests/_shared/migrate_child.ts SOURCE DEST [PHASE:N]
 * ```
 *
 * @module
 */

import { migrate, type MigratePhase } from "../../migrate.ts";

const [source, dest, pause] = Deno.args;
if (source === undefined || dest === undefined) {
  throw new TypeError("Cannot run: usage is _migrate_child.ts SOURCE DEST [PHASE:N]");
}
const [phase, count] = (pause ?? "").split(":") as [MigratePhase | "", string | undefined];

await migrate(source, dest, {
  onProgress(progress) {
    if (progress.phase !== phase || progress.filesDone !== Number(count)) return;
    // deno-lint-ignore no-console
    console.log("PAUSED");
    // Blocks this thread without spinning; the parent kills the process long before the end.
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 60_000);
  },
});
// deno-lint-ignore no-console
console.log("DONE");
