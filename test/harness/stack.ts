import OpenAI from "openai";
import type { Test } from "tap";
import { startActorHost, startGateway, startNats, startRunner, startSandboxHost, TEST_KEY, type ActorHost, type Gateway, type NatsServer, type Runner, type SandboxHost } from "./processes.js";

export interface Stack {
  nats: NatsServer;
  actors: ActorHost;
  runners: Runner[];
  gateway: Gateway;
  sandboxHosts: SandboxHost[];
  client: OpenAI;
  /** Raw HTTP against the gateway with the test key (unless headers override it). */
  fetch(path: string, init?: RequestInit): Promise<Response>;
}

export interface StackOptions {
  runners?: number;
  /** Environment for every process (catalog overrides must be seen by gateway and runners alike). */
  env?: NodeJS.ProcessEnv;
  /** Extra environment for runners (slots, queue limit, engine...). */
  runnerEnv?: NodeJS.ProcessEnv;
  gatewayEnv?: NodeJS.ProcessEnv;
  actorsEnv?: NodeJS.ProcessEnv;
  /** Sandbox hosts to start (none by default). */
  sandboxHosts?: number;
  sandboxHostEnv?: NodeJS.ProcessEnv;
}

/** nats-server + runner process(es) with the real tiny model + a gateway, torn down after the test. */
export async function startStack(t: Test, options: StackOptions = {}): Promise<Stack> {
  const nats = await startNats();
  t.teardown(() => nats.stop());
  const actors = await startActorHost(nats.url, { ...options.env, ...options.actorsEnv });
  t.teardown(() => actors.kill());
  const runners = await Promise.all(
    Array.from({ length: options.runners ?? 1 }, () => startRunner(nats.url, { ...options.env, ...options.runnerEnv })),
  );
  for (const r of runners) t.teardown(() => r.kill());
  // Sandbox hosts start beside the gateway (a create waits briefly for a first heartbeat).
  const [gateway, ...sandboxHosts] = await Promise.all([
    startGateway(nats.url, { ...options.env, ...options.gatewayEnv }),
    ...Array.from({ length: options.sandboxHosts ?? 0 }, () => startSandboxHost(nats.url, { ...options.env, ...options.sandboxHostEnv })),
  ] as const);
  t.teardown(() => gateway.kill());
  for (const h of sandboxHosts) t.teardown(() => h.kill());
  // Ready means the gateway has heard its runners' heartbeats: before the first one it reaches
  // them only through the queue group, and anything that reads its runner view would race it.
  await waitForReadyRunners(gateway.url, runners.length);
  const client = new OpenAI({ apiKey: TEST_KEY, baseURL: gateway.baseURL, maxRetries: 0 });
  return {
    nats,
    actors,
    runners,
    gateway,
    sandboxHosts,
    client,
    fetch: (path, init = {}) =>
      fetch(gateway.url + path, {
        ...init,
        headers: { authorization: `Bearer ${TEST_KEY}`, "content-type": "application/json", ...(init.headers as Record<string, string>) },
      }),
  };
}

/** Waits until the gateway's /readyz counts `count` ready runners (a bench's big model loads longer). */
export async function waitForReadyRunners(gatewayUrl: string, count: number, timeoutMs = 15_000): Promise<void> {
  if (count === 0) return;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const res = await fetch(gatewayUrl + "/readyz").catch(() => undefined);
    const body = res ? ((await res.json().catch(() => ({}))) as { ready_runners?: number }) : {};
    if ((body.ready_runners ?? 0) >= count) return;
    if (Date.now() > deadline) throw new Error(`the gateway heard ${body.ready_runners ?? 0} of ${count} runners within ${timeoutMs / 1000} s`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Reads an SSE response body into its `data:` payloads. */
export async function readSse(res: Response): Promise<string[]> {
  const text = await res.text();
  return text
    .split("\n\n")
    .map((e) => e.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n"))
    .filter((d) => d.length > 0);
}
