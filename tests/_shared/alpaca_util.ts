/**
 * A real service with its Alpaca listener on port 0 (docs/safety.md, "ASCOM Alpaca (N.I.N.A.)"),
 * started in this process with a types file written beside the site directory.
 */

import { join } from "node:path";
import { testServer } from "./util.ts";
import type { ServerHandle } from "../../server.ts";

/** A running service and the base URL of its Alpaca port; `await using` stops it. */
export interface AlpacaService extends AsyncDisposable {
  server: ServerHandle;
  /** `http://127.0.0.1:PORT` of the Alpaca listener. */
  base: string;
}

/**
 * Starts the service on 127.0.0.1 with `--alpaca-port 0`, discovery off, and `types` as its
 * types file.
 */
export async function alpacaServer(
  siteDir: string,
  types: unknown,
  token?: string,
): Promise<AlpacaService> {
  const file = join(siteDir, "..", `types-${crypto.randomUUID()}.json`);
  await Deno.writeTextFile(file, JSON.stringify(types));
  const server = await testServer({
    siteDir,
    typesFile: file,
    alpacaPort: 0,
    alpacaDiscoveryPort: 0,
    ...(token ? { token, insecure: false } : {}),
  });
  return {
    server,
    base: `http://127.0.0.1:${server.alpaca!.addr.port}`,
    async [Symbol.asyncDispose]() {
      await server.shutdown();
      await Deno.remove(file).catch(() => {});
    },
  };
}
