// tier: serial (a whole stack through tributary start, a runner given 10 s to load, a 200 ms drain timeout)
import t from "tap";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import OpenAI from "openai";
import { startGateway, startNats, startRunner, testCatalog, TEST_MODEL, TEST_KEY } from "../../harness/processes.js";
import { freePort } from "../../harness/cluster.js";
import { rawConnect, rawWrite, requestHead } from "../../harness/raw-http.js";
import { spawnCli } from "../../harness/cli.js";

const messages = [{ role: "user" as const, content: "Tell me a story." }];
const overrides = JSON.stringify({ [TEST_MODEL]: { max_output_tokens: 1200 } });
/**
 * The tokens of a stream that must still run when its process starts draining (the drain starts
 * within milliseconds of the signal, sent at the stream's first chunk; the tiny model writes a few
 * hundred tokens a second). Each such case also checks, by the process's own "draining" record,
 * that the drain did begin while the stream ran.
 */
const IN_FLIGHT_TOKENS = 600;

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

t.test("tributary start: Ctrl-C lets in-flight streams finish, then every process exits", async (t) => {
  const home = mkdtempSync(join(tmpdir(), "tributary-home-"));
  t.teardown(() => rmSync(home, { recursive: true, force: true }));
  const natsPort = await freePort();
  const adminAddr = `127.0.0.1:${await freePort()}`;
  const cli = spawnCli(["start"], {
    env: { TRIBUTARY_HOME: home, TRIBUTARY_CATALOG: testCatalog, TRIBUTARY_PORT: "0", TRIBUTARY_NATS_PORT: String(natsPort), TRIBUTARY_ADMIN_ADDR: adminAddr, TRIBUTARY_MODEL_OVERRIDES: overrides, NATS_URL: "" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  t.teardown(() => cli.kill("SIGKILL"));
  const pids = new Set<number>();
  const gatewayPids: number[] = [];
  let layout: { models?: Record<string, { runners: number; threads: number; class: string }> } | undefined;
  /** When the gateway began its drain, by its own record's time. */
  let gatewayDrainingAt: number | undefined;
  // stderr is a pipe: JSON lines (nats-server's own output goes to its log file).
  createInterface({ input: cli.stderr! }).on("line", (line) => {
    try {
      const record = JSON.parse(line) as { pid?: number; msg?: string; serverPid?: number; component?: string; t?: string };
      if (record.msg === "runner layout") layout = record as typeof layout;
      if (record.msg === "draining" && record.component === "gateway" && record.t) gatewayDrainingAt ??= Date.parse(record.t);
      if (record.msg === "nats-server ready" && record.serverPid) pids.add(record.serverPid);
      if (record.pid) pids.add(record.pid);
      if (record.msg === "gateway listening" && record.pid) gatewayPids.push(record.pid);
    } catch {}
  });
  // Each gateway that starts prints the banner (with the port it got: TRIBUTARY_PORT is 0).
  let stdout = "";
  let heard = () => {};
  cli.stdout!.on("data", (d: Buffer) => {
    stdout += d.toString();
    heard();
  });
  const banner = async (n: number): Promise<string> => {
    for (;;) {
      const all = [...stdout.matchAll(/Tributary is up: .*/g)];
      if (all.length >= n) return all[n - 1]![0];
      await new Promise<void>((resolve) => (heard = resolve));
    }
  };
  const first = await banner(1);
  const key = /API key: (\S+)\)/.exec(first)![1]!;
  t.match(key, /^sk-local-/, "a local key was made and printed");
  // The dashboard one click away: the footer has a sign-in link of the local owner, on the gateway's port.
  const signInLinks = () => [...stdout.matchAll(/^Dashboard \(a sign-in link that works once\): (\S+)$/gm)].map((m) => m[1]!);
  const firstOrigin = /Tributary is up: (http:\/\/[^/]+)\/v1/.exec(first)![1]!;
  t.equal(signInLinks().length, 1, "the footer has a sign-in link");
  t.match(signInLinks()[0]!.slice(firstOrigin.length), /^\/dashboard\/sign-in\/link\?token=[A-Za-z0-9]{43}$/);
  t.ok(signInLinks()[0]!.startsWith(firstOrigin), "on the gateway's address");
  const signIn = await fetch(signInLinks()[0]!, { redirect: "manual" });
  t.equal(signIn.status, 303, "it signs in");
  t.match(signIn.headers.get("set-cookie"), /^tributary_session=[A-Za-z0-9]{43};/);
  // The supervisor picked and logged the layout: the tiny test model is overhead-bound, so its
  // runners decode on one thread each (the test catalog sets neither replicas nor threads).
  t.match(layout?.models?.[TEST_MODEL], { threads: 1, class: "overhead-bound" }, "the runner layout was logged");

  // A process that dies is started again by the supervisor.
  t.equal(gatewayPids.length, 1);
  process.kill(gatewayPids[0]!, "SIGKILL");
  const baseURL = /Tributary is up: (\S+)/.exec(await banner(2))![1]!;
  t.equal(gatewayPids.length, 2, "a new gateway process started after the first was killed");
  t.equal(signInLinks().length, 2, "the new gateway's banner has a link too");
  t.ok(signInLinks()[1]!.startsWith(baseURL.replace(/\/v1$/, "/dashboard/sign-in/link?token=")), "on the new gateway's port");
  t.not(signInLinks()[1], signInLinks()[0], "a fresh one");
  t.not(gatewayPids[1], gatewayPids[0]);
  const client = new OpenAI({ apiKey: key, baseURL, maxRetries: 0 });
  // The runner may still be loading: retry until it serves.
  for (let i = 0; i < 50; i++) {
    const ok = await client.chat.completions.create({ model: TEST_MODEL, messages, max_tokens: 1 }).then(() => true, () => false);
    if (ok) break;
    await new Promise((r) => setTimeout(r, 200));
  }

  const stream = await client.chat.completions.create({ model: TEST_MODEL, messages, max_tokens: IN_FLIGHT_TOKENS, stream: true });
  let text = "";
  let finish: string | null = null;
  let signalled = false;
  const exit = new Promise<number | null>((resolve) => cli.once("exit", (code) => resolve(code)));
  for await (const chunk of stream) {
    if (!signalled) {
      signalled = true;
      cli.kill("SIGINT");
    }
    text += chunk.choices[0]?.delta.content ?? "";
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  const streamEndedAt = Date.now();
  t.equal(finish, "length", "the in-flight stream ran to its end");
  t.ok(text.length > 100);
  t.equal(await exit, 0, "the supervisor exits cleanly");
  t.ok(gatewayDrainingAt !== undefined && gatewayDrainingAt < streamEndedAt, "the gateway was draining while the stream ran");
  t.ok(pids.size >= 3, `saw the pids of nats-server, runner and gateway (${[...pids].join(", ")})`);
  for (const pid of pids) t.notOk(alive(pid), `process ${pid} is gone`);
});

t.test("a gateway whose drain timeout passes ends open streams with a clear error", async (t) => {
  const nats = await startNats();
  t.teardown(() => nats.stop());
  const runner = await startRunner(nats.url, { TRIBUTARY_MODEL_OVERRIDES: overrides });
  t.teardown(() => runner.kill());
  // No actor host in this stack, so no budget owners: rate limits off.
  const gateway = await startGateway(nats.url, { TRIBUTARY_MODEL_OVERRIDES: overrides, TRIBUTARY_DRAIN_TIMEOUT_MS: "200", TRIBUTARY_RATE_LIMITS: "off" });
  t.teardown(() => gateway.kill());
  const client = new OpenAI({ apiKey: TEST_KEY, baseURL: gateway.baseURL, maxRetries: 0 });
  const stream = await client.chat.completions.create({ model: TEST_MODEL, messages, max_tokens: 1200, stream: true });
  const exited = gateway.exited;
  let err: unknown;
  try {
    let first = true;
    for await (const _ of stream) {
      if (first) {
        first = false;
        gateway.child.kill("SIGTERM");
      }
    }
  } catch (e) {
    err = e;
  }
  t.ok(err instanceof OpenAI.APIError, "the client sees an error event");
  t.match((err as Error).message, /shutting down/);
  t.equal(await exited, 0, "the gateway exits");
});

t.test("a draining gateway refuses a request on a connection kept open, with a 503 that closes it, and finishes its stream", async (t) => {
  const nats = await startNats();
  t.teardown(() => nats.stop());
  // Sim tokens at 50/s: the stream in flight keeps the drain going for a few seconds.
  const sim = { TRIBUTARY_ENGINE: "sim", TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({ [TEST_MODEL]: { sim: { tokens_per_second: 50, first_token_latency_ms: 10 } } }) };
  const runner = await startRunner(nats.url, sim);
  t.teardown(() => runner.kill());
  const gateway = await startGateway(nats.url, { ...sim, TRIBUTARY_RATE_LIMITS: "off" });
  t.teardown(() => gateway.kill());
  const client = new OpenAI({ apiKey: TEST_KEY, baseURL: gateway.baseURL, maxRetries: 0 });
  const stream = await client.chat.completions.create({ model: TEST_MODEL, messages, max_tokens: 150, stream: true });
  const finished = (async () => {
    let finish: string | null = null;
    for await (const chunk of stream) finish = chunk.choices[0]?.finish_reason ?? finish;
    return finish;
  })();
  // Open before the drain (as a client's kept-alive connection is); its request comes during it.
  const kept = await rawConnect({ port: gateway.port });
  gateway.child.kill("SIGTERM");
  await gateway.waitForLog((r) => r.msg === "draining");
  await rawWrite(kept, requestHead("GET", "/v1/models", { authorization: `Bearer ${TEST_KEY}` }));
  const refused = await kept.response;
  t.equal(refused?.status, 503, "refused: another gateway takes it");
  t.match(refused?.json().error.message, /shutting down/);
  t.equal(refused?.headers["connection"], "close");
  t.equal(await kept.ended, "closed", "and the connection is closed");
  t.equal(await finished, "length", "the stream in flight runs to its end");
  t.equal(await gateway.exited, 0, "the gateway exits");
});

t.test("a runner asked to stop finishes its in-flight request first", async (t) => {
  const nats = await startNats();
  t.teardown(() => nats.stop());
  const runner = await startRunner(nats.url, { TRIBUTARY_MODEL_OVERRIDES: overrides });
  t.teardown(() => runner.kill());
  const gateway = await startGateway(nats.url, { TRIBUTARY_MODEL_OVERRIDES: overrides, TRIBUTARY_RATE_LIMITS: "off" });
  t.teardown(() => gateway.kill());
  const client = new OpenAI({ apiKey: TEST_KEY, baseURL: gateway.baseURL, maxRetries: 0 });
  const stream = await client.chat.completions.create({ model: TEST_MODEL, messages, max_tokens: IN_FLIGHT_TOKENS, stream: true });
  let finish: string | null = null;
  let first = true;
  for await (const chunk of stream) {
    if (first) {
      first = false;
      runner.child.kill("SIGTERM");
    }
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  const streamEndedAt = Date.now();
  t.equal(finish, "length");
  t.equal(await runner.exited, 0, "the runner exits after its drain");
  const draining = runner.logs.find((r) => r.msg === "draining");
  t.ok(draining && Date.parse(String(draining.t)) < streamEndedAt, "the runner was draining while the stream ran");
  const after = await client.chat.completions.create({ model: TEST_MODEL, messages, max_tokens: 2 }).catch((e: unknown) => e);
  t.ok(after instanceof OpenAI.APIError && after.status === 503, "with no runner left, a clear 503");
});
