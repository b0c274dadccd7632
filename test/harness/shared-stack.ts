import { spawn } from "node:child_process";
import { closeSync, mkdirSync, openSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Test } from "tap";
import { childEnv, connectAs, registerCredentials, startGateway, testIdentities, type Gateway } from "./processes.js";
import { catalogModels, createProject, createTenant, startStack, tenantOf, testAdmin, type StackOptions, type TestStack } from "./stack.js";
import { bystanderCatalog } from "./bystander.js";

/**
 * A sim model far faster than any client reads (50,000 tokens/s, 100,000 out), for tests of the
 * gateway under backpressure, with rate limits well above their runs.
 */
export const SIM_FAST_MODEL = "test/sim-fast";

// One stack for the whole test run, for the files that need only its defaults: each file talks to
// it as a tenant of its own (an organization, its project and a key), so files see nothing of each
// other's objects, budgets or usage. The first file that asks starts it, through a small daemon
// (shared-stack-daemon.ts) that outlives that file and ends the stack when the run's owner (the
// test script, or tap) exits.
// Outside a tap run (a file run alone with node), the file starts the same stack for itself.

/** The master key the shared stack's secrets are envelope-encrypted under (not one made in $TRIBUTARY_HOME). */
export const SHARED_SECRETS_KEY = "k1:" + Buffer.alloc(32, 11).toString("base64");

/** The shared stack's processes and settings: what a file on it may count on. */
export function sharedStackOptions(): StackOptions {
  return {
    runners: 1,
    sandboxHosts: 1,
    env: {
      // The test catalog, the sim bystander model (for streams that must outlast a case) and a fast sim model.
      TRIBUTARY_CATALOG: bystanderCatalog([{
        id: SIM_FAST_MODEL,
        engine: "sim",
        context_length: 200_000,
        max_output_tokens: 100_000,
        slots: 8,
        queue_limit: 16,
        sim: { tokens_per_second: 50_000, first_token_latency_ms: 0 },
        rate_limits: { requests_per_minute: 1000, tokens_per_minute: 10_000_000 },
      }]),
      // Traces, usage and last-used times flushed quickly, so that a file reads its own at once.
      TRIBUTARY_TRACE_FLUSH_MS: "20",
      TRIBUTARY_USAGE_FLUSH_MS: "50",
      TRIBUTARY_KEY_USAGE_FLUSH_MS: "200",
      TRIBUTARY_FILE_SWEEP_MS: "500",
      TRIBUTARY_SECRETS_KEY: SHARED_SECRETS_KEY,
    },
  };
}

/** What the daemon writes once the stack is ready: how a test file reaches it. */
export interface SharedStackAddress {
  natsUrl: string;
  /** The nats-server's store directory, where the identities' seeds are. */
  natsStoreDir: string;
  gatewayUrl: string;
  gatewayPort: number;
  adminAddr: string;
  catalogPath: string;
}

const READY_FILE = "stack.json";
const FAILED_FILE = "failed";
/** Starting a stack on a busy 2-CPU machine, with other files starting theirs. */
const START_TIMEOUT_MS = 180_000;

/** The directory of the shared stack of the run whose owner is `ownerPid`. */
export const sharedStackDir = (ownerPid: number) => join(tmpdir(), `tributary-shared-stack-${ownerPid}`);

/**
 * The process the shared stack lives as long as: the test script (scripts/test.mjs) that runs
 * tap, else the tap runner (every test file's parent); none outside a tap run, or when
 * TRIBUTARY_TEST_SHARED_STACK=off asks every file for a stack of its own.
 */
function sharedStackOwner(): number | undefined {
  if (process.env.TRIBUTARY_TEST_SHARED_STACK === "off") return undefined;
  const owner = Number(process.env.TRIBUTARY_TEST_STACK_OWNER);
  if (Number.isInteger(owner) && owner > 0) return owner;
  return process.env.TAP === "1" ? process.ppid : undefined;
}

/**
 * Starts the shared stack of the run whose owner is `ownerPid`, unless a file of the run (or the
 * test script, which starts it before the files that need it) did already. Returns at once.
 */
