// Every kind of process killed (-9) in turn, then restarted, under a steady mixed load on the
// cluster of test/harness/cluster.ts (3-node NATS JetStream cluster, R3; 2 gateways, 2 actor
// hosts, 3 runners, sim engine): per fault, requests failed, accepted work lost, time to recover,
// duplicates. Then a rolling restart of every process with its drain. Writes
// bench/results/cluster-faults.md.
//   node dist/bench/cluster-faults.js
import { spawnSync } from "node:child_process";
import { jetstreamManager } from "@nats-io/jetstream";
import { Objm } from "@nats-io/obj";
import { buckets, streams } from "../lib/nats/subjects.js";
import { startClusterStack } from "../test/harness/cluster.js";
import { clusterFaultEnv, MixedLoad } from "../test/harness/cluster-load.js";
import { connectAs } from "../test/harness/processes.js";
import { machineLine, markdownTable, writeResults } from "./lib/table.js";

const env = clusterFaultEnv;
class Done extends Error {}
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const cluster = await startClusterStack({ gateways: 2, actorHosts: 2, runners: 3, env });
const rows: Array<Array<string | number>> = [];
let rollingTable = "";
const notes: string[] = [];

/** The object's size and nuid, and how many chunk messages its subject holds in the stream, per node. */
async function objectChunks(id: string): Promise<string> {
  const out: string[] = [];
  for (const node of cluster.nats.nodes) {
    const nc = await connectAs(node.url);
    try {
      const info = await (await new Objm(nc).open(buckets.fileContents)).info(id);
      if (!info) {
        out.push(`${node.name}: no object info`);
        continue;
      }
      const subject = `$O.${buckets.fileContents}.C.${info.nuid}`;
      const stream = await (await jetstreamManager(nc)).streams.info(`OBJ_${buckets.fileContents}`, { subjects_filter: subject });
      out.push(`${node.name}: size ${info.size}, chunks ${info.chunks}, stored ${stream.state.subjects?.[subject] ?? 0} (leader ${stream.cluster?.leader})`);
    } catch (err) {
      out.push(`${node.name}: ${String(err).slice(0, 80)}`);
    } finally {
      await nc.close();
    }
  }
  return out.join("; ");
}

async function streamLeader(): Promise<string | undefined> {
  const nc = await connectAs(cluster.nats.url);
  try {
    return (await (await jetstreamManager(nc)).streams.info(streams.responsesBackground)).cluster?.leader;
  } finally {
    await nc.close();
  }
}

const faults: Array<{ name: string; kill: () => Promise<void>; restart: () => Promise<void> }> = [
  { name: "gateway 1", kill: () => cluster.gateways[0]!.kill(), restart: () => cluster.restart("gateway", 0) },
  { name: "runner 1", kill: () => cluster.runners[0]!.kill(), restart: () => cluster.restart("runner", 0) },
  { name: "actor host 1", kill: () => cluster.actors[0]!.kill(), restart: () => cluster.restart("actors", 0) },
  {
    name: "NATS node leading the background stream",
    kill: async () => {
      const leader = await streamLeader();
      const node = cluster.nats.nodes.find((n) => n.name === leader) ?? cluster.nats.nodes[0]!;
      notes.push(`NATS fault: killed ${node.name}, leader of ${streams.responsesBackground}`);
      victim = node;
      await node.kill();
    },
    restart: () => victim!.restart(),
  },
];
let victim: (typeof cluster.nats.nodes)[number] | undefined;

