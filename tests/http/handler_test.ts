/**
 * Tests of `http/problems.ts` and `http/router.ts`: `toProblem()`, the one table from a domain error to its
 * status and advice; the Host/Origin and token guards; reading a body within its limit and
 * content type (through a real `Deno.serve` on port 0); and the route lookup.
 * @module
 */

import assert from "node:assert/strict";
import {
  InvalidRequestError,
  NoActiveRunError,
  RunConflictError,
  RunDirNotAllowedError,
  ShuttingDownError,
  SiteInUseError,
  StorageError,
  TypeLimitError,
  WriteError,
} from "../../core/errors.ts";
import { HttpError, toProblem } from "../../http/problems.ts";
import { guardLoopback, guardToken } from "../../http/guards.ts";
import { readJsonBody } from "../../http/body.ts";
import { route, Router } from "../../http/router.ts";
import { DEFAULT_MAX_BODY } from "../../server.ts";
import { getJson, postJson, tempDir, testServer } from "../_shared/util.ts";

interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
}

/** Asserts `toProblem(err)` answers `status` with exactly `detail`, and returns the response. */
async function assertProblem(err: unknown, status: number, detail: string): Promise<Response> {
  const res = toProblem(err);
  assert.ok(res, `toProblem() left ${err} unmapped`);
  const body = await res.clone().json() as Problem;
  assert.equal(res.status, status, body.detail);
  assert.equal(body.detail, detail);
  return res;
}

/** Runs `fn` and answers the HttpError it throws (failing when it throws nothing). */
function thrown(fn: () => void): HttpError {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof HttpError, `expected an HttpError, got ${err}`);
    return err;
  }
  assert.fail("expected the guard to refuse the request");
}

function request(headers: Record<string, string>): Request {
  return new Request("http://localhost/current", { headers });
}

// --- toProblem(): domain error -> status and advice -------------------------------------------

/** Details asserted by more than one test. */
const toProblemDetail = {
  noRun: "No run is active; start one with POST /run/start.",
};

Deno.test("toProblem() answers problem+json with type, title, status and detail, never cached", async () => {
  const res = await assertProblem(new NoActiveRunError(), 409, toProblemDetail.noRun);
  assert.deepEqual(await res.json(), {
    type: "about:blank",
    title: "Conflict",
    status: 409,
    detail: toProblemDetail.noRun,
  });
  assert.equal(res.headers.get("content-type"), "application/problem+json; charset=utf-8");
  assert.equal(res.headers.get("cache-control"), "no-store");
  assert.equal(res.headers.get("x-content-type-options"), "nosniff");
});

Deno.test("toProblem() answers InvalidRequestError with 400 and its own sentence", async () => {
  await assertProblem(
    new InvalidRequestError('"data" must be a JSON object, not an array.'),
    400,
    '"data" must be a JSON object, not an array.',
  );
});

Deno.test("toProblem() answers RunDirNotAllowedError with 400 and suggests --allow-run-root", async () => {
  await assertProblem(
    new RunDirNotAllowedError("../x", "/srv/x", "/srv/telemetry", []),
    400,
    'run_dir "../x" resolves to /srv/x, which is not inside the site directory /srv/telemetry; use a path below it, or have the operator add --allow-run-root.',
  );
});

Deno.test("toProblem() answers RunDirNotAllowedError with 400 listing the allowed run roots", async () => {
  await assertProblem(
    new RunDirNotAllowedError("/tmp/r", "/tmp/r", "/srv/telemetry", ["/data/a", "/data/b"]),
    400,
    'run_dir "/tmp/r" resolves to /tmp/r, which is not inside the site directory /srv/telemetry or an --allow-run-root (/data/a, /data/b); use a path below it, or have the operator add --allow-run-root.',
  );
});

Deno.test("toProblem() answers TypeLimitError with 400 and suggests raising --max-types", async () => {
  await assertProblem(
    new TypeLimitError(3, undefined),
    400,
    "the snapshot already holds 3 event types, the limit; reuse an existing type or raise --max-types.",
  );
});

Deno.test("toProblem() answers TypeLimitError of a batch item with 400 naming the item", async () => {
  await assertProblem(
    new TypeLimitError(3, 2),
    400,
    "Item 2 (0-based): the snapshot already holds 3 event types, the limit; reuse an existing type or raise --max-types.",
  );
});

Deno.test("toProblem() answers RunConflictError with 409 naming POST /run/stop and the requested run", async () => {
  await assertProblem(
    new RunConflictError("r1", "r2"),
    409,
    'Run "r1" is active; stop it with POST /run/stop before starting "r2".',
  );
});

Deno.test("toProblem() answers RunConflictError for a derived run id with 409 and 'a new one'", async () => {
  await assertProblem(
    new RunConflictError("r1", undefined),
    409,
    'Run "r1" is active; stop it with POST /run/stop before starting a new one.',
  );
});

