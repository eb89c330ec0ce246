/**
 * The saved snapshot `<site_dir>/.snapshot.json` (docs/storage.md): the checkpoint a start
 * restores the snapshot from, written atomically. What it holds is the service's business
 * (`core/snapshot.ts`); this module only reads and writes the file.
 *
 * @example Usage
 * ```ts ignore
 * import { SavedSnapshotFile } from "./saved_snapshot.ts";
 * const saved = new SavedSnapshotFile("/srv/telemetry", console.warn);
 * await saved.write({ version: 1, current: [] });
 * console.log(await saved.read());
 * ```
 *
 * @module
 */

import { join } from "node:path";
import { readJsonFile, writeJsonAtomic } from "./fs.ts";
import { SNAPSHOT_FILE } from "./layout.ts";

/**
 * The saved-snapshot file of one site directory.
 *
 * @example Usage
 * ```ts ignore
 * import { SavedSnapshotFile } from "./saved_snapshot.ts";
 * const value = await new SavedSnapshotFile("/srv/telemetry", console.warn).read();
 * ```
 */
export class SavedSnapshotFile {
  #path: string;
  #warn: (message: string) => void;

  /**
   * Names the file; nothing is read yet.
   *
   * @param siteDir The site directory (its real path).
   * @param warn Told when the file is not JSON.
   */
  constructor(siteDir: string, warn: (message: string) => void) {
    this.#path = join(siteDir, SNAPSHOT_FILE);
    this.#warn = warn;
  }

  /**
   * Reads the snapshot saved at the last checkpoint.
   *
   * @returns The parsed value, `undefined` when there is none or it is not JSON (warned).
   */
  async read(): Promise<unknown> {
    try {
      return await readJsonFile(this.#path);
    } catch (err) {
      if (!(err instanceof SyntaxError)) throw err;
      this.#warn(
        `The saved snapshot ${SNAPSHOT_FILE} is unreadable; rebuilding from the files alone.`,
      );
      return undefined;
    }
  }

  /**
   * Saves the snapshot for the next start, atomically.
   *
   * @param value The saved-snapshot record.
   */
  write(value: unknown): Promise<void> {
    return writeJsonAtomic(this.#path, value);
  }
}
