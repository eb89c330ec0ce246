/**
 * The safety latch file `<site_dir>/.safety.json` (docs/safety.md): what the service's safety
 * judge saves so a restart, clean or after a crash, never makes an unsafe site safe early. It is
 * written atomically and fdatasynced (`fs.ts`) before a commit group that turns a critical type
 * unsafe is written, at every other change of a latch before the next group, and with where the
 * streams end (its `covers`, which the next start reads on from). The safety hub's file
 * `<site_dir>/.safety-hub.json` (external events and waivers, docs/safety.md#safety-events) is
 * kept the same way, saved before each change is answered. What they hold is `core/`'s business;
 * this module only reads and writes the files.
 *
 * @example Usage
 * ```ts ignore
 * import { SafetyLatchFile } from "./safety_latch.ts";
 * const file = new SafetyLatchFile("/srv/telemetry", console.warn);
 * await file.write({ version: 1 });
 * console.log(await file.read());
 * ```
 *
 * @module
 */

import { join } from "node:path";
import { readJsonFile, writeJsonAtomic } from "./fs.ts";
import { SAFETY_HUB_FILE, SAFETY_LATCH_FILE } from "./layout.ts";

/**
 * The safety latch file of one site directory.
 *
 * @example Usage
 * ```ts ignore
 * import { SafetyLatchFile } from "./safety_latch.ts";
 * const saved = await new SafetyLatchFile("/srv/telemetry", console.warn).read();
 * ```
 */
export class SafetyLatchFile {
  #path: string;
  #name: string;
  #consequence: string;
  #warn: (message: string) => void;
  #damaged = false;

  /**
   * Names the file; nothing is read yet.
   *
   * @param siteDir The site directory (its real path).
   * @param warn Told when the file is damaged.
   * @param kind `latch` for `.safety.json` (the default), `hub` for `.safety-hub.json`.
   */
  constructor(siteDir: string, warn: (message: string) => void, kind: "latch" | "hub" = "latch") {
    this.#name = kind === "latch" ? SAFETY_LATCH_FILE : SAFETY_HUB_FILE;
    this.#path = join(siteDir, this.#name);
    this.#consequence = kind === "latch"
      ? "every critical type stays unsafe for its clear_after_s from now"
      : "every profile is held unsafe by an external event until it is released (docs/safety.md#safety-events)";
    this.#warn = warn;
  }

  /**
   * Reads the saved latch.
   *
   * @returns The parsed value; `undefined` when there is none, or when it cannot be read or is
   *   not JSON (warned): the caller then treats every latch as unknown, that is unsafe.
   */
  async read(): Promise<unknown> {
    this.#damaged = false;
    try {
      return await readJsonFile(this.#path);
    } catch (err) {
      if (err instanceof Deno.errors.NotCapable) throw err;
      this.#damaged = true;
      this.#warn(
        `The safety file ${this.#name} is unreadable (${
          err instanceof Error ? err.message : String(err)
        }); ${this.#consequence}.`,
      );
      return undefined;
    }
  }

  /** True when the last {@linkcode SafetyLatchFile.read} found a file it could not read or parse. */
  get damaged(): boolean {
    return this.#damaged;
  }

  /**
   * Saves the latch, atomically and fdatasynced.
   *
   * @param value The record.
   */
  write(value: unknown): Promise<void> {
    return writeJsonAtomic(this.#path, value);
  }
}
