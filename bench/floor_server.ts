/**
 * The floor for the benchmark: a bare `Deno.serve` handler that parses the same JSON body and
 * answers a similar envelope, with no validation, no state and no disk.
 *
 * Usage: deno run --allow-net bench/floor_server.ts PORT
 * @module
 */

// deno-lint-ignore-file no-console
const port = Number(Deno.args[0] ?? 0);
let seq = 0;
const server = Deno.serve({ hostname: "127.0.0.1", port, onListen() {} }, async (req) => {
  const url = new URL(req.url);
  if (url.pathname === "/ready") return new Response('{"ready":true}');
  if (url.pathname === "/events") {
    const lines = (await req.text()).split("\n").filter((l) => l !== "");
    const events = lines.map((l) => {
      const body = JSON.parse(l);
      return JSON.stringify({ seq: ++seq, ts: new Date().toISOString(), ...body, meta: {} });
    });
    return new Response(`{"accepted":${events.length},"events":[${events.join(",")}]}`, {
      headers: { "content-type": "application/json" },
    });
  }
  const body = await req.json();
  const envelope = {
    seq: ++seq,
    ts: new Date().toISOString(),
    type: body.type,
    data: body.data,
    meta: {},
  };
  return new Response(JSON.stringify(envelope), {
    headers: { "content-type": "application/json" },
  });
});
console.log(`floor listening on ${server.addr.port}`);
