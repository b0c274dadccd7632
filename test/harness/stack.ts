import OpenAI from "openai";
import type { Test } from "tap";
import type { NatsConnection } from "@nats-io/transport-node";
import { adminClient, type AdminApi } from "../../modules/admin-api/mod.js";
import { loadCatalog } from "../../modules/catalog/mod.js";
import type { NatsIdentity } from "../../lib/nats/permissions.js";
import {
  startActorHost,
  startGateway,
  startNats,
  startRunner,
  startSandboxHost,
  TEST_ADMIN_TOKEN,
  TEST_KEY,
  testCatalog,
  type ActorHost,
  type Gateway,
  type NatsServer,
  type Runner,
  type SandboxHost,
} from "./processes.js";

/** An organization with a project and a project key, and clients that use the key. */
export interface Tenant {
  organizationId: string;
  projectId: string;
  key: string;
  client: OpenAI;
  /** Raw HTTP to the gateway with this tenant's key (unless headers override it) and a JSON content type. */
  fetch(path: string, init?: RequestInit): Promise<Response>;
}

/**
 * What a test file talks to: a gateway, NATS, the admin service, and a tenant of its own. The
 * run's shared stack (sharedStack) and a stack of the file's own (startStack) both are one.
 */
export interface TestStack extends Tenant {
  gateway: { url: string; port: number; baseURL: string };
  nats: { url: string; env(identity: NatsIdentity): Record<string, string>; connect(identity?: NatsIdentity): Promise<NatsConnection> };
  actors: { adminAddr: string };
  /** The ids of the models its catalog serves, in the catalog's order. */
  models: string[];
  /** The admin gRPC service (organizations, projects, keys, invitations), in process. */
  admin: AdminApi;
  /** A new organization (its default project and a project key) on this stack. */
  tenant(name: string): Promise<Tenant>;
  /** A new project of this stack's tenant organization, with a project key. */
  project(name: string): Promise<Tenant>;
}

/** A stack of the test file's own: its processes, to read their logs, kill or restart them. */
export interface Stack extends TestStack {
  nats: NatsServer;
  actors: ActorHost;
  runners: Runner[];
  gateway: Gateway;
  sandboxHosts: SandboxHost[];
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
  /** The JetStream store of a stack stopped before (restartStack): its state is this one's. */
  natsStoreDir?: string;
}

/** The tenant whose key is `key`, with clients for the gateway at `gatewayUrl`. */
export function tenantOf(gatewayUrl: string, ids: { organizationId: string; projectId: string; key: string }): Tenant {
  return {
    ...ids,
    client: new OpenAI({ apiKey: ids.key, baseURL: `${gatewayUrl}/v1`, maxRetries: 0 }),
    fetch: (path, init = {}) =>
      fetch(gatewayUrl + path, {
        ...init,
        headers: { authorization: `Bearer ${ids.key}`, "content-type": "application/json", ...(init.headers as Record<string, string>) },
      }),
  };
}

/** Makes an organization (its default project) and a key of that project through the admin service. */
export async function createTenant(admin: AdminApi, gatewayUrl: string, name: string): Promise<Tenant> {
  const { organization, project } = await admin.createOrganization({ name, projectName: "" });
  const { secret } = await admin.createApiKey({ projectId: project!.id, organizationId: "", name: "test" });
  return tenantOf(gatewayUrl, { organizationId: organization!.id, projectId: project!.id, key: secret });
}

/** The ids of the models the catalog at `path` declares (with the overrides of this process's environment). */
export const catalogModels = (path: string): string[] => loadCatalog(path).map((m) => m.id);

/** A new project named `name` in `organizationId`, and a key of it. */
export async function createProject(admin: AdminApi, gatewayUrl: string, organizationId: string, name: string): Promise<Tenant> {
  const project = await admin.createProject({ organizationId, name });
  const { secret } = await admin.createApiKey({ projectId: project.id, organizationId: "", name: "test" });
  return tenantOf(gatewayUrl, { organizationId, projectId: project.id, key: secret });
}

