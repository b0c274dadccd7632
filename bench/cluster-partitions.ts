// Network partitions and slow links, not crashes, on the cluster of test/harness/netns-cluster.ts
// (every process on a network-namespace host of its own: 3-node NATS JetStream cluster, R3; 2
// gateways, 2 actor hosts, 3 runners, sim engine, 1 app host). Per fault, under the steady mixed
// load of the cluster fault tests, beside a demand far above a tight rate-limit budget and an app
// driven to scale up, one host is cut from the others by silent loss, held past every timeout
// involved, then healed: requests, failed in the end, retried, lost, duplicated, admitted over the
// budget, app instances at most, recovery. Then
// slow, lossy links (gateways <-> NATS, NATS <-> NATS): streaming throughput and TTFT against a
// clean link in the same run. Writes bench/results/cluster-partitions.md.
//   node dist/bench/cluster-partitions.js [--only <fault name prefix>] [--hold-s <seconds>]
import { jetstreamManager } from "@nats-io/jetstream";
import { streams } from "../lib/nats/subjects.js";
import { jetStreamSettled } from "../test/harness/cluster.js";
import { clusterFaultEnv, MixedLoad, servedSince, trackedStream, type TrackedStream } from "../test/harness/cluster-load.js";
import { APP_MAX_INSTANCES, BudgetWatch, deployScalingApp, holdDemand, InstanceCensus, owners, ownersAppHostEnv, ownersEnv, TIGHT_LIMIT } from "../test/harness/cluster-owners.js";
import { until } from "../test/harness/until.js";
import { CLEAN_LINK, type LinkShape } from "../test/harness/link-proxy.js";
import { startNetnsClusterStack, type LinkSpec } from "../test/harness/netns-cluster.js";
import type { NetnsHost } from "../test/harness/netns.js";
import { netnsUnavailable } from "../test/harness/netns.js";
import { connectAs } from "../test/harness/processes.js";
import { fmt, percentile } from "./lib/stats.js";
import { machineLine, markdownTable, writeResults } from "./lib/table.js";

const unavailable = netnsUnavailable();
if (unavailable) {
  process.stderr.write(`cluster-partitions needs network namespaces: ${unavailable}\n`);
  process.exit(1);
}

const arg = (name: string) => (process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1] : undefined);
const onlyFault = arg("--only");
// Past every timeout a partition meets: the clients' pings (every 10 s, 2 outstanding: a silent
// server is noticed after 20-30 s), the servers' (every 5 s here, 2 outstanding: 10-15 s) and
// their 10 s write deadline, TRIBUTARY_RUNNER_TIMEOUT_MS (3 s), the batch and background ack
// waits (5 s), the budget lease round trip.
const HOLD_MS = Number(arg("--hold-s") ?? 40) * 1000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The longest time from `from` to `until` without one of `times` (an admission, an answer), in s. */
function longestGap(times: readonly number[], from: number, until: number): string {
  let gap = 0;
  let last = from;
  for (const at of [...times.filter((t) => t >= from && t <= until), until].sort((a, b) => a - b)) {
    gap = Math.max(gap, at - last);
    last = at;
  }
  return (gap / 1000).toFixed(1);
}

const cluster = await startNetnsClusterStack({ gateways: 2, actorHosts: 2, runners: 3, appHosts: 1, env: { ...clusterFaultEnv, ...ownersEnv() }, appHostEnv: ownersAppHostEnv });
const gatewayUrls = cluster.gateways.map((g) => g.url);
const notes: string[] = [];
const faultRows: Array<Array<string | number>> = [];
const slowRows: Array<Array<string | number>> = [];

async function admin<T>(fn: (nc: Awaited<ReturnType<typeof connectAs>>) => Promise<T>): Promise<T> {
  const nc = await connectAs(cluster.nats.url);
  try {
    return await fn(nc);
  } finally {
    await nc.close();
  }
}

const backgroundLeader = () => admin(async (nc) => (await (await jetstreamManager(nc)).streams.info(streams.responsesBackground)).cluster?.leader);

/** The actor host that owns `what` now (the tight model's budget, the app reconciler). */
async function ownerOf(what: "budget" | "reconciler", fault: string): Promise<number> {
  const now = await owners(cluster);
  notes.push(`${fault}: owners ${JSON.stringify(now)} (actor host index: budget of the tight model, app reconciler); cut a${Math.max(0, now[what]) + 1}.`);
  return Math.max(0, now[what]);
}

