/**
 * The input kinds the collector knows (docs/collect.md), one file each beside this one.
 *
 * @module
 */

import type { InputKind } from "./input.ts";
import { fileInput } from "./file.ts";
import { httpInput } from "./http.ts";

/** Every input kind, by its `kind` value. */
// deno-lint-ignore no-explicit-any
export const INPUT_KINDS: readonly InputKind<any>[] = [httpInput, fileInput];