export function startSharedStack(ownerPid: number): void {
  const dir = sharedStackDir(ownerPid);
  try {
    mkdirSync(dir); // atomic: one of the run wins and starts the daemon
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "EEXIST") return;
    throw err;
  }
  const log = openSync(join(dir, "processes.log"), "a");
  const daemon = spawn(process.execPath, [fileURLToPath(new URL("./shared-stack-daemon.js", import.meta.url)), dir, String(ownerPid)], {
    env: childEnv({ TEST_VERBOSE: "1" }),
    detached: true,
    stdio: ["ignore", log, log],
  });
  daemon.unref();
  closeSync(log);
}

/** The run's shared stack, started if need be, once it is ready. */
async function reachSharedStack(ownerPid: number): Promise<SharedStackAddress> {
  startSharedStack(ownerPid);
  const dir = sharedStackDir(ownerPid);
  const deadline = Date.now() + START_TIMEOUT_MS;
  for (;;) {
    const ready = readIfThere(join(dir, READY_FILE));
    if (ready !== undefined) return JSON.parse(ready) as SharedStackAddress;
    const failed = readIfThere(join(dir, FAILED_FILE));
    if (failed !== undefined) throw new Error(`the shared test stack did not start:\n${failed}`);
    if (Date.now() > deadline) throw new Error(`the shared test stack was not ready within ${START_TIMEOUT_MS / 1000} s (its output: ${join(dir, "processes.log")})`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function readIfThere(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
}

/** The daemon's side: the ready file, written whole (a reader never sees half of it). */
export const readyFile = (dir: string) => join(dir, READY_FILE);
export const failedFile = (dir: string) => join(dir, FAILED_FILE);

/**
 * The run's shared stack (sharedStackOptions), with a fresh tenant for this file, named after it.
 * A file that kills, restarts or reconfigures processes, or reads their logs, uses startStack.
 */
export async function sharedStack(t: Test): Promise<TestStack> {
  const ownerPid = sharedStackOwner();
  const name = basename(process.argv[1] ?? "test", ".js");
  if (ownerPid === undefined) {
    const own = await startStack(t, sharedStackOptions());
    const tenant = await own.tenant(name);
    return { ...own, ...tenant, project: (other) => createProject(own.admin, own.gateway.url, tenant.organizationId, other) };
  }
  const address = await reachSharedStack(ownerPid);
  const identities = testIdentities(address.natsStoreDir);
  registerCredentials(address.natsUrl, identities.env);
  const admin = testAdmin(t, address.adminAddr);
  const gateway = { url: address.gatewayUrl, port: address.gatewayPort, baseURL: `${address.gatewayUrl}/v1` };
  const tenant = await createTenant(admin, gateway.url, name);
  return {
    ...tenant,
    gateway,
    nats: { url: address.natsUrl, env: identities.env, connect: (identity) => connectAs(address.natsUrl, identity) },
    actors: { adminAddr: address.adminAddr },
    models: catalogModels(address.catalogPath),
    admin,
    tenant: (other) => createTenant(admin, gateway.url, other),
    project: (other) => createProject(admin, gateway.url, tenant.organizationId, other),
  };
}

/**
 * The shared stack behind a gateway of this file's own, started with `gatewayEnv` over the shared
 * settings: for a file that needs gateway settings of its own (limits, bounds, timeouts) or reads
 * the gateway's logs, and nothing else of its own. Its tenant is fresh, as on the shared stack.
 */
export async function sharedStackWithGateway(t: Test, gatewayEnv: NodeJS.ProcessEnv): Promise<TestStack & { gateway: Gateway }> {
  const shared = await sharedStack(t);
  const gateway = await startGateway(shared.nats.url, { ...sharedStackOptions().env, ...gatewayEnv });
  t.teardown(() => gateway.kill());
  const { admin, organizationId } = shared;
  return {
    ...shared,
    ...tenantOf(gateway.url, shared),
    gateway,
    tenant: (name) => createTenant(admin, gateway.url, name),
    project: (name) => createProject(admin, gateway.url, organizationId, name),
  };
}