/** Distinct error-level log messages of every process since `at`, with their counts. */
function errorLogs(at: number): string {
  const counts = new Map<string, number>();
  const procs = [...cluster.gateways.map((p, i) => [`g${i + 1}`, p] as const), ...cluster.actors.map((p, i) => [`a${i + 1}`, p] as const), ...cluster.runners.map((p, i) => [`r${i + 1}`, p] as const)];
  for (const [name, p] of procs)
    for (const r of p.logs) {
      if (r.level !== "error" || Number(new Date(String(r.t))) < at) continue;
      const err = r.err as { name?: string; message?: string } | undefined;
      const key = `${name}: ${String(r.msg)} ${String(r.path ?? "").replace(/[0-9a-zA-Z_-]{16,}/g, "#")} (${err?.name ?? ""}: ${err?.message ?? ""})`;
      counts.set(key, (counts.get(key) ?? 0) + 1);
    }
  return [...counts.entries()].map(([k, n]) => `${n}x ${k}`).join("; ") || "none";
}

interface Fault {
  name: string;
  /** The host to cut (found when the fault starts: a leader, an owner). */
  host(): Promise<NetnsHost>;
  /** Streams to follow across the cut (a runner cut mid-stream). */
  midStream?: boolean;
}

const faults: Fault[] = [
  {
    name: "(a) NATS node cut from the other two (a minority; not the background stream's leader)",
    async host() {
      const leader = await backgroundLeader();
      const i = cluster.nats.nodes.findIndex((n) => n.name !== leader);
      notes.push(`(a): cut ${cluster.nats.nodes[i]!.name}; ${leader} led ${streams.responsesBackground}.`);
      return cluster.hosts.nats[i]!;
    },
  },
  {
    name: `(b) NATS node leading ${streams.responsesBackground}`,
    async host() {
      const leader = await backgroundLeader();
      const i = Math.max(0, cluster.nats.nodes.findIndex((n) => n.name === leader));
      notes.push(`(b): cut ${cluster.nats.nodes[i]!.name}, leader of ${streams.responsesBackground}.`);
      return cluster.hosts.nats[i]!;
    },
  },
  {
    name: "(c) runner cut mid-stream (the one streaming the most)",
    async host() {
      const i = await cluster.busiestRunner();
      notes.push(`(c): cut r${i + 1}.`);
      return cluster.hosts.runner[i]!;
    },
    midStream: true,
  },
  { name: "(d) gateway 1 cut from NATS (its clients stay connected)", host: async () => cluster.hosts.gateway[0]! },
  { name: "(e) actor host owning the tight rate-limit budget cut (alive)", host: async () => cluster.hosts.actors[await ownerOf("budget", "(e)")]! },
  { name: "(f) actor host owning the app reconciler cut (alive)", host: async () => cluster.hosts.actors[await ownerOf("reconciler", "(f)")]! },
  { name: "(g) the app host cut (alive; its instance unreachable)", host: async () => cluster.hosts.apps[0]! },
];

