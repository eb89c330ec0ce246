/**
 * INDI's `indi_weather_safety_proxy` (Debian's `indi-bin`) run by a real `indiserver` and pointed
 * at a URL of the service (docs/safety.md, "INDI: indi_weather_safety_proxy"): its
 * `WEATHER_SAFETY` parameter and its reasons read with `indi_getprop`, as an observatory's INDI
 * client would see them. When a tool is missing the tests skip with the reason given here.
 * @module
 */

import { IndiServer } from "./collect_push_util.ts";

/** The driver's INDI device name. */
const DEVICE = "Weather Safety Proxy";

/**
 * Why the INDI tests cannot run here (a tool missing), or undefined when they can; the caller
 * prints it once and ignores its tests.
 */
export function indiMissing(): string | undefined {
  for (const tool of ["indiserver", "indi_weather_safety_proxy", "indi_getprop", "indi_setprop"]) {
    try {
      new Deno.Command(tool, { args: ["--help"], stdout: "null", stderr: "null" }).outputSync();
    } catch {
      return `${tool} is not installed (apt-get install -y indi-bin)`;
    }
  }
  return undefined;
}

async function indi(tool: string, args: string[], home: string): Promise<string> {
  const out = await new Deno.Command(tool, {
    args,
    env: { HOME: home },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  if (!out.success) {
    throw new Error(`${tool} ${args.join(" ")} failed: ${new TextDecoder().decode(out.stderr)}`);
  }
  return text;
}

/**
 * Polls `fn` every 100 ms until it answers true, for at most `ms`; an INDI tool that fails
 * meanwhile (the driver not listed yet) is tried again.
 */
export async function until(
  what: string,
  fn: () => Promise<boolean>,
  ms = 30_000,
): Promise<void> {
  const deadline = Date.now() + ms;
  let last: unknown;
  for (let i = 0; i < 1_000 && Date.now() <= deadline; i++) {
    try {
      if (await fn()) return;
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}${last ? `: ${last}` : ""}`);
}

/** A running `indi_weather_safety_proxy` reading one URL each second; `await using` stops it. */
export class WeatherSafetyProxy implements AsyncDisposable {
  #server: IndiServer;

  private constructor(server: IndiServer) {
    this.#server = server;
  }

  /**
   * Starts `indiserver` with the driver on its own port, socket and HOME (another indiserver on
   * this machine is not disturbed), sets its `WEATHER_SAFETY_URL` to `url`, switches it to read
   * the URL, connects it and sets its update period to 1 s.
   */
  static async start(url: string): Promise<WeatherSafetyProxy> {
    const proxy = new WeatherSafetyProxy(await IndiServer.start(["indi_weather_safety_proxy"]));
    try {
      await until(
        "indiserver to list the driver",
        async () => (await proxy.get("SCRIPT_OR_CURL.Use url")) === "Off",
      );
      await proxy.#set(`WEATHER_SAFETY_URLS.WEATHER_SAFETY_URL=${url}`);
      await proxy.#set("SCRIPT_OR_CURL.Use script;Use url=Off;On");
      await until(
        "the URL to be set",
        async () => (await proxy.get("WEATHER_SAFETY_URLS.WEATHER_SAFETY_URL")) === url,
      );
      await proxy.#set("CONNECTION.CONNECT=On");
      await until(
        "the driver to connect",
        async () => (await proxy.get("CONNECTION.CONNECT")) === "On",
      );
      await proxy.#set("WEATHER_UPDATE.PERIOD=1");
    } catch (err) {
      await proxy[Symbol.asyncDispose]();
      throw err;
    }
    return proxy;
  }

  #args(): string[] {
    return ["-p", String(this.#server.port), "-t", "2"];
  }

  async #set(assignment: string): Promise<void> {
    await indi("indi_setprop", [...this.#args(), `${DEVICE}.${assignment}`], this.#server.home);
  }

  /** One property element of the driver (`WEATHER_PARAMETERS.WEATHER_SAFETY`), as text. */
  async get(prop: string): Promise<string> {
    const out = await indi(
      "indi_getprop",
      [...this.#args(), "-1", `${DEVICE}.${prop}`],
      this.#server.home,
    );
    return out.trim();
  }

  /** The driver's reasons (`WEATHER_SAFETY_REASONS.Reasons`). */
  reasons(): Promise<string> {
    return this.get("WEATHER_SAFETY_REASONS.Reasons");
  }

  /** Waits until `WEATHER_SAFETY` is `value` (1 safe, 0 unsafe). */
  async safetyBecomes(value: 0 | 1, what: string): Promise<void> {
    await until(
      `WEATHER_SAFETY ${value} ${what}`,
      async () => Number(await this.get("WEATHER_PARAMETERS.WEATHER_SAFETY")) === value,
    );
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.#server[Symbol.asyncDispose]();
  }
}
