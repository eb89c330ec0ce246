// Writes points with the npm @influxdata/influxdb-client under Node, as a Node user does
// (docs/influx.md): its Node transport, which gzips each body larger than gzipThreshold.
// Usage: node influx_write.mjs <client index.mjs> <url> <token> <json>
//   json: {org, bucket, precision, gzipThreshold, points: [{measurement, tags, floats, ints,
//   uints, booleans, strings, timeMs}]}
// Prints one JSON line: {"ok": true}, or {"error": {name, statusCode, message}}.
import { pathToFileURL } from "node:url";

const [module, url, token, json] = process.argv.slice(2);
const { InfluxDB, Point } = await import(pathToFileURL(module).href);
const { org, bucket, precision, gzipThreshold, points } = JSON.parse(json);

const writeApi = new InfluxDB({ url, token }).getWriteApi(org, bucket, precision, {
  gzipThreshold,
  maxRetries: 0, // one attempt: a refused batch is an answer to report, not to retry
});
for (const p of points) {
  const point = new Point(p.measurement);
  for (const [k, v] of Object.entries(p.tags ?? {})) point.tag(k, v);
  for (const [k, v] of Object.entries(p.floats ?? {})) point.floatField(k, v);
  for (const [k, v] of Object.entries(p.ints ?? {})) point.intField(k, v);
  for (const [k, v] of Object.entries(p.uints ?? {})) point.uintField(k, v);
  for (const [k, v] of Object.entries(p.booleans ?? {})) point.booleanField(k, v);
  for (const [k, v] of Object.entries(p.strings ?? {})) point.stringField(k, v);
  if (p.timeMs !== undefined) point.timestamp(new Date(p.timeMs));
  writeApi.writePoint(point);
}
let result;
try {
  await writeApi.close();
  result = { ok: true };
} catch (err) {
  result = { error: { name: err.name, statusCode: err.statusCode, message: err.message } };
}
// deno-lint-ignore no-console
console.log(JSON.stringify(result));