Deno.test("toProblem() answers NoActiveRunError with 409 naming POST /run/start", async () => {
  await assertProblem(new NoActiveRunError(), 409, toProblemDetail.noRun);
});

Deno.test("toProblem() answers ShuttingDownError with 503 and says to retry", async () => {
  await assertProblem(
    new ShuttingDownError(),
    503,
    "The server is shutting down; retry once it is back.",
  );
});

Deno.test("toProblem() answers a disk-full WriteError with 507 and says to free space", async () => {
  await assertProblem(
    new WriteError("Cannot write to /s/a.ndjson: No space left on device", {
      cause: undefined,
      diskFull: true,
    }),
    507,
    "The disk is full: the file system holding the site directory has no space left; nothing was written and no seq was used. Free space there (or raise the quota) and retry.",
  );
});

Deno.test("toProblem() answers another WriteError with 500 naming the failure", async () => {
  await assertProblem(
    new WriteError("Cannot write to /s/a.ndjson: Input/output error", {
      cause: undefined,
      diskFull: false,
    }),
    500,
    "The event could not be written (Cannot write to /s/a.ndjson: Input/output error); nothing was stored. Check the site directory and retry.",
  );
});

Deno.test("toProblem() answers StorageError with 500 and its message as a sentence", async () => {
  await assertProblem(
    new StorageError("Cannot create run directory /s/r: Permission denied"),
    500,
    "Cannot create run directory /s/r: Permission denied.",
  );
});

Deno.test("toProblem() answers an HttpError with its own status, detail and headers", async () => {
  const res = await assertProblem(
    new HttpError(401, "Send the token.", { "www-authenticate": "Bearer" }),
    401,
    "Send the token.",
  );
  assert.equal(res.headers.get("www-authenticate"), "Bearer");
});

Deno.test("toProblem() leaves unexpected errors unmapped so the caller logs them and answers 500", () => {
  for (const err of [new Error("/etc/secret"), new TypeError("x is undefined"), "a string", null]) {
    assert.equal(toProblem(err), undefined, String(err));
  }
});

Deno.test("toProblem() leaves SiteInUseError unmapped: it happens at start-up, not in a request", () => {
  assert.equal(toProblem(new SiteInUseError("/srv/telemetry")), undefined);
});

// --- guards -----------------------------------------------------------------------------------

Deno.test("guardLoopback() accepts the loopback Host names with and without a port", () => {
  for (
    const host of [
      "localhost",
      "LOCALHOST:6562",
      "127.0.0.1",
      "127.0.0.1:80",
      "[::1]",
      "[::1]:6562",
    ]
  ) {
    guardLoopback(request({ host }));
  }
});

Deno.test("guardLoopback() refuses a Host that is not loopback with 403 naming it", () => {
  for (const host of ["evil.example", "localhost.evil.example", "0.0.0.0", "192.168.1.5:6562"]) {
    const err = thrown(() => guardLoopback(request({ host })));
    assert.equal(err.status, 403);
    assert.equal(
      err.message,
      `Host ${
        JSON.stringify(host)
      } is not accepted; address the server as localhost, 127.0.0.1 or [::1].`,
    );
  }
});

Deno.test("guardLoopback() refuses a request without a Host header with 403", () => {
  const err = thrown(() => guardLoopback(request({})));
  assert.equal(err.status, 403);
  assert.match(err.message, /^Host "\(none\)" is not accepted/);
});

Deno.test("guardLoopback() refuses a foreign, lookalike or null Origin even with a loopback Host", () => {
  for (
    const origin of ["https://evil.example", "http://localhost.evil.example", "null", "file://"]
  ) {
    const err = thrown(() => guardLoopback(request({ host: "localhost:6562", origin })));
    assert.equal(err.status, 403);
    assert.equal(
      err.message,
      `Requests from origin ${
        JSON.stringify(origin)
      } are not accepted; only pages served from this machine may call the API.`,
    );
  }
});

Deno.test("guardLoopback() accepts an Origin served from this machine", () => {
  for (const origin of ["http://localhost:5173", "http://127.0.0.1", "https://[::1]:8443"]) {
    guardLoopback(request({ host: "127.0.0.1:6562", origin }));
  }
});

Deno.test("guardToken() accepts the bearer token whatever the case of the scheme and the spaces", () => {
  for (const authorization of ["Bearer s3cret", "bearer s3cret", "BEARER   s3cret  "]) {
    guardToken(request({ authorization }), "s3cret");
  }
});

