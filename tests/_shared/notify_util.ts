/**
 * Real notification receivers for the tests: an HTTP server on 127.0.0.1 port 0 that records what
 * it is sent, and a TCP listener that accepts connections and never answers.
 * @module
 */

/** One request a receiver got. */
export interface Received {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: string;
}

/** A running HTTP receiver. */
export interface Receiver extends AsyncDisposable {
  readonly url: string;
  readonly port: number;
  readonly received: Received[];
  close(): Promise<void>;
}

/**
 * Starts an HTTP receiver. Each request is recorded when it arrives; `answer` (if given) decides
 * when and how it is answered (default: 200 at once).
 */
export function startReceiver(
  options: { port?: number; answer?: (req: Received) => Promise<number> | number } = {},
): Receiver {
  const received: Received[] = [];
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: options.port ?? 0, onListen: () => {} },
    async (req) => {
      const got: Received = {
        method: req.method,
        path: new URL(req.url).pathname,
        headers: Object.fromEntries(req.headers),
        body: await req.text(),
      };
      received.push(got);
      const status = options.answer ? await options.answer(got) : 200;
      return new Response(status === 200 ? "ok" : "no", { status });
    },
  );
  const port = server.addr.port;
  const close = async () => {
    await server.shutdown();
  };
  return {
    url: `http://127.0.0.1:${port}/hook`,
    port,
    received,
    close,
    [Symbol.asyncDispose]: close,
  };
}

/** A TCP listener that accepts every connection and never answers. */
export interface SilentReceiver extends AsyncDisposable {
  readonly url: string;
  /** Connections accepted so far. */
  readonly accepted: number;
}

/** Starts a receiver that accepts TCP connections and never replies. */
export function silentReceiver(): SilentReceiver {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const conns: Deno.Conn[] = [];
  const loop = (async () => {
    try {
      for await (const conn of listener) conns.push(conn);
    } catch {
      // closed
    }
  })();
  return {
    url: `http://127.0.0.1:${(listener.addr as Deno.NetAddr).port}/hook`,
    get accepted() {
      return conns.length;
    },
    async [Symbol.asyncDispose]() {
      listener.close();
      await loop;
      for (const conn of conns) {
        try {
          conn.close();
        } catch {
          // already closed by the peer
        }
      }
    },
  };
}

/** Waits, polling every 10 ms, until `check` holds; fails naming `what` after `ms`. */
export async function waitFor(
  check: () => boolean | Promise<boolean>,
  what: string,
  ms = 10_000,
): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** A port on 127.0.0.1 that nothing listens on (a receiver that is down). */
export function closedPort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}
