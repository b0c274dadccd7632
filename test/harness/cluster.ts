import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { jetstreamManager } from "@nats-io/jetstream";
import OpenAI from "openai";
import { natsServerConfig } from "../../cli/embedded-nats.js";
import type { NatsIdentity } from "../../lib/nats/permissions.js";
import {
  connectAs,
  registerCredentials,
  startActorHost,
  startGateway,
  startProcess,
  startRunner,
  startSandboxHost,
  testIdentities,
  untilReady,
  TEST_KEY,
  type ActorHost,
  type Gateway,
  type Placement,
  type Proc,
  type Runner,
  type SandboxHost,
} from "./processes.js";

// A Tributary cluster on one machine: a NATS JetStream cluster of three nodes on loopback
// (routes between them, each node with its own store, the identities and permissions of a real
// deployment), and gateways, actor hosts and runners each connected to its own node (it learns
// the others from the server and moves to one when its node dies). Every bucket and stream is
// created with TRIBUTARY_JS_REPLICAS=3. Used by test/e2e/cluster/ and bench/cluster.ts.

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as { port: number }).port;
      server.close(() => resolve(port));
    });
  });
}

export interface NatsNode extends Proc {
  name: string;
  url: string;
  /** Starts this node again (same ports, same store) after a kill or stop. */
  restart(): Promise<void>;
}

export interface NatsCluster {
  nodes: NatsNode[];
  /** Every node's URL, comma separated (for clients that may use any). */
  url: string;
  env(identity: NatsIdentity): Record<string, string>;
  stop(): Promise<void>;
}

/** Where one node of a NATS cluster runs and how it is reached. */
export interface NatsNodeLayout {
  /** The address it listens on (clients and routes). */
  host: string;
  clientPort: number;
  routePort: number;
  /** The command prefix it runs under (a namespace host). */
  exec?: readonly string[];
  /** host:port its peers reach its routes at, when not host:routePort (a link proxy in front of it); also advertised. */
  routeVia?: string;
}

export interface NatsClusterOptions {
  /** Node i's layout (default: loopback, free ports). */
  layout?: (i: number) => NatsNodeLayout | Promise<NatsNodeLayout>;
  /** Server pings of clients and routes (nats-server's default: 2 min, 2 outstanding). */
  ping?: { intervalSeconds: number; maxOutstanding: number };
}

const loopbackNode = async (): Promise<NatsNodeLayout> => ({ host: "127.0.0.1", clientPort: await freePort(), routePort: await freePort() });

