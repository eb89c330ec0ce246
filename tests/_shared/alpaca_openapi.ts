/**
 * Checks answers of the Alpaca listener against the official ASCOM Alpaca OpenAPI documents
 * vendored in tests/fixtures/alpaca/ (see its NOTICE.md): the operation is found by path and
 * method, the answer's status must be one the document lists, its content type the documented
 * one, and a JSON body must satisfy the documented schema.
 *
 * The schema checker covers the subset of OpenAPI 3.1 / JSON Schema the two documents use:
 * `$ref`, `allOf`, `oneOf`, `type`, `properties`, `required`, `items`, `uniqueItems`, `enum`,
 * `const`, `minimum`, `maximum`, `pattern` and the formats `int32`, `uint32`, `double` and
 * `date-time`; annotations (`description`, `title`, `example`, `default`) are ignored. Any other
 * keyword fails the check, so the subset can never be silently exceeded.
 *
 * One documented exception: the device API's `AlpacaResponse.ClientTransactionID` says
 * `minimum: 1` but also "Zero indicates that a valid value was not supplied"; an answer to a
 * request without a ClientTransactionID echoes 0, which is accepted for that one property.
 */

import { parse } from "npm:yaml@^2.8.0";

// deno-lint-ignore no-explicit-any
type Schema = any;

const HERE = new URL("../fixtures/alpaca/", import.meta.url);
const KNOWN = new Set([
  "$ref",
  "allOf",
  "oneOf",
  "type",
  "properties",
  "required",
  "items",
  "uniqueItems",
  "enum",
  "const",
  "minimum",
  "maximum",
  "pattern",
  "format",
  "description",
  "title",
  "example",
  "default",
]);

interface Operation {
  doc: Schema;
  template: string;
  op: Schema;
}

/** The two documents, and what was checked against them. */
export class AlpacaApi {
  #device: Schema;
  #management: Schema;
  /** `METHOD template` of every operation an answer was checked against. */
  readonly covered = new Set<string>();

  private constructor(device: Schema, management: Schema) {
    this.#device = device;
    this.#management = management;
  }

  /** Reads and parses both documents. */
  static async load(): Promise<AlpacaApi> {
    const read = async (name: string) => parse(await Deno.readTextFile(new URL(name, HERE)));
    return new AlpacaApi(
      await read("AlpacaDeviceAPI_v1.yaml"),
      await read("AlpacaManagementAPI_v1.yaml"),
    );
  }

