// tier: serial (network partitions of a cluster of many processes on namespace hosts, with recovery deadlines)
import t from "tap";
import { checkNothingLost, clusterFaultEnv, gatewayErrors, MixedLoad, servedSince, trackedStream } from "../../harness/cluster-load.js";
import { until } from "../../harness/until.js";
import { startNetnsClusterStack } from "../../harness/netns-cluster.js";
import { NetnsNetwork, netnsUnavailable } from "../../harness/netns.js";

// Network partitions, not crashes: every process on a host of its own (network namespaces), and
// a host cut from the others by silent loss (its peers' connections stall, nothing resets) while
// the steady mixed load of the cluster fault tests runs. First a runner cut while streams run on
// it, until they have all ended; then one NATS node cut away from the other two (a minority)
// until the cluster serves every kind of request again, then healed. Nothing accepted may be lost
// or run twice, and every stream ends (finished, or a clear error) within its timeout. At the end
// no namespace of the run is left. bench/cluster-partitions.ts measures more faults, and slow links.

const unavailable = netnsUnavailable();
if (unavailable) t.plan(0, `skipped: ${unavailable}`);
else await partitions();

async function partitions() {
  const STREAM_TIMEOUT_MS = 20_000;
  const cluster = await startNetnsClusterStack({ gateways: 2, actorHosts: 2, runners: 2, env: clusterFaultEnv });
  const prefix = cluster.network.prefix;
  t.teardown(() => cluster.stop());
  const load = new MixedLoad(() => cluster.clients, { streamTimeoutMs: STREAM_TIMEOUT_MS });
  await load.seed(12, 3);
  load.start();

  // A runner cut mid-stream: streams with prompts of their own (no prefix routing onto one
  // runner), long enough to be running when the cut comes; the runner cut is the one streaming
  // the most (the gateways pick where the streams go).
  const streams = Array.from({ length: 6 }, (_, i) => trackedStream(cluster.clients[i % 2]!, `partition stream ${i} ${Math.random()}`, { maxTokens: 300, timeoutMs: STREAM_TIMEOUT_MS }));
  await until(() => streams.every((s) => s.chunks > 0 || s.outcome !== undefined), "every stream's first chunk", 15_000);
  const runner = cluster.hosts.runner[await cluster.busiestRunner()]!;
  const runnerCutAt = Date.now();
  cluster.cut(runner);
  await Promise.all(streams.map((s) => s.done));
  cluster.heal(runner);
  t.comment(`runner ${runner.name} cut: streams ${JSON.stringify(streams.map((s) => ({ outcome: s.outcome, chunks: s.chunks, endedAfterCutMs: s.endedAt - runnerCutAt })))}`);

  // A minority: n1 (actor host 1's node, gateway 2's) alone. Held until the majority serves
  // every kind of request again, at least as long as a server takes to drop a silent client
  // (10-15 s). After the heal the node's rejoin forces elections for a while (bench/results/
  // cluster-partitions.md: 30-50 s to settle): the loss check's reads are retried through it.
  const minority = cluster.hosts.nats[0]!;
  const minorityCutAt = Date.now();
  cluster.cut(minority);
  await until(() => servedSince(load, minorityCutAt) && Date.now() - minorityCutAt > 15_000, "the majority to serve every kind of request", 60_000);
  cluster.heal(minority);
  t.comment(`minority partition of ${minority.name} held ${Date.now() - minorityCutAt} ms: ${JSON.stringify(load.figures(minorityCutAt))}; recovery (ms) ${JSON.stringify(load.recoveryMs(minorityCutAt))}`);

  await load.stop();

  t.test("every stream cut off from its runner ended within its timeout, finished or with an error", async (t) => {
    for (const s of streams) t.not(s.outcome, "hung", `stream ended: ${s.outcome} (${s.error ?? "no error"})`);
    t.ok(streams.some((s) => s.outcome === "error" && s.chunks > 0), "a stream on the cut runner ended with an error after its first tokens");
    t.equal(load.figures().streamsHung, 0, "no stream of the load hung past its timeout");
  });

  t.test("every request was served in the end (failed attempts retried on the other gateway)", async (t) => {
    t.comment(`errors of failed attempts: ${JSON.stringify(load.errors())}`);
    t.equal(load.figures().failed, 0, "no request failed on both gateways until its deadline");
  });

  t.test("nothing accepted was lost, nothing ran twice", async (t) => {
    checkNothingLost(t, await load.losses(cluster.clients[0]!), { minBackground: 3, errorRecords: () => gatewayErrors(cluster) });
  });

  t.test("stopping the stack leaves no namespace of the run", async (t) => {
    await cluster.stop();
    t.same(NetnsNetwork.leftovers(prefix), [], `no namespace named ${prefix}* is left`);
  });
}