/** Starts `size` nats-server nodes routed to each other and waits until JetStream can place a stream on every node. */
export async function startNatsCluster(size = 3, options: NatsClusterOptions = {}): Promise<NatsCluster> {
  const dir = mkdtempSync(join(tmpdir(), "tributary-nats-cluster-"));
  const identities = testIdentities(dir);
  const layouts = await Promise.all(Array.from({ length: size }, (_, i) => (options.layout ?? loopbackNode)(i)));
  const routeAddress = (l: NatsNodeLayout) => l.routeVia ?? `${l.host}:${l.routePort}`;
  const routes = layouts.map((l) => `nats-route://${routeAddress(l)}`);
  const url = layouts.map((l) => `nats://${l.host}:${l.clientPort}`).join(",");
  registerCredentials(url, identities.env);
  const nodes: NatsNode[] = [];
  for (let i = 0; i < size; i++) {
    const name = `n${i + 1}`;
    const layout = layouts[i]!;
    const config = join(dir, `${name}.conf`);
    writeFileSync(
      config,
      natsServerConfig(layout.clientPort, join(dir, name, "jetstream"), {
        serverName: name,
        host: layout.host,
        authorization: identities.authorization,
        cluster: { name: "tributary-test", port: layout.routePort, routes: routes.filter((_, j) => j !== i), advertise: layout.routeVia },
        // As k8s/nats.yaml has it: a node in lame duck hands its clients on after 5 s, not 10.
        lameDuck: { durationSeconds: 30, graceSeconds: 5 },
        ping: options.ping,
      }),
    );
    const nodeUrl = `nats://${layout.host}:${layout.clientPort}`;
    registerCredentials(nodeUrl, identities.env);
    const start = async () => {
      const proc = startProcess("nats-server", ["-c", config], {}, `nats ${name}`, undefined, { exec: layout.exec });
      // A node that does not come up is killed, and its output says why (untilReady).
      await untilReady(proc, `nats-server ${name}`, (r) => typeof r.msg === "string" && r.msg.includes("Server is ready"));
      return proc;
    };
    const node = { name, url: nodeUrl } as NatsNode;
    Object.assign(node, await start());
    node.restart = async () => {
      Object.assign(node, await start(), { name, url: nodeUrl, restart: node.restart });
    };
    nodes.push(node);
  }
  await waitForJetStream(url, size);
  return {
    nodes,
    url,
    env: identities.env,
    async stop() {
      await Promise.all(nodes.map((n) => n.stop(10_000)));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Waits until the cluster can place a stream on all `replicas` nodes: a meta leader alone is not
 * enough (a node that has not yet reported to it gives "no suitable peers for placement"). Mostly
 * a few seconds; now and then a node's first report does not arrive and the next comes half a
 * minute later, hence the long deadline.
 */
async function waitForJetStream(url: string, replicas: number, timeoutMs = 90_000): Promise<void> {
  const nc = await connectAs(url, "admin");
  const probe = `readiness_probe_${process.pid}`;
  try {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      try {
        const jsm = await jetstreamManager(nc, { timeout: 2_000 });
        await jsm.streams.add({ name: probe, subjects: [`_probe.${process.pid}`], num_replicas: replicas });
        await jsm.streams.delete(probe);
        return;
      } catch (err) {
        if (Date.now() > deadline) throw new Error(`JetStream cluster not ready: ${String(err)}`);
        await new Promise((r) => setTimeout(r, 250));
      }
    }
  } finally {
    await nc.close();
  }
}

/**
 * Whether, asked through the node at `nodeUrl`, every stream has a leader and every replica of it
 * is current: a node back from a partition has rejoined and caught up (until then JetStream may
 * still elect leaders, and requests fail for a moment). False while it cannot tell.
 */
export async function jetStreamSettled(nodeUrl: string): Promise<boolean> {
  let nc: Awaited<ReturnType<typeof connectAs>> | undefined;
  try {
    nc = await connectAs(nodeUrl);
    const jsm = await jetstreamManager(nc, { timeout: 2_000 });
    for await (const info of jsm.streams.list()) {
      const cluster = info.cluster;
      if (!cluster?.leader) return false;
      if ((cluster.replicas ?? []).some((r) => !r.current || r.offline)) return false;
    }
    return true;
  } catch {
    return false;
  } finally {
    await nc?.close().catch(() => {});
  }
}

export interface ClusterStack {
  nats: NatsCluster;
  actors: ActorHost[];
  runners: Runner[];
  gateways: Gateway[];
  /** Sandbox hosts, which also host app instances (none unless `appHosts`). */
  appHosts: SandboxHost[];
  /** One client per gateway, as a load balancer would spread them. */
  clients: OpenAI[];
  /** Starts the i-th process of a kind again (after a kill), on the same NATS node; a gateway gets a new port and client. */
  restart(kind: "gateway" | "actors" | "runner", index: number): Promise<void>;
  stop(): Promise<void>;
}

export interface ClusterOptions {
  gateways?: number;
  actorHosts?: number;
  runners?: number;
  /** Sandbox/app hosts (real bubblewrap and cgroups; default none). */
  appHosts?: number;
  /** Environment of every process (catalog overrides, timeouts). */
  env?: NodeJS.ProcessEnv;
  /** More environment of the app hosts (their capacity). */
  appHostEnv?: NodeJS.ProcessEnv;
}

/**
 * The cluster: NATS nodes, then actor hosts, runners and gateways, the i-th process of each
 * kind on node i (mod the node count), all with TRIBUTARY_JS_REPLICAS=3.
 */
export async function startClusterStack(options: ClusterOptions = {}): Promise<ClusterStack> {
  const nats = await startNatsCluster(3);
  const nodeUrl = (i: number) => nats.nodes[i % nats.nodes.length]!.url;
  return startClusterProcesses(nats, options, { natsUrl: (kind, i) => nodeUrl(i + nodeOffset[kind]), placement: () => ({}) });
}

/** Which NATS node the i-th process of a kind connects to: node i + offset (mod the node count), so that kinds spread over nodes. */
export const nodeOffset = { actors: 0, runner: 1, gateway: 2, apps: 1 } as const;

export type ProcessKind = keyof typeof nodeOffset;

/** Where the processes of a cluster stack go: their NATS URL and placement (a namespace host, the gateway's listen address). */
export interface ProcessLayout {
  natsUrl(kind: ProcessKind, index: number): string;
  placement(kind: ProcessKind, index: number): Placement & { host?: string };
}

/** The processes of a cluster stack on a running NATS cluster, started in an order that does not overwhelm it. */
export async function startClusterProcesses(nats: NatsCluster, options: ClusterOptions, layout: ProcessLayout): Promise<ClusterStack> {
  const env = { TRIBUTARY_JS_REPLICAS: "3", ...options.env };
  const start = {
    actors: (i: number) => startActorHost(layout.natsUrl("actors", i), env, undefined, layout.placement("actors", i)),
    runner: (i: number) => startRunner(layout.natsUrl("runner", i), env, undefined, layout.placement("runner", i)),
    gateway: (i: number) => startGateway(layout.natsUrl("gateway", i), env, undefined, layout.placement("gateway", i)),
    apps: (i: number) => startSandboxHost(layout.natsUrl("apps", i), { ...env, ...options.appHostEnv }, layout.placement("apps", i)),
  };
  const actors: ActorHost[] = [];
  // One actor host first: it creates the buckets and streams; the others bind to them. Not all
  // at once: every process starting on a 3-replica cluster at the same time, on 2 CPUs, times out
  // start-up requests to JetStream, which they then wait out with backoff (lib/nats/setup-retry.ts).
  for (let i = 0; i < (options.actorHosts ?? 2); i++) actors.push(await start.actors(i));
  const runners = await Promise.all(Array.from({ length: options.runners ?? 3 }, (_, i) => start.runner(i)));
  const gateways: Gateway[] = [];
  for (let i = 0; i < (options.gateways ?? 2); i++) gateways.push(await start.gateway(i));
  const appHosts = await Promise.all(Array.from({ length: options.appHosts ?? 0 }, (_, i) => start.apps(i)));
  // A request that hangs (a gateway waiting on a server that died) fails after 20 s, and is then retried elsewhere.
  const clientOf = (g: Gateway) => new OpenAI({ apiKey: TEST_KEY, baseURL: g.baseURL, maxRetries: 0, timeout: 20_000 });
  const clients = gateways.map(clientOf);
  return {
    nats,
    actors,
    runners,
    gateways,
    appHosts,
    clients,
    async restart(kind, i) {
      if (kind === "gateway") {
        gateways[i] = await start.gateway(i);
        clients[i] = clientOf(gateways[i]!);
      } else if (kind === "actors") actors[i] = await start.actors(i);
      else runners[i] = await start.runner(i);
    },
    async stop() {
      // App hosts stop their instances and cgroups first (a kill would leave them to the next run).
      await Promise.all(appHosts.map((h) => h.stop()));
      await Promise.all([...gateways, ...runners, ...actors].map((p) => p.kill()));
      await nats.stop();
    },
  };
}
