/**
 * Reading the stored history of a site directory (docs/history.md): the events of the site stream or
 * of one run, filtered by type and by `since <= ts < until`, straight from the files (`.ndjson`
 * and `.ndjson.gz`), with no service needed and safe while one runs. Memory stays flat whatever
 * the files' size: lines are read in chunks and only the matching ones are parsed. Only the
 * files whose night can hold the range are opened, plus one night either side, since a caller's
 * `ts` may differ from the time the service received the event (the time that chose its file).
 *
 * Needs `--allow-read` for the site directory (and for run directories placed outside it).
 *
 * @example Usage
 * ```ts ignore
 * import { readHistory } from "@obs-utils/telemetry/history";
 *
 * for await (const event of readHistory("./telemetry", { types: ["weather"], since: "12h" })) {
 *   console.log(event.ts, event.data.wind_mps);
 * }
 * ```
 *
 * @module
 */

export {
  DamagedFileError,
  type Envelope,
  findRunDir,
  type JsonObject,
  parseTimeBound,
  readHistory,
  readHistoryLines,
  type ReadHistoryOptions,
  RunNotFoundError,
  TelemetryEvent,
  type TelemetryEventField,
  type TimeBound,
} from "./store/history.ts";