try {
  const appId = await deployScalingApp(gatewayUrls[0]!);
  notes.push(`App ${appId}: min 1, max ${APP_MAX_INSTANCES} instances, target_inflight 1, on one app host; 4 requests held 3 s each, one after another, from the cut until the load stops.`);
  if (!onlyFault) {
    // Slow links first: a gateway that reconnects (after a fault) learns the nodes' own addresses
    // from the cluster's gossip and no longer goes through its proxy. A closed loop of streams (6 at a time, 50 tokens each, spread over both gateways) per link shape.
    const WINDOW_MS = 20_000;
    const MAX_TOKENS = 50;
    const shapes: Array<[LinkSpec | "none", LinkShape]> = [
      ["none", CLEAN_LINK],
      ["gateways-nats", { rttMs: 50, loss: 0.01 }],
      ["gateways-nats", { rttMs: 200, loss: 0.01 }],
      ["nats-nats", { rttMs: 50, loss: 0.01 }],
      ["nats-nats", { rttMs: 200, loss: 0.01 }],
    ];
    for (const [spec, shape] of shapes) {
      process.stderr.write(`slow link: ${spec} ${shape.rttMs} ms ${shape.loss * 100}%\n`);
      cluster.slow("all", CLEAN_LINK);
      if (spec !== "none") cluster.slow(spec, shape);
      const heldBefore = cluster.links.reduce((n, l) => n + l.counters.heldBack, 0);
      const slowed = cluster.links.filter((l) => (spec === "nats-nats" ? l.name.endsWith(" routes") : !l.name.endsWith(" routes")));
      const bytesBefore = slowed.reduce((n, l) => n + l.counters.bytes, 0);
      const done: TrackedStream[] = [];
      const end = Date.now() + WINDOW_MS;
      let seq = 0;
      await Promise.all(
        Array.from({ length: 6 }, async (_, w) => {
          while (Date.now() < end) {
            const s = trackedStream(cluster.clients[w % 2]!, `slow link ${seq++} ${Math.random()}`, { maxTokens: MAX_TOKENS, timeoutMs: 20_000 });
            await s.done;
            done.push(s);
          }
        }),
      );
      const finished = done.filter((s) => s.outcome === "finished");
      const ttft = finished.map((s) => s.ttftMs!).filter((v) => v !== undefined);
      const elapsedS = (Date.now() - (end - WINDOW_MS)) / 1000;
      const errors = new Map<string, number>();
      for (const s of done.filter((s) => s.outcome !== "finished")) errors.set(`${s.outcome}: ${(s.error ?? "").slice(0, 80)}`, (errors.get(`${s.outcome}: ${(s.error ?? "").slice(0, 80)}`) ?? 0) + 1);
      slowRows.push([
        spec === "none" ? "clean (no added delay)" : spec === "gateways-nats" ? "gateways <-> NATS" : "NATS <-> NATS",
        shape.rttMs,
        `${shape.loss * 100}%`,
        finished.length,
        fmt((finished.length * MAX_TOKENS) / elapsedS, 0),
        fmt(percentile(ttft, 50), 0),
        fmt(percentile(ttft, 95), 0),
        done.length - finished.length,
        cluster.links.reduce((n, l) => n + l.counters.heldBack, 0) - heldBefore,
        fmt((slowed.reduce((n, l) => n + l.counters.bytes, 0) - bytesBefore) / 1e6, 1),
      ]);
      if (errors.size > 0) notes.push(`slow ${spec} ${shape.rttMs} ms: ${JSON.stringify(Object.fromEntries(errors))}`);
    }
    cluster.slow("all", CLEAN_LINK);
  }

  for (const fault of faults.filter((f) => !onlyFault || f.name.startsWith(onlyFault))) {
    process.stderr.write(`fault: ${fault.name}\n`);
    const step = (what: string) => process.stderr.write(`  ${new Date().toISOString()} ${what}\n`);
    const load = new MixedLoad(() => cluster.clients, { streamTimeoutMs: 20_000 });
    await load.seed(24, 4);
    step("seeded");
    load.start();
    const budget = new BudgetWatch(gatewayUrls);
    const census = new InstanceCensus(cluster.appHosts.map((h) => h.hostId));
    await sleep(2_000);
    let followed: TrackedStream[] = [];
    if (fault.midStream) {
      followed = Array.from({ length: 6 }, (_, i) => trackedStream(cluster.clients[i % 2]!, `partition ${i} ${Math.random()}`, { maxTokens: 300, timeoutMs: 20_000 }));
      await until(() => followed.every((s) => s.chunks > 0 || s.outcome !== undefined), "the followed streams' first chunks", 15_000);
    }
    const host = await fault.host();
    step(`cutting ${host.name}`);
    const at = Date.now();
    cluster.cut(host);
    const demand = holdDemand(gatewayUrls, 4);
    await sleep(HOLD_MS);
    cluster.heal(host);
    const healedAt = Date.now();
    step("healed");
    // Back to normal: every kind of request served at its first attempt, every stream's replicas current.
    const settled = await until(async () => servedSince(load, healedAt) && (await Promise.all(cluster.nats.nodes.map((n) => jetStreamSettled(n.url)))).every(Boolean), "the cluster to settle", 120_000)
      .then(() => Date.now() - healedAt)
      .catch(() => NaN);
    step(`settled (${settled} ms)`);
    await sleep(2_000);
    const stoppedAt = Date.now();
    const [, admissions, held] = await Promise.all([load.stop(), budget.stop(), demand.stop()]);
    census.stop();
    step("load stopped");
    await Promise.all(followed.map((s) => s.done));
    const figures = load.figures(at);
    const recovery = load.recoveryMs(at);
    const losses = await load.losses(cluster.clients[1]!, 90_000);
    step("losses counted");
    const lost = losses.backgroundLost + losses.batchLinesMissing + losses.filesLost;
    faultRows.push([
      fault.name,
      (HOLD_MS / 1000).toFixed(0),
      figures.requests,
      figures.failed,
      figures.failedAttempts,
      `${figures.streamsFinished} / ${figures.streamsEndedWithError} / ${figures.streamsHung}`,
      `${lost} (bg ${losses.backgroundLost}/${losses.backgroundAccepted}, batch ${losses.batchLinesMissing}/${losses.batchLines}, files ${losses.filesLost}/${losses.filesAccepted})`,
      losses.batchDuplicates,
      `${admissions.over} (${admissions.windows.filter((w) => w.admitted > TIGHT_LIMIT).length} of ${admissions.windows.length})`,
      longestGap(admissions.outcomes.filter((o) => o.status === 200).map((o) => o.at), at, stoppedAt),
      `${census.most} (${held.ok} / ${held.failed}; ${longestGap(held.answeredAt, at, stoppedAt)})`,
      Object.values(recovery).map((v) => (v === null ? "—" : (v / 1000).toFixed(1))).join(" / "),
      Number.isNaN(settled) ? "not within 120" : (settled / 1000).toFixed(1),
    ]);
    if (followed.length > 0)
      notes.push(`${fault.name}: followed streams ${JSON.stringify(followed.map((s) => ({ outcome: s.outcome, chunks: s.chunks, endedAfterCutS: +((s.endedAt - at) / 1000).toFixed(1), error: s.error?.slice(0, 90) })))}`);
    if (losses.reasons.length > 0) notes.push(`${fault.name}: lost ${JSON.stringify(losses.reasons.slice(0, 6))}`);
    notes.push(`${fault.name}: tight budget, admitted per window ${admissions.windows.map((w) => w.admitted).join(", ")}; ${admissions.admitted} admitted, ${admissions.refused} refused (429), ${admissions.unavailable} unavailable${admissions.unplaced ? `, ${admissions.unplaced} admitted across a window boundary without a trace (left out)` : ""}.`);
    notes.push(`${fault.name}: errors of failed attempts ${JSON.stringify(load.errors(at))}`);
    notes.push(`${fault.name}: error logs ${errorLogs(at)}`);
  }

} finally {
  await cluster.stop();
}

