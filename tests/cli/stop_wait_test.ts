/**
 * `obs-utils telemetry stop` waits until the service has exited (docs/cli.md), judged by a refused
 * connection only: a service still draining may answer slowly on a busy machine.
 */
import assert from "node:assert/strict";
import { CLI } from "../_shared/util.ts";

Deno.test("obs-utils telemetry stop keeps waiting while the service's /health polls time out, and returns once the port is closed", async () => {
  // A server that accepts the shutdown, then lets every /health poll hang for longer than the
  // 500 ms the stop command allows one, as a service draining on an overloaded machine can.
  let shutdownAt = 0;
  const hanging = new Set<PromiseWithResolvers<Response>>();
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
    const path = new URL(req.url).pathname;
    if (path === "/ready") {
      return Response.json({ ready: true, run_active: false, run_id: null, version: "0.0.0" });
    }
    if (path === "/shutdown") {
      shutdownAt = Date.now();
      return Response.json({ shutting_down: true }, { status: 202 });
    }
    const answer = Promise.withResolvers<Response>();
    hanging.add(answer);
    return answer.promise;
  });
  const closeAfterMs = 2500;
  const closing = (async () => {
    while (shutdownAt === 0) await new Promise((r) => setTimeout(r, 20));
    await new Promise((r) => setTimeout(r, closeAfterMs));
    for (const answer of hanging) answer.resolve(new Response(null, { status: 503 }));
    await server.shutdown();
    return Date.now();
  })();
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-net=127.0.0.1",
      "--allow-env",
      CLI,
      "telemetry",
      "stop",
      "--host",
      "127.0.0.1",
      "--port",
      String(server.addr.port),
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const returnedAt = Date.now();
  const closedAt = await closing;
  const stdout = new TextDecoder().decode(out.stdout);
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  assert.match(stdout, /stopped/);
  assert.ok(
    returnedAt >= closedAt,
    `stop returned ${closedAt - returnedAt} ms before the port closed`,
  );
});
