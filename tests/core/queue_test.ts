/**
 * Tests of `core/queue.ts`, the service's one FIFO: consecutive items form one group, a control
 * function runs alone between what came before and after it, its error reaches only its caller,
 * and `idle()` (what closing waits for) waits for everything queued.
 * @module
 */

import assert from "node:assert/strict";
import { GroupQueue } from "../../core/queue.ts";

/** The `fail` handler of queues whose commit never throws: a call fails the test. */
function unexpected(_items: number[], err: unknown): never {
  throw new Error(`commit threw: ${err}`);
}

/** A queue that records each group it commits (and each control run) in `log`. */
function loggingQueue(): { queue: GroupQueue<number>; log: (number[] | string)[] } {
  const log: (number[] | string)[] = [];
  const queue = new GroupQueue<number>((items) => {
    log.push(items);
    return Promise.resolve();
  }, unexpected);
  return { queue, log };
}

Deno.test("GroupQueue commits the items pushed in one tick as one group, in push order", async () => {
  const { queue, log } = loggingQueue();
  for (const n of [3, 1, 2]) queue.push(n);
  await queue.idle();
  assert.deepEqual(log, [[3, 1, 2]]);
});

Deno.test("GroupQueue runs a control function alone, after the items before it and before those after it", async () => {
  const { queue, log } = loggingQueue();
  queue.push(1);
  queue.push(2);
  const done = queue.control(() => {
    log.push("control");
    return Promise.resolve();
  });
  queue.push(3);
  queue.push(4);
  await done;
  await queue.idle();
  assert.deepEqual(log, [[1, 2], "control", [3, 4]]);
});

Deno.test("GroupQueue gathers the items pushed while a commit runs into the next group", async () => {
  const log: number[][] = [];
  const first = Promise.withResolvers<void>();
  const started = Promise.withResolvers<void>();
  const queue = new GroupQueue<number>(async (items) => {
    log.push(items);
    if (items.includes(1)) {
      started.resolve();
      await first.promise;
    }
  }, unexpected);
  queue.push(1);
  await started.promise;
  assert.deepEqual(log, [[1]], "the first group is being committed");
  queue.push(2);
  queue.push(3);
  queue.push(4);
  assert.deepEqual(log, [[1]], "nothing overtakes a running commit");
  first.resolve();
  await queue.idle();
  assert.deepEqual(log, [[1], [2, 3, 4]]);
});

Deno.test("GroupQueue never runs two commits at once", async () => {
  let running = 0;
  let overlap = false;
  const queue = new GroupQueue<number>(async () => {
    running++;
    overlap ||= running > 1;
    await new Promise((r) => setTimeout(r, 1));
    running--;
  }, unexpected);
  for (let i = 0; i < 20; i++) {
    queue.push(i);
    if (i % 3 === 0) await new Promise((r) => setTimeout(r, 0));
  }
  await queue.idle();
  assert.equal(overlap, false);
});

Deno.test("GroupQueue.control() resolves its caller with the function's result", async () => {
  const { queue } = loggingQueue();
  assert.equal(await queue.control(() => Promise.resolve("stopped r1")), "stopped r1");
});

Deno.test("GroupQueue.control() rejects only its own caller, and the queue goes on", async () => {
  const { queue, log } = loggingQueue();
  const failure = new Error("run directory in the way");
  queue.push(1);
  const failing = queue.control(() => Promise.reject(failure));
  const after = queue.control(() => Promise.resolve("next"));
  queue.push(2);
  await assert.rejects(failing, (err) => err === failure);
  assert.equal(await after, "next");
  await queue.idle();
  assert.deepEqual(log, [[1], [2]]);
});

Deno.test("GroupQueue.idle() waits for every item and control queued before it", async () => {
  const log: number[][] = [];
  const queue = new GroupQueue<number>(async (items) => {
    await new Promise((r) => setTimeout(r, 5));
    log.push(items);
  }, unexpected);
  queue.push(1);
  void queue.control(() => new Promise((r) => setTimeout(r, 5)));
  queue.push(2);
  await queue.idle();
  assert.deepEqual(log, [[1], [2]]);
});

Deno.test("GroupQueue.idle() also waits for items queued by a control function while it drains", async () => {
  const { queue, log } = loggingQueue();
  void queue.control(() => {
    queue.push(7);
    return Promise.resolve();
  });
  await queue.idle();
  assert.deepEqual(log, [[7]]);
});

Deno.test("GroupQueue starts a new group for items pushed after it went idle", async () => {
  const { queue, log } = loggingQueue();
  queue.push(1);
  await queue.idle();
  queue.push(2);
  await queue.idle();
  assert.deepEqual(log, [[1], [2]]);
});

Deno.test("GroupQueue settles a group whose commit throws through fail, and goes on with the next", async () => {
  const failed: number[][] = [];
  const committed: number[][] = [];
  const queue = new GroupQueue<number>(async (items) => {
    await Promise.resolve();
    if (items.includes(1)) throw new Error("bug");
    committed.push(items);
  }, (items) => failed.push(items));
  queue.push(1);
  queue.push(2);
  await queue.idle();
  queue.push(3);
  await queue.idle();
  assert.deepEqual(failed, [[1, 2]]);
  assert.deepEqual(committed, [[3]]);
});
