/**
 * `Idempotency-Key` on `POST /event` and `POST /events` (docs/http-api.md), against a real
 * server on loopback and its real files: a retry gets the first answer again and stores
 * nothing, another body under the same key is 422, a bad key is 400 naming the header, and two
 * requests with one key at once store once.
 *
 * @module
 */

import assert from "node:assert/strict";
import { readSiteLines, tempDir, testServer } from "../_shared/util.ts";

interface Answer {
  status: number;
  replayed: string | null;
  body: string;
}

/** Posts a raw body with a key and checks that the answer has `status`. */
async function post(
  url: string,
  body: string,
  key: string,
  status: number,
  contentType = "application/json",
): Promise<Answer> {
  const headers = { "content-type": contentType, "idempotency-key": key };
  const res = await fetch(url, { method: "POST", headers, body });
  const answer = {
    status: res.status,
    replayed: res.headers.get("idempotent-replayed"),
    body: await res.text(),
  };
  assert.equal(answer.status, status, `${JSON.stringify(key)}: ${answer.body}`);
  return answer;
}

Deno.test("POST /event answers a retried Idempotency-Key with its first answer and Idempotent-Replayed: true, storing nothing", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const body = '{"type":"weather","data":{"wind_mps":2.1}}';
  const first = await post(`${server.url}/event`, body, "retry-1", 200);
  assert.equal(first.replayed, null);
  const again = await post(`${server.url}/event`, body, "retry-1", 200);
  assert.deepEqual(again, { status: 200, replayed: "true", body: first.body });
  assert.deepEqual(await readSiteLines(site.path), [first.body]);
  const next = await post(`${server.url}/event`, body, "retry-2", 200);
  assert.equal(JSON.parse(next.body).seq, 2, "the replay used no seq");
});

Deno.test("POST /events answers a retried Idempotency-Key with its first answer, its unstored events too, storing nothing", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const ndjson =
    '{"type":"weather","data":{"t":1}}\n{"type":"dome","data":{"open":true},"store_permanently":false}\n';
  const first = await post(`${server.url}/events`, ndjson, "batch-1", 200, "application/x-ndjson");
  assert.equal(JSON.parse(first.body).accepted, 2);
  const again = await post(`${server.url}/events`, ndjson, "batch-1", 200, "application/x-ndjson");
  assert.deepEqual(again, { status: 200, replayed: "true", body: first.body });
  assert.equal((await readSiteLines(site.path)).length, 1, "the weather event, once");
});

Deno.test("POST /event answers 422 to a known Idempotency-Key sent with another body or to another route, storing nothing", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const event = '{"type":"weather","data":{"t":1}}';
  const first = await post(`${server.url}/event`, event, "k-422", 200);
  const other = await post(`${server.url}/event`, event.replace("1", "2"), "k-422", 422);
  assert.match(
    JSON.parse(other.body).detail,
    /Idempotency-Key "k-422" was answered at .* another body or route; nothing was stored/,
  );
  await post(`${server.url}/events`, `[${event}]`, "k-422", 422);
  assert.deepEqual(await readSiteLines(site.path), [first.body]);
});

Deno.test("POST /event answers 400 naming the Idempotency-Key header to an empty, an over-long or a non-printable key, storing nothing", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const body = '{"type":"weather","data":{"t":1}}';
  const bad: [key: string, found: string][] = [
    ["", "it is empty"],
    ["x".repeat(201), "it has 201"],
    ["a\tb", "character 2 is U+0009"],
    ["caf\u00e9", "character 4 is U+00E9"],
  ];
  for (const [key, found] of bad) {
    const { detail } = JSON.parse((await post(`${server.url}/event`, body, key, 400)).body);
    assert.match(detail, /^The Idempotency-Key header must be 1 to 200 printable ASCII characters/);
    assert.ok(detail.includes(found), detail);
  }
  await post(`${server.url}/event`, body, "x".repeat(200), 200);
  assert.equal((await readSiteLines(site.path)).length, 1);
});

Deno.test("POST /event stores once when requests with one Idempotency-Key arrive together", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const body = '{"type":"weather","data":{"t":1}}';
  const answers = await Promise.all(
    Array.from({ length: 8 }, () => post(`${server.url}/event`, body, "together", 200)),
  );
  assert.ok(answers.every((a) => a.body === answers[0]!.body), JSON.stringify(answers));
  assert.equal(answers.filter((a) => a.replayed === null).length, 1, "one first answer");
  assert.equal((await readSiteLines(site.path)).length, 1);
});

Deno.test("POST /event keeps no Idempotency-Key whose request was refused, so its corrected retry is stored", async () => {
  await using site = await tempDir();
  await using server = await testServer({ siteDir: site.path });
  const event = '{"type":"weather","data":{"t":1}}';
  await post(`${server.url}/event`, '{"type":"weather","data":5}', "fix-me", 400);
  const good = await post(`${server.url}/event`, event, "fix-me", 200);
  assert.equal(good.replayed, null);
  const again = await post(`${server.url}/event`, event, "fix-me", 200);
  assert.deepEqual(again, { status: 200, replayed: "true", body: good.body }, "kept from then on");
  assert.deepEqual(await readSiteLines(site.path), [good.body]);
});
