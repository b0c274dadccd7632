import { CLEAN_LINK, LinkProxy, type LinkShape } from "./link-proxy.js";
import { NetnsNetwork, type NetnsHost } from "./netns.js";
import { startClusterProcesses, startNatsCluster, nodeOffset, type ClusterOptions, type ClusterStack, type ProcessKind } from "./cluster.js";
import { registerCredentials, identityEnv } from "./processes.js";

// The cluster of test/harness/cluster.ts with every process on a host of its own (a network
// namespace, test/harness/netns.ts): 3 NATS nodes, gateways, actor hosts and runners. Faults of
// the network between them: a host cut from the switch (silent loss, healed later), and slow,
// lossy links (test/harness/link-proxy.ts, in the test process on its observer address):
//
//   - NATS <-> NATS: every route to node j goes through node j's route proxy (its peers' routes
//     point there, and it advertises it), so each route crosses exactly one proxy;
//   - gateway <-> NATS: gateway i reaches its node through a proxy of its own.
//
// Runners and actor hosts connect to their node directly. A gateway also has a front link to the
// test process (its clients), which a cut of its host leaves alone. App hosts (sandbox hosts: real
// bubblewrap and cgroups; only their network is the namespace's) reach their node directly too;
// their instances' traffic comes over NATS.
//
// Servers ping clients and routes every 5 s and drop them after 2 unanswered (nats-server's
// default is 2 min, 2): a cut client's subscriptions linger on the cluster until then, so the
// default would stretch every partition to minutes. Override with `natsPing`.

const CLIENT_PORT = 4222;
const ROUTE_PORT = 6222;

export type LinkSpec = "gateways-nats" | "nats-nats" | "all";

export interface NetnsClusterStack extends ClusterStack {
  network: NetnsNetwork;
  /** The hosts by kind (index as in nats.nodes, gateways, actors, runners). */
  hosts: Record<"nats" | ProcessKind, NetnsHost[]>;
  /** The link proxies, each named by what it links (`n1 routes`, `g1<->n3`). */
  links: LinkProxy[];
  /** Cuts a host (by name, e.g. "n1", "g2", "a1", "r3", or the host) from every other. */
  cut(host: NetnsHost | string): void;
  heal(host: NetnsHost | string): void;
  /**
   * The index of the runner that sent the most bytes over `windowMs` (the one streaming the most
   * tokens now): a runner to cut mid-stream, whichever the gateways routed the streams to.
   */
  busiestRunner(windowMs?: number): Promise<number>;
  /** Sets the round trip and loss of a group of links (CLEAN_LINK restores them). */
  slow(spec: LinkSpec, shape: LinkShape): void;
}

export interface NetnsClusterOptions extends ClusterOptions {
  natsPing?: { intervalSeconds: number; maxOutstanding: number };
}

const hostName: Record<ProcessKind, string> = { actors: "a", runner: "r", gateway: "g", apps: "h" };

export async function startNetnsClusterStack(options: NetnsClusterOptions = {}): Promise<NetnsClusterStack> {
  const network = NetnsNetwork.create();
  const links: LinkProxy[] = [];
  const counts: Record<ProcessKind, number> = { actors: options.actorHosts ?? 2, runner: options.runners ?? 3, gateway: options.gateways ?? 2, apps: options.appHosts ?? 0 };
  let stack: ClusterStack | undefined;
  try {
    const natsHosts = [1, 2, 3].map((i) => network.addHost(`n${i}`));
    const hosts = { nats: natsHosts } as NetnsClusterStack["hosts"];
    for (const kind of Object.keys(counts) as ProcessKind[]) hosts[kind] = Array.from({ length: counts[kind] }, (_, i) => network.addHost(`${hostName[kind]}${i + 1}`));
    const fronts = hosts.gateway.map((h) => network.addFront(h));
    const observer = network.observerAddress;
    for (const [j, h] of natsHosts.entries()) links.push(await LinkProxy.start(`n${j + 1} routes`, observer, { host: h.address, port: ROUTE_PORT }));
    const nats = await startNatsCluster(3, {
      layout: (i) => ({ host: natsHosts[i]!.address, clientPort: CLIENT_PORT, routePort: ROUTE_PORT, exec: natsHosts[i]!.exec, routeVia: `${observer}:${links[i]!.port}` }),
      ping: options.natsPing ?? { intervalSeconds: 5, maxOutstanding: 2 },
    });
    const nodeOf = (kind: ProcessKind, i: number) => (i + nodeOffset[kind]) % natsHosts.length;
    const gatewayUrls: string[] = [];
    for (let i = 0; i < counts.gateway; i++) {
      const node = nodeOf("gateway", i);
      const proxy = await LinkProxy.start(`g${i + 1}<->n${node + 1}`, observer, { host: natsHosts[node]!.address, port: CLIENT_PORT });
      links.push(proxy);
      const url = `nats://${observer}:${proxy.port}`;
      // The proxy's URL has the credentials of the node behind it.
      registerCredentials(url, (identity) => identityEnv(nats.nodes[node]!.url, identity));
      gatewayUrls.push(url);
    }
    stack = await startClusterProcesses(nats, options, {
      natsUrl: (kind, i) => (kind === "gateway" ? gatewayUrls[i]! : nats.nodes[nodeOf(kind, i)]!.url),
      placement: (kind, i) => ({ exec: hosts[kind][i]!.exec, host: kind === "gateway" ? fronts[i]!.hostAddress : undefined }),
    });
    const stopProcesses = stack.stop;
    let stopped = false;
    return {
      ...stack,
      network,
      hosts,
      links,
      async busiestRunner(windowMs = 1_000) {
        const before = hosts.runner.map((h) => network.sentBytes(h));
        await new Promise((r) => setTimeout(r, windowMs));
        const sent = hosts.runner.map((h, i) => network.sentBytes(h) - before[i]!);
        return sent.indexOf(Math.max(...sent));
      },
      cut: (host) => network.cut(host),
      heal: (host) => network.heal(host),
      slow(spec, shape) {
        for (const link of links) {
          const isRoute = link.name.endsWith(" routes");
          if (spec === "all" || (spec === "nats-nats" && isRoute) || (spec === "gateways-nats" && !isRoute)) link.set(shape);
        }
      },
      async stop() {
        if (stopped) return;
        stopped = true;
        // Healed first, so that the processes' drains and the servers' shutdowns reach their peers.
        for (const link of links) link.set(CLEAN_LINK);
        for (const h of Object.values(hosts).flat())
          try {
            if (network.isCut(h)) network.heal(h);
          } catch {
            // The switch is gone (the processes are stopped all the same).
          }
        try {
          await stopProcesses();
        } finally {
          await Promise.all(links.map((l) => l.close()));
          network.destroy();
        }
      },
    };
  } catch (err) {
    // A stack that did not come up leaves nothing behind either.
    await stack?.stop().catch(() => {});
    await Promise.all(links.map((l) => l.close()));
    network.destroy();
    throw err;
  }
}