Deno.test("guardToken() refuses a missing, wrong, near-miss or non-bearer token with 401 and WWW-Authenticate", () => {
  const none =
    "This server requires a token, and none was given; send it as 'Authorization: Bearer <token>'.";
  const notBearer =
    "This server requires a token, and the Authorization header holds none (it is not 'Bearer <token>'); send it as 'Authorization: Bearer <token>'.";
  const wrong =
    "The token given is not this server's; send the token the service was started with (its --token or OBS_TELEMETRY_TOKEN) as 'Authorization: Bearer <token>'.";
  const refused: [Record<string, string>, string, string][] = [
    [{}, none, 'Bearer realm="telemetry"'],
    ...["Basic s3cret", "s3cret", "Bearer  "].map((authorization) =>
      [{ authorization }, notBearer, 'Bearer realm="telemetry"'] as [
        Record<string, string>,
        string,
        string,
      ]
    ),
    ...["Bearer wrong", "Bearer s3cre", "Bearer s3cret1"].map((authorization) =>
      [{ authorization }, wrong, 'Bearer realm="telemetry", error="invalid_token"'] as [
        Record<string, string>,
        string,
        string,
      ]
    ),
  ];
  for (const [headers, message, challenge] of refused) {
    const err = thrown(() => guardToken(request(headers), "s3cret"));
    assert.equal(err.status, 401, JSON.stringify(headers));
    assert.equal(err.message, message, JSON.stringify(headers));
    assert.equal(err.headers["www-authenticate"], challenge, JSON.stringify(headers));
  }
});

// --- reading a body, through a real server ----------------------------------------------------

/**
 * Serves `readJsonBody()` on 127.0.0.1 port 0: answers what it read as JSON (`undefined` as
 * the string "undefined"), or the problem of what it threw.
 */
function bodyServer(maxBody: number, allowNdjson = false): Deno.HttpServer<Deno.NetAddr> & {
  url: string;
} {
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    try {
      const { value, ndjson } = await readJsonBody(req, maxBody, allowNdjson);
      return Response.json({
        value: value === undefined ? "undefined" : value,
        ndjson: ndjson ?? null,
      });
    } catch (err) {
      await req.body?.cancel().catch(() => {});
      return toProblem(err) ?? new Response(String(err), { status: 599 });
    }
  });
  return Object.assign(server, { url: `http://127.0.0.1:${server.addr.port}/` });
}

async function post(
  url: string,
  body: BodyInit | null,
  contentType?: string,
): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(url, {
    method: "POST",
    body,
    ...(contentType === undefined ? {} : { headers: { "content-type": contentType } }),
  });
  return { status: res.status, body: await res.json() };
}

/** A JSON string literal of exactly `bytes` bytes. */
function jsonOfSize(bytes: number): string {
  return `"${"x".repeat(bytes - 2)}"`;
}

Deno.test("readJsonBody() reads a body of exactly the default limit of 1 MiB", async () => {
  await using server = bodyServer(DEFAULT_MAX_BODY);
  assert.equal(DEFAULT_MAX_BODY, 1024 * 1024);
  const res = await post(server.url, jsonOfSize(DEFAULT_MAX_BODY), "application/json");
  assert.equal(res.status, 200);
  assert.equal((res.body.value as string).length, DEFAULT_MAX_BODY - 2);
});

Deno.test("readJsonBody() refuses a declared body one byte over the limit with 413", async () => {
  await using server = bodyServer(DEFAULT_MAX_BODY);
  const res = await post(server.url, jsonOfSize(DEFAULT_MAX_BODY + 1), "application/json");
  assert.equal(res.status, 413);
  assert.equal(
    res.body.detail,
    `The request body is larger than ${DEFAULT_MAX_BODY} bytes; split it into smaller batches (or have the operator raise --max-body).`,
  );
});

Deno.test("readJsonBody() refuses a chunked body that grows over the limit with 413", async () => {
  await using server = bodyServer(1000);
  const chunk = new TextEncoder().encode("x".repeat(400));
  let sent = 0;
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      // 40 kB without a Content-Length: only counting while reading can refuse it.
      if (sent++ < 100) controller.enqueue(chunk);
      else controller.close();
    },
  });
  const res = await post(server.url, stream, "application/json");
  assert.equal(res.status, 413);
  assert.match(res.body.detail as string, /^The request body is larger than 1000 bytes;/);
});

Deno.test("readJsonBody() refuses a text/plain body with 415 naming application/json", async () => {
  await using server = bodyServer(DEFAULT_MAX_BODY);
  const res = await post(server.url, "{}", "text/plain");
  assert.equal(res.status, 415);
  assert.equal(
    res.body.detail,
    'Content-Type "text/plain" is not accepted; send the body as application/json.',
  );
});

Deno.test("readJsonBody() refuses a wrong content type with 415 before reading a body over the limit", async () => {
  await using server = bodyServer(1000);
  const res = await post(server.url, "x".repeat(5000), "application/x-www-form-urlencoded");
  assert.equal(res.status, 415);
});

