// A Tributary cluster on one machine, to try failures by hand: a 3-node NATS JetStream cluster on
// loopback (routes, R3 buckets and streams, the identities of a deployment), two actor hosts,
// three runners and two gateways, each connected to its own NATS node.
//   node dist/bench/cluster.js [--engine sim|llama]     (Ctrl-C stops everything)
// It prints the gateways' URLs, the NATS nodes' URLs and pids (kill -9 one and watch), the
// API key and the admin nkey file (for `nats --nkey <file> -s <url> ...`).
import { startClusterStack } from "../test/harness/cluster.js";
import { TEST_KEY, TEST_MODEL } from "../test/harness/processes.js";

const engine = process.argv.includes("--engine") ? process.argv[process.argv.indexOf("--engine") + 1] : "sim";
const cluster = await startClusterStack({
  env: { TRIBUTARY_ENGINE: engine, TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({ [TEST_MODEL]: { sim: { tokens_per_second: 50, first_token_latency_ms: 20 } } }) },
});
const lines = [
  "Tributary cluster is up (model " + TEST_MODEL + ", engine " + engine + ", API key " + TEST_KEY + ")",
  ...cluster.gateways.map((g, i) => `  gateway ${i + 1}: ${g.baseURL}  (pid ${g.child.pid})`),
  ...cluster.actors.map((a, i) => `  actor host ${i + 1}: pid ${a.child.pid}`),
  ...cluster.runners.map((r, i) => `  runner ${i + 1}: ${r.runnerId} (pid ${r.child.pid})`),
  ...cluster.nats.nodes.map((n) => `  NATS ${n.name}: ${n.url}  (pid ${n.child.pid})`),
  `  admin nkey: ${cluster.nats.env("admin").TRIBUTARY_NATS_NKEY_FILE}`,
  "Ctrl-C stops everything.",
];
process.stdout.write(lines.join("\n") + "\n");
let stopping = false;
const stop = () => {
  if (stopping) process.exit(130);
  stopping = true;
  void cluster.stop().then(() => process.exit(0));
};
process.on("SIGINT", stop);
process.on("SIGTERM", stop);
