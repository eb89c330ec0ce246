/**
 * The commit-path floor of `bench/commit.ts`: a bare `Deno.serve` handler that parses the event,
 * appends one line per event to a file with `writeSync`, and answers the line. No validation, no
 * security checks, no snapshot: what any Deno server that stores each event must at least do.
 *
 * Usage: deno run --allow-net --allow-write bench/writesync_server.ts PORT FILE
 * @module
 */

// deno-lint-ignore-file no-console
const port = Number(Deno.args[0] ?? 0);
const file = Deno.openSync(Deno.args[1] ?? "writesync.ndjson", {
  append: true,
  create: true,
});
const encoder = new TextEncoder();
let seq = 0;
const server = Deno.serve({ hostname: "127.0.0.1", port, onListen() {} }, async (req) => {
  if (req.method === "GET") return new Response('{"ready":true}');
  const body = await req.json();
  const line = JSON.stringify({
    seq: ++seq,
    ts: new Date().toISOString(),
    type: body.type,
    data: body.data,
    meta: {},
  });
  const bytes = encoder.encode(line + "\n");
  for (let done = 0; done < bytes.length;) done += file.writeSync(bytes.subarray(done));
  return new Response(line, { headers: { "content-type": "application/json" } });
});
console.log(`writesync floor listening on ${server.addr.port}`);