const faultTable = markdownTable(
  [
    "fault (host cut, held, healed)",
    "held s",
    "requests after the cut",
    "failed in the end",
    "retried (failed attempts)",
    "streams finished / error / hung",
    "lost",
    "duplicated batch lines",
    `admitted over the tight budget (windows over, of)`,
    "tight budget: longest run without an admission from the cut, s",
    `app instances at most (max ${APP_MAX_INSTANCES}) (held requests ok / failed; longest run without an answer from the cut, s)`,
    "recovery s from the cut: stream / background / upload",
    "settled s after the heal",
  ],
  faultRows,
);
const slowTable = markdownTable(["link slowed", "RTT ms", "loss", "streams finished", "tokens/s", "TTFT p50 ms", "TTFT p95 ms", "errors", "chunks held back as lost", "MB through the links of the row (clean: gateways')"], slowRows);
const sections = [
  machineLine(),
  `Command: \`node dist/bench/cluster-partitions.js\`. Every process on a network-namespace host of its own (test/harness/netns-cluster.ts): 3-node NATS JetStream cluster (R3, servers ping every 5 s, 2 outstanding), 2 gateways, 2 actor hosts, 1 app host, 3 runners (sim engine, 50 tokens/s, TRIBUTARY_RUNNER_TIMEOUT_MS=3000, ack waits 5 s). A cut detaches the host's bridge port: silent loss, no reset. Per fault: a batch of 24 lines and 4 background responses queued, two stream workers, one background-create worker and one upload worker; the host is cut 2 s in, held ${HOLD_MS / 1000} s, healed; the load stops 2 s after the cluster has settled (every kind of request served at its first attempt, every stream's replicas current on every node). A failed request is retried on the next gateway until 30 s. Beside it: a closed loop of 6 clients on a sim model whose budget is ${TIGHT_LIMIT} requests a 2 s window (demand far above it), each admission placed in its window by the gateway's own time of admission (its trace); and a deployed app (1 app host) driven to scale up by held requests from the cut on, its running instances counted from the processes every 100 ms. Budget windows are 2 s for every model here (the tight budget needs many windows), so each gateway asks its budgets' owners for every window: a cut NATS node whose loss stalls the rate-limits bucket while its stream elects a leader stalls admissions of every model meanwhile ((a), (b): the tight budget's longest run without an admission, and the streams' recovery); with the default 60 s windows, chunks leased before the cut carry admissions through most of it. Recovery: from the cut to the end of the first request of that kind started after it that succeeded at its first attempt (—: none). Lost: accepted items that never reached a final state or read back differently (reads retried until 90 s).`,
  faultTable,
  `Slow links (link-proxy.ts in the bench process: half the RTT each way; loss as TCP shows it, a lost ~1460-byte segment and what follows held back max(200 ms, RTT)). Measured before the faults (a gateway that reconnected would bypass its proxy). A closed loop of 6 streams (50 tokens each, both gateways) for 20 s per row; tokens/s counts finished streams. Gateways <-> NATS: each gateway's connection to its node; NATS <-> NATS: every route.`,
  slowTable,
  ...notes,
];
if (onlyFault) process.stdout.write(sections.join("\n\n") + "\n");
else writeResults("cluster-partitions.md", "Network partitions and slow links on a cluster of namespace hosts", sections);