/** An email address no other test file of the run uses (accounts' emails are platform-wide). */
export const uniqueEmail = (who: string): string => `${who}.${process.pid}.${Math.random().toString(36).slice(2, 8)}@example.com`;

/** The admin service of `actors` as the tests' operator; closed at the end of the test. */
export function testAdmin(t: Test, adminAddr: string): AdminApi {
  const admin = adminClient(adminAddr, TEST_ADMIN_TOKEN);
  t.teardown(() => admin.close());
  return admin;
}

/** A stack's processes, started in order (nats-server first, gateway last) and each ready. */
export interface StackProcesses {
  nats: NatsServer;
  actors: ActorHost;
  runners: Runner[];
  gateway: Gateway;
  sandboxHosts: SandboxHost[];
}

/**
 * Starts nats-server, an actor host, runner process(es) with the real tiny model and a gateway
 * (and sandbox hosts when asked). `started` hears of each process as it starts, so that its
 * caller can stop it even when a later one fails to start.
 */
export async function launchStack(options: StackOptions, started: (stop: () => Promise<unknown>) => void): Promise<StackProcesses> {
  const nats = await startNats(undefined, { storeDir: options.natsStoreDir });
  started(() => nats.stop());
  const actors = await startActorHost(nats.url, { ...options.env, ...options.actorsEnv });
  started(() => actors.kill());
  const runners = await Promise.all(
    Array.from({ length: options.runners ?? 1 }, async () => {
      const runner = await startRunner(nats.url, { ...options.env, ...options.runnerEnv });
      started(() => runner.kill());
      return runner;
    }),
  );
  const gateway = await startGateway(nats.url, { ...options.env, ...options.gatewayEnv });
  started(() => gateway.kill());
  // Sandbox hosts are app hosts too: they forward their app instances' platform socket to the gateway.
  const sandboxHosts = await Promise.all(
    Array.from({ length: options.sandboxHosts ?? 0 }, async () => {
      const host = await startSandboxHost(nats.url, { TRIBUTARY_APP_PLATFORM_URL: gateway.url, ...options.env, ...options.sandboxHostEnv });
      started(() => host.kill());
      return host;
    }),
  );
  // Ready means the gateway has heard its runners' heartbeats: before the first one it reaches
  // them only through the queue group, and anything that reads its runner view would race it.
  await waitForReadyRunners(gateway.url, runners.length);
  return { nats, actors, runners, gateway, sandboxHosts };
}

/**
 * A stack of the test file's own (launchStack), torn down after the test. Its tenant is the local
 * project of the configured key (TEST_KEY). A file that needs only the defaults uses sharedStack.
 */
export async function startStack(t: Test, options: StackOptions = {}): Promise<Stack> {
  const processes = await launchStack(options, (stop) => t.teardown(stop));
  const admin = testAdmin(t, processes.actors.adminAddr);
  const gatewayUrl = processes.gateway.url;
  return {
    ...tenantOf(gatewayUrl, { organizationId: "org-local", projectId: "proj-local", key: TEST_KEY }),
    ...processes,
    models: catalogModels(options.gatewayEnv?.TRIBUTARY_CATALOG ?? options.env?.TRIBUTARY_CATALOG ?? testCatalog),
    admin,
    tenant: (name) => createTenant(admin, gatewayUrl, name),
    project: (name) => createProject(admin, gatewayUrl, "org-local", name),
  };
}

/**
 * A full restart of a stack of the test file's own: every process stops (SIGTERM, the gateway
 * first and nats-server last, as an operator stops a machine), then a stack with `options`
 * starts on the same JetStream store (new ports, new process ids: only the stored state is
 * the same).
 */
export async function restartStack(t: Test, stack: Stack, options: StackOptions = {}): Promise<Stack> {
  await stack.gateway.stop();
  await Promise.all(stack.sandboxHosts.map((h) => h.stop()));
  await Promise.all(stack.runners.map((r) => r.stop()));
  await stack.actors.stop();
  await stack.nats.stopKeepingStore();
  return startStack(t, { ...options, natsStoreDir: stack.nats.storeDir });
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