  /**
   * Every operation of the device document that applies to a device type: the common members
   * (`/{device_type}/...`) and the device's own, each with a request built from what the
   * document requires (required query parameters, required form fields by their type).
   */
  deviceRequests(device: string): { method: string; path: string; form?: string }[] {
    const requests: { method: string; path: string; form?: string }[] = [];
    let n = 0;
    for (const [template, item] of Object.entries(this.#device.paths as Record<string, Schema>)) {
      const [, type] = template.split("/");
      if (type !== "{device_type}" && type !== device) continue;
      const path = `/api/v1${
        template.replace("{device_type}", device).replace("{device_number}", "0")
      }`;
      for (const [method, op] of Object.entries(item as Record<string, Schema>)) {
        const query = new URLSearchParams({ ClientID: "1", ClientTransactionID: String(++n) });
        for (const raw of op.parameters ?? []) {
          const param = resolve(this.#device, raw);
          if (param.in === "query" && param.required) query.set(param.name, sample(param.schema));
        }
        if (method === "get") {
          requests.push({ method: "GET", path: `${path}?${query}` });
          continue;
        }
        const form = new URLSearchParams({ ClientID: "1", ClientTransactionID: String(n) });
        const body = op.requestBody && resolve(this.#device, op.requestBody);
        const schema = body?.content?.["application/x-www-form-urlencoded"]?.schema;
        for (const part of schema ? [schema, ...(schema.allOf ?? [])] : []) {
          const resolved = resolve(this.#device, part);
          for (const name of resolved.required ?? []) {
            form.set(name, sample(resolve(this.#device, resolved.properties?.[name] ?? {})));
          }
        }
        requests.push({ method: method.toUpperCase(), path, form: form.toString() });
      }
    }
    return requests;
  }

  /** The documented operation of a request path (with `/api/v1` for devices) and method. */
  operation(pathname: string, method: string): Operation {
    const [doc, path] = pathname.startsWith("/api/v1/")
      ? [this.#device, pathname.slice("/api/v1".length)]
      : [this.#management, pathname];
    const parts = path.split("/");
    let best: { template: string; literal: number } | undefined;
    for (const template of Object.keys(doc.paths)) {
      const tparts = template.split("/");
      if (tparts.length !== parts.length) continue;
      let literal = 0;
      const fits = tparts.every((t, i) => {
        if (/^\{.*\}$/.test(t)) return parts[i] !== "";
        literal++;
        return t === parts[i];
      });
      if (fits && (!best || literal > best.literal)) best = { template, literal };
    }
    const op = best && doc.paths[best.template][method.toLowerCase()];
    if (!best || !op) throw new Error(`no documented operation for ${method} ${pathname}`);
    return { doc, template: best.template, op };
  }

  /**
   * Checks one answer and returns its body (parsed JSON, or the text).
   *
   * @throws {Error} Listing every way the answer departs from the document.
   */
  async check(method: string, url: string | URL, res: Response): Promise<unknown> {
    const { pathname } = new URL(url);
    const { doc, template, op } = this.operation(pathname, method);
    this.covered.add(`${method.toUpperCase()} ${template}`);
    const text = await res.text();
    const where = `${method} ${pathname} (${template}) answered ${res.status}`;
    let response = op.responses[String(res.status)];
    if (!response) throw new Error(`${where}: the document lists no such status`);
    response = resolve(doc, response);
    const [type, media] = Object.entries(response.content ?? {})[0] ?? [];
    const got = (res.headers.get("content-type") ?? "").split(";")[0]!.trim();
    if (type !== undefined && got !== type) {
      throw new Error(`${where}: content type ${got}, documented ${type}`);
    }
    const schema = (media as Schema)?.schema;
    const body: unknown = type === "application/json" ? JSON.parse(text) : text;
    if (schema) {
      const problems: string[] = [];
      validate(doc, schema, body, "$", problems);
      if (problems.length > 0) {
        throw new Error(`${where}: ${problems.join("; ")}\nbody: ${text.slice(0, 500)}`);
      }
    }
    return body;
  }
}

/** A value the document's schema accepts, as a parameter's text. */
function sample(schema: Schema | undefined): string {
  if (schema?.example !== undefined) return schema.type === "number" ? "0" : String(schema.example);
  if (schema?.type === "boolean") return "true";
  if (schema?.type === "number" || schema?.type === "integer") return "0";
  return "x";
}

function resolve(doc: Schema, node: Schema): Schema {
  let at = node;
  for (let hops = 0; at && typeof at === "object" && "$ref" in at; hops++) {
    if (hops > 20) throw new Error(`$ref loop at ${node.$ref}`);
    const ref: string = at.$ref;
    if (!ref.startsWith("#/")) throw new Error(`external $ref ${ref}`);
    at = ref.slice(2).split("/").reduce((o: Schema, key: string) => o?.[key], doc);
    if (at === undefined) throw new Error(`unresolved $ref ${ref}`);
  }
  return at;
}

function typeOf(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value === "number") return Number.isInteger(value) ? "integer" : "number";
  return typeof value;
}

function hasType(value: unknown, type: string): boolean {
  const actual = typeOf(value);
  return actual === type || (type === "number" && actual === "integer");
}

const FORMATS: Record<string, (value: unknown) => boolean> = {
  int32: (v) => typeof v !== "number" || (v >= -(2 ** 31) && v < 2 ** 31),
  uint32: (v) => typeof v !== "number" || (v >= 0 && v < 2 ** 32),
  double: (v) => typeof v !== "number" || Number.isFinite(v),
  "date-time": (v) => typeof v !== "string" || !Number.isNaN(Date.parse(v)),
};

/** Appends to `problems` every way `value` departs from `schema`. */
export function validate(
  doc: Schema,
  raw: Schema,
  value: unknown,
  at: string,
  problems: string[],
): void {
  const schema = resolve(doc, raw);
  for (const key of Object.keys(schema)) {
    if (!KNOWN.has(key)) problems.push(`${at}: the checker does not know the keyword ${key}`);
  }
  for (const sub of schema.allOf ?? []) validate(doc, sub, value, at, problems);
  if (schema.oneOf) {
    const passing = schema.oneOf.filter((sub: Schema) => {
      const p: string[] = [];
      validate(doc, sub, value, at, p);
      return p.length === 0;
    }).length;
    if (passing !== 1) problems.push(`${at}: matches ${passing} of oneOf, not exactly 1`);
  }
  if (schema.type !== undefined) {
    const types: string[] = Array.isArray(schema.type) ? schema.type : [schema.type];
    if (!types.some((t) => hasType(value, t))) {
      problems.push(`${at}: ${typeOf(value)}, expected ${types.join(" or ")}`);
      return;
    }
  }
  if ("const" in schema && value !== schema.const) {
    problems.push(`${at}: ${JSON.stringify(value)} is not ${JSON.stringify(schema.const)}`);
  }
  if (schema.enum && !schema.enum.includes(value)) {
    problems.push(`${at}: ${JSON.stringify(value)} not in ${JSON.stringify(schema.enum)}`);
  }
  if (typeof value === "number") {
    const echo = at === "$.ClientTransactionID" && value === 0;
    if (schema.minimum !== undefined && value < schema.minimum && !echo) {
      problems.push(`${at}: ${value} below minimum ${schema.minimum}`);
    }
    if (schema.maximum !== undefined && value > schema.maximum) {
      problems.push(`${at}: ${value} above maximum ${schema.maximum}`);
    }
  }
  if (schema.format !== undefined) {
    const check = FORMATS[schema.format];
    if (!check) problems.push(`${at}: the checker does not know the format ${schema.format}`);
    else if (!check(value)) {
      problems.push(`${at}: ${JSON.stringify(value)} is not ${schema.format}`);
    }
  }
  if (schema.pattern !== undefined && typeof value === "string") {
    if (!new RegExp(schema.pattern).test(value)) {
      problems.push(`${at}: ${JSON.stringify(value)} does not match ${schema.pattern}`);
    }
  }
  if (typeOf(value) === "object") {
    const object = value as Record<string, unknown>;
    for (const name of schema.required ?? []) {
      if (!Object.hasOwn(object, name)) problems.push(`${at}: missing ${name}`);
    }
    for (const [name, sub] of Object.entries(schema.properties ?? {})) {
      if (Object.hasOwn(object, name)) validate(doc, sub, object[name], `${at}.${name}`, problems);
    }
  }
  if (Array.isArray(value)) {
    if (schema.items) {
      value.forEach((item, i) => validate(doc, schema.items, item, `${at}[${i}]`, problems));
    }
    if (schema.uniqueItems) {
      const seen = new Set(value.map((item) => JSON.stringify(item)));
      if (seen.size !== value.length) problems.push(`${at}: items are not unique`);
    }
  }
}
