/**
 * The input kinds the collector knows (docs/collect.md), one file each beside this one.
 *
 * @module
 */

import type { InputKind } from "./input.ts";
import { alpacaInput } from "./alpaca.ts";
import { fileInput } from "./file.ts";
import { httpInput } from "./http.ts";
import { indiInput } from "./indi.ts";
import { mqttInput } from "./mqtt.ts";

/** Every input kind, by its `kind` value. */
// deno-lint-ignore no-explicit-any
export const INPUT_KINDS: readonly InputKind<any>[] = [
  httpInput,
  mqttInput,
  indiInput,
  alpacaInput,
  fileInput,
];
