/**
 * Looping `GET /history` readers, one per URL given, for `ms` milliseconds: each asks, reads the
 * answer to its end and asks again at once (a 503 included: a client that ignores `Retry-After`).
 * Then prints `{"statuses": {"200": n, ...}, "bytes": n}` and exits 0.
 *
 * Usage: deno run --allow-net=127.0.0.1 history_readers_child.ts MS URL...
 */

const [msText, ...urls] = Deno.args;
const until = performance.now() + Number(msText);
const statuses: Record<string, number> = {};
let bytes = 0;

async function loop(url: string): Promise<void> {
  while (performance.now() < until) {
    let code = "error";
    try {
      const res = await fetch(url, {
        signal: AbortSignal.timeout(Math.max(1, until - performance.now())),
      });
      code = String(res.status);
      const reader = res.body!.getReader();
      for (let r = await reader.read(); !r.done; r = await reader.read()) bytes += r.value.length;
    } catch {
      // The time is up in the middle of an answer, or the service is away: counted, not retried
      // in a tight loop.
      await new Promise((r) => setTimeout(r, 10));
    }
    statuses[code] = (statuses[code] ?? 0) + 1;
  }
}

await Promise.all(urls.map(loop));
// deno-lint-ignore no-console
console.log(JSON.stringify({ statuses, bytes }));