Deno.test("readJsonBody() refuses NDJSON with 415 where it is not allowed, and names it where it is", async () => {
  {
    await using server = bodyServer(DEFAULT_MAX_BODY);
    const res = await post(server.url, "{}\n", "application/x-ndjson");
    assert.equal(res.status, 415);
  }
  await using server = bodyServer(DEFAULT_MAX_BODY, true);
  const res = await post(server.url, "{}", "text/csv");
  assert.equal(res.status, 415);
  assert.equal(
    res.body.detail,
    'Content-Type "text/csv" is not accepted; send the body as application/json or application/x-ndjson.',
  );
});

Deno.test("readJsonBody() hands an NDJSON body over as text, unparsed, where NDJSON is allowed", async () => {
  await using server = bodyServer(DEFAULT_MAX_BODY, true);
  const res = await post(server.url, '{"a":1}\n{"b":2}\n', "application/x-ndjson");
  assert.deepEqual(res.body, { value: "undefined", ndjson: '{"a":1}\n{"b":2}\n' });
});

Deno.test("readJsonBody() accepts a +json media type with parameters", async () => {
  await using server = bodyServer(DEFAULT_MAX_BODY);
  const res = await post(server.url, '{"a":1}', "application/merge-patch+json; charset=utf-8");
  assert.deepEqual(res.body, { value: { a: 1 }, ndjson: null });
});

Deno.test("readJsonBody() answers no value for a POST without body or Content-Type", async () => {
  await using server = bodyServer(DEFAULT_MAX_BODY);
  const res = await post(server.url, null);
  assert.deepEqual(res, { status: 200, body: { value: "undefined", ndjson: null } });
});

Deno.test("readJsonBody() refuses a body that is not JSON with 400 naming the parse error", async () => {
  await using server = bodyServer(DEFAULT_MAX_BODY);
  const res = await post(server.url, '{"a":', "application/json");
  assert.equal(res.status, 400);
  assert.match(
    res.body.detail as string,
    /^The body is not valid JSON \(.+\); send a JSON value\.$/,
  );
});

// --- routes -----------------------------------------------------------------------------------

const noop = () => new Response();

Deno.test("Router.match() finds /current/:type(.*) for a type with slashes, still percent-encoded", () => {
  const current = route("/current/:type(.*)", { GET: noop });
  const router = new Router([route("/current", { GET: noop }), current]);
  const found = router.match(new URL("http://localhost/current/dome/shutter%2F2"));
  assert.equal(found?.route, current);
  assert.deepEqual(found?.params, { type: "dome/shutter%2F2" });
});

Deno.test("Router.match() finds a static path by its own row, with no params", () => {
  const current = route("/current", { GET: noop });
  const router = new Router([current, route("/current/:type(.*)", { GET: noop })]);
  const found = router.match(new URL("http://localhost/current?x=1"));
  assert.equal(found?.route, current);
  assert.deepEqual(found?.params, {});
});

Deno.test("Router.match() answers undefined for a path no row serves, such as a static path with a suffix", () => {
  const router = new Router([
    route("/event", { POST: noop }),
    route("/current/:type(.*)", { GET: noop }),
  ]);
  for (const path of ["/event/", "/event/x", "/events", "/currentx", "/"]) {
    assert.equal(router.match(new URL(`http://localhost${path}`)), undefined, path);
  }
});

Deno.test("Router.match() tries patterns in table order, the first match wins", () => {
  const first = route("/files/:name(.*)", { GET: noop });
  const second = route("/files/:dir/:name", { GET: noop });
  const router = new Router([first, second]);
  assert.equal(router.match(new URL("http://localhost/files/a/b"))?.route, first);
});

Deno.test("GET /current/{type} answers the latest envelope of a type with unencoded slashes", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const posted = await postJson(`${server.url}/event`, { type: "dome/shutter", data: { open: 1 } });
  const res = await getJson(`${server.url}/current/dome/shutter`);
  assert.equal(res.status, 200);
  assert.deepEqual(res.body, posted.body);
});

Deno.test("POST /current/{type} answers 405 with Allow: GET, HEAD, DELETE from the pattern route", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const res = await postJson(`${server.url}/current/dome/shutter`, {});
  assert.equal(res.status, 405);
  assert.equal(res.headers.get("allow"), "GET, HEAD, DELETE");
  assert.equal(
    (res.body as Problem).detail,
    "POST is not allowed on /current/dome/shutter; use GET or HEAD or DELETE.",
  );
});

Deno.test("GET under a static path answers 404 listing the API", async () => {
  await using dir = await tempDir();
  await using server = await testServer({ siteDir: dir.path });
  const res = await getJson(`${server.url}/health/extra`);
  assert.equal(res.status, 404);
  assert.match((res.body as Problem).detail, /^No endpoint at \/health\/extra; the API has /);
});
