import assert from "node:assert/strict";
import { getPriority } from "node:os";
import { type DenoChild, type DenoChildOptions, spawnDeno } from "../../process/spawn.ts";

/** A child's piped output: its first line once written, all of it once the child has ended. */
class Output {
  #reader: ReadableStreamDefaultReader<string>;
  #text = "";
  #stderr: Promise<string>;

  constructor(child: DenoChild) {
    this.#reader = child.process.stdout.pipeThrough(new TextDecoderStream()).getReader();
    this.#stderr = new Response(child.process.stderr).text();
  }

  /** Waits until the child has written a whole line (it says it is ready). */
  async firstLine(): Promise<string> {
    while (!this.#text.includes("\n")) {
      const { done, value } = await this.#reader.read();
      if (done) break;
      this.#text += value;
    }
    return this.#text.split("\n")[0]!;
  }

  /** Everything the child wrote to stdout and stderr, read to the end. */
  async all(): Promise<{ stdout: string; stderr: string }> {
    while (true) {
      const { done, value } = await this.#reader.read();
      if (done) break;
      this.#text += value;
    }
    return { stdout: this.#text, stderr: await this.#stderr };
  }
}

/** A program for `deno eval` that says "ready" once its SIGTERM listener is in place. */
function onSigterm(body: string): string {
  return `Deno.addSignalListener("SIGTERM", () => { ${body} }); console.log("ready"); setInterval(() => {}, 1000);`;
}

Deno.test("spawnDeno runs this Deno with the given arguments and reports its exit status", async () => {
  const child = spawnDeno({ args: ["eval", "Deno.exit(3)"], output: "null" });
  assert.equal((await child.process.status).code, 3);
});

/** Runs a child with its output piped to the end: what it printed, and its pid. */
async function printed(
  options: Omit<DenoChildOptions, "output">,
): Promise<{ stdout: string; pid: number }> {
  const child = spawnDeno({ ...options, output: "piped" });
  const out = await child.process.output();
  return { stdout: new TextDecoder().decode(out.stdout), pid: child.pid };
}

Deno.test("spawnDeno runs the child under exactly the permission flags given", async () => {
  const script = await Deno.makeTempFile({ suffix: ".ts" });
  try {
    await Deno.writeTextFile(
      script,
      'for (const variable of ["SPAWN_ALLOWED", "SPAWN_DENIED"]) console.log(Deno.permissions.querySync({ name: "env", variable }).state);',
    );
    const { stdout } = await printed({
      args: ["run", "--no-prompt", "--allow-env=SPAWN_ALLOWED", script],
    });
    assert.equal(stdout, "granted\nprompt\n");
  } finally {
    await Deno.remove(script);
  }
});

Deno.test("spawnDeno adds the given variables to the child's environment", async () => {
  const { stdout } = await printed({
    args: ["eval", 'console.log(Deno.env.get("SPAWN_TOKEN"))'],
    env: { SPAWN_TOKEN: "s3cret" },
  });
  assert.equal(stdout, "s3cret\n");
});

Deno.test("spawnDeno gives the child no stdin", async () => {
  const { stdout } = await printed({
    args: ["eval", "console.log(await Deno.stdin.read(new Uint8Array(1)))"],
  });
  assert.equal(stdout, "null\n");
});

Deno.test("spawnDeno runs Deno through the via command, whose pid is Deno's", async () => {
  const { stdout, pid } = await printed({
    args: ["eval", 'import { getPriority } from "node:os"; console.log(Deno.pid, getPriority())'],
    via: ["nice", "-n", "5"],
  });
  assert.equal(stdout, `${pid} ${Math.min(getPriority() + 5, 19)}\n`);
});

Deno.test("spawnDeno gives a detached child a process group of its own", async () => {
  const { stdout } = await printed({
    args: [
      "eval",
      'const [, ppid, pgrp] = Deno.readTextFileSync("/proc/self/stat").split(") ")[1]!.split(" "); console.log(Deno.pid === Number(pgrp), ppid);',
    ],
    detached: true,
  });
  assert.equal(stdout, `true ${Deno.pid}\n`);
});

Deno.test("spawnDeno's stop() asks the child to end with SIGTERM and returns its exit status", async () => {
  const child = spawnDeno({
    args: ["eval", onSigterm('console.log("terminated"); Deno.exit(0);')],
    output: "piped",
  });
  const output = new Output(child);
  assert.equal(await output.firstLine(), "ready");
  const status = await child.stop();
  assert.deepEqual({ ...status }, { success: true, code: 0, signal: null });
  assert.equal((await output.all()).stdout, "ready\nterminated\n");
});

Deno.test("spawnDeno's stop() sends SIGTERM once, however often it is called", async () => {
  const child = spawnDeno({
    args: [
      "eval",
      onSigterm(
        "globalThis.heard = (globalThis.heard ?? 0) + 1; setTimeout(() => { console.log(globalThis.heard); Deno.exit(0); }, 300);",
      ),
    ],
    output: "piped",
  });
  const output = new Output(child);
  await output.firstLine();
  const [first, second] = await Promise.all([child.stop(), child.stop()]);
  assert.equal(first, second);
  assert.equal((await output.all()).stdout, "ready\n1\n");
});

Deno.test("spawnDeno's stop() kills a child still running killAfterMs after the SIGTERM", async () => {
  const child = spawnDeno({ args: ["eval", onSigterm("")], output: "piped", killAfterMs: 200 });
  const output = new Output(child);
  await output.firstLine();
  const status = await child.stop();
  assert.equal(status.signal, "SIGKILL");
  await output.all();
});

Deno.test("spawnDeno's stop() without killAfterMs waits as long as the child takes to end", async () => {
  const child = spawnDeno({
    args: ["eval", onSigterm("setTimeout(() => Deno.exit(4), 500);")],
    output: "piped",
  });
  const output = new Output(child);
  await output.firstLine();
  assert.equal((await child.stop()).code, 4);
  await output.all();
});

Deno.test("spawnDeno's stop() after the child has exited returns its status", async () => {
  const child = spawnDeno({ args: ["eval", "Deno.exit(5)"], output: "null", killAfterMs: 10 });
  await child.process.status;
  assert.equal((await child.stop()).code, 5);
});

Deno.test("spawnDeno's child is stopped when its handle is disposed", async () => {
  let process: Deno.ChildProcess;
  {
    await using child = spawnDeno({
      args: ["eval", "setInterval(() => {}, 1000)"],
      output: "null",
    });
    process = child.process;
  }
  assert.equal((await process.status).signal, "SIGTERM");
});