try {
  // --only <name prefix>: one fault (and no rolling restart), to look into it.
  const onlyFault = process.argv.includes("--only") ? process.argv[process.argv.indexOf("--only") + 1] : undefined;
  for (const fault of faults.filter((f) => !onlyFault || f.name.startsWith(onlyFault))) {
    process.stderr.write(`fault: ${fault.name}\n`);
    const load = new MixedLoad(() => cluster.clients, { streamTimeoutMs: 20_000 });
    await load.seed(24, 4);
    load.start();
    await sleep(2_000);
    const at = Date.now();
    await fault.kill();
    await sleep(5_000);
    await fault.restart();
    await sleep(3_000);
    await load.stop();
    const figures = load.figures(at);
    const recovery = load.recoveryMs(at);
    const losses = await load.losses(cluster.clients[1]!);
    rows.push([
      fault.name,
      figures.requests,
      figures.failedAttempts,
      figures.failed,
      `${figures.streamsFinished} / ${figures.streamsEndedWithError} / ${figures.streamsHung}`,
      Object.values(recovery).map((v) => (v === null ? "—" : (v / 1000).toFixed(1))).join(" / "),
      `${losses.backgroundLost} of ${losses.backgroundAccepted}`,
      `${losses.batchLinesMissing} of ${losses.batchLines}`,
      `${losses.filesLost} of ${losses.filesAccepted}`,
      losses.batchDuplicates,
    ]);
    if (losses.reasons.length > 0) notes.push(`${fault.name}: lost ${JSON.stringify(losses.reasons.slice(0, 10))}`);
    // For a file that did not read back: what JetStream itself holds for it (asked as admin, on each node).
    for (const reason of losses.reasons.filter((r) => r.startsWith("file ")).slice(0, 3)) {
      const id = reason.split(" ")[1]!.replace(/:$/, "");
      notes.push(`${fault.name}: ${id} in JetStream: ${await objectChunks(id)}`);
    }
    const errorLogs = [...cluster.gateways, ...cluster.actors].flatMap((p) => p.logs.filter((r) => r.level === "error" && Number(new Date(String(r.t))) >= at));
    // The distinct errors the processes logged (by message), with one stack each.
    const distinct = new Map<string, Record<string, unknown>>();
    for (const r of errorLogs) {
      const err = r.err as { name?: string; message?: string; stack?: string } | undefined;
      const key = `${String(r.msg)} ${String(r.path ?? "")} ${err?.name ?? ""}: ${err?.message ?? ""}`.replace(/[0-9a-zA-Z]{20,}/g, "#");
      if (!distinct.has(key)) distinct.set(key, { ...r, err: err ? { ...err, stack: err.stack?.split("\n").slice(0, 6).join(" | ") } : undefined });
    }
    if (errorLogs.length > 0) notes.push(`${fault.name}: ${errorLogs.length} error logs; distinct: ${[...distinct.entries()].map(([k, r]) => `${k} (${JSON.stringify((r.err as { stack?: string } | undefined)?.stack ?? "")})`).join("; ")}`);
    notes.push(`${fault.name}: errors of failed attempts ${JSON.stringify(load.errors(at))}`);
  }

  if (onlyFault) throw new Done();
  // Rolling restart: every process in turn stopped with its drain (SIGTERM; NATS: lame duck
  // mode), then started again, under one continuous load.
  process.stderr.write("rolling restart\n");
  const load = new MixedLoad(() => cluster.clients, { streamTimeoutMs: 20_000 });
  await load.seed(24, 4);
  load.start();
  await sleep(2_000);
  const steps: Array<[string, () => Promise<unknown>, () => Promise<void>]> = [
    ...cluster.runners.map((_, i) => [`runner ${i + 1}`, () => cluster.runners[i]!.stop(), () => cluster.restart("runner", i)] as [string, () => Promise<unknown>, () => Promise<void>]),
    ...cluster.actors.map((_, i) => [`actor host ${i + 1}`, () => cluster.actors[i]!.stop(), () => cluster.restart("actors", i)] as [string, () => Promise<unknown>, () => Promise<void>]),
    ...cluster.gateways.map((_, i) => [`gateway ${i + 1}`, () => cluster.gateways[i]!.stop(), () => cluster.restart("gateway", i)] as [string, () => Promise<unknown>, () => Promise<void>]),
    ...cluster.nats.nodes.map((node) => [`NATS ${node.name}`, () => { spawnSync("nats-server", ["--signal", `ldm=${node.child.pid}`]); return node.exited; }, () => node.restart()] as [string, () => Promise<unknown>, () => Promise<void>]),
  ];
  const rollingRows: Array<Array<string | number>> = [];
  for (const [name, stop, start] of steps) {
    const at = Date.now();
    await stop();
    const stoppedMs = Date.now() - at;
    await start();
    await sleep(2_000);
    const f = load.figures(at);
    rollingRows.push([name, (stoppedMs / 1000).toFixed(1), f.requests, f.failedAttempts, f.failed]);
  }
  await load.stop();
  notes.push(`Rolling restart: errors of failed attempts ${JSON.stringify(load.errors())}`);
  const all = load.figures();
  const losses = await load.losses(cluster.clients[1]!);
  if (losses.reasons.length > 0) notes.push(`Rolling restart: lost ${JSON.stringify(losses.reasons.slice(0, 10))}`);
  rollingTable = markdownTable(["process (in order)", "drain s", "requests since its stop", "failed attempts (retried)", "failed in the end"], rollingRows);
  notes.push(
    `Rolling restart overall: ${all.requests} requests, ${all.failedAttempts} failed attempts, ${all.failed} failed in the end; streams ${all.streamsFinished} finished, ${all.streamsEndedWithError} ended with an error event, ${all.streamsHung} hung; lost: background ${losses.backgroundLost} of ${losses.backgroundAccepted}, batch lines ${losses.batchLinesMissing} of ${losses.batchLines}, files ${losses.filesLost} of ${losses.filesAccepted}; duplicate batch lines ${losses.batchDuplicates}.`,
  );
} catch (err) {
  if (!(err instanceof Done)) throw err;
} finally {
  await cluster.stop();
}

const table = markdownTable(
  [
    "fault (kill -9, then restart)",
    "requests after the kill",
    "failed attempts (retried on the other gateway)",
    "requests failed in the end",
    "streams finished / error event / hung",
    "recovery s: stream / background / upload",
    "background responses lost",
    "batch lines lost",
    "files lost",
    "duplicate batch lines",
  ],
  rows,
);
// One fault (--only) is a look into it: printed, not written over the full results.
const only = process.argv.includes("--only");
const write = only ? (_name: string, _title: string, sections: string[]) => (process.stdout.write(sections.join("\n\n") + "\n"), "(not written: --only)") : writeResults;
const path = write("cluster-faults.md", "Faults on a cluster on one machine", [
  machineLine(),
  "Command: `node dist/bench/cluster-faults.js`. 3-node NATS JetStream cluster on loopback (R3), 2 gateways, 2 actor hosts, 3 runners (sim engine, 50 tokens/s), each on its own node. Per fault: a batch of 24 lines and 4 background responses queued, then two stream workers, one background-create worker and one upload worker run; the process is killed 2 s in, restarted 5 s later, the load stops 3 s after that. A failed request is retried on the next gateway until 30 s. Recovery: from the kill to the end of the first request of that kind started after it that succeeded at its first attempt (— : none).",
  table,
  "Rolling restart (each process stopped with its drain, SIGTERM; NATS nodes in lame duck mode; then started again; 2 s between steps), one continuous load:",
  rollingTable,
  ...notes,
]);
process.stdout.write(table + "\n" + rollingTable + "\n" + notes.join("\n") + `\nwritten to ${path}\n`);
