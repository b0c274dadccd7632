// Output tokens/s of the sim engine with 1, 2 and 3 runners behind 1 and 2 gateways, on the
// cluster of test/harness/cluster.ts (3-node NATS JetStream cluster): the total against the
// ideal (runners x slots x tokens/s), and the share each runner got against a perfect split.
// Writes bench/results/cluster-throughput.md.
//   node dist/bench/cluster-throughput.js [--seconds 10]
import { parseArgs } from "node:util";
import { startClusterStack } from "../test/harness/cluster.js";
import { TEST_KEY, TEST_MODEL } from "../test/harness/processes.js";
import { machineLine, markdownTable, writeResults } from "./lib/table.js";

const { values } = parseArgs({ options: { seconds: { type: "string", default: "10" } } });
const seconds = Number(values.seconds);
const SLOTS = 8;
const TOKENS_PER_SECOND = 50;
const MAX_TOKENS = 100;
const env = {
  TRIBUTARY_ENGINE: "sim",
  TRIBUTARY_RATE_LIMITS: "off",
  TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({ [TEST_MODEL]: { slots: SLOTS, sim: { tokens_per_second: TOKENS_PER_SECOND, first_token_latency_ms: 10 } } }),
};

/** One streamed completion: its runner and completion tokens (from the usage chunk). */
async function one(baseURL: string): Promise<{ runner: string; tokens: number }> {
  const res = await fetch(`${baseURL}/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${TEST_KEY}`, "content-type": "application/json" },
    body: JSON.stringify({ model: TEST_MODEL, messages: [{ role: "user", content: "go" }], max_tokens: MAX_TOKENS, stream: true, stream_options: { include_usage: true } }),
  });
  const text = await res.text();
  const usage = /"completion_tokens":(\d+)/.exec(text);
  return { runner: res.headers.get("x-tributary-runner") ?? "?", tokens: usage ? Number(usage[1]) : 0 };
}

const rows: Array<Array<string | number>> = [];
for (const runners of [1, 2, 3])
  for (const gateways of [1, 2]) {
    process.stderr.write(`${runners} runner(s), ${gateways} gateway(s)\n`);
    const cluster = await startClusterStack({ runners, gateways, actorHosts: 1, env });
    try {
      await new Promise((r) => setTimeout(r, 1_500)); // every gateway hears every runner
      const concurrency = runners * SLOTS;
      const perRunner = new Map<string, number>();
      let total = 0;
      let failed = 0;
      const started = Date.now();
      const until = started + seconds * 1000;
      await Promise.all(
        Array.from({ length: concurrency }, async (_, i) => {
          while (Date.now() < until) {
            const r = await one(cluster.gateways[i % gateways]!.baseURL).catch(() => undefined);
            if (!r || r.tokens === 0) {
              failed++;
              continue;
            }
            total += r.tokens;
            perRunner.set(r.runner, (perRunner.get(r.runner) ?? 0) + r.tokens);
          }
        }),
      );
      const elapsed = (Date.now() - started) / 1000;
      const ideal = runners * SLOTS * TOKENS_PER_SECOND;
      const shares = cluster.runners.map((r) => (perRunner.get(r.runnerId) ?? 0) / Math.max(1, total));
      const worstSplit = Math.min(...shares) * runners; // 1.0: a perfect split
      rows.push([runners, gateways, concurrency, Math.round(total / elapsed), ideal, (total / elapsed / ideal).toFixed(2), shares.map((s) => s.toFixed(2)).join(" / "), worstSplit.toFixed(2), failed]);
    } finally {
      await cluster.stop();
    }
  }

const table = markdownTable(
  ["runners", "gateways", "concurrent streams", "output tokens/s", "ideal (runners x slots x tokens/s)", "ratio", "share of each runner", "smallest share / perfect split", "failed"],
  rows,
);
writeResults("cluster-throughput.md", "Output tokens/s across runners and gateways (sim engine)", [
  machineLine(),
  `Command: \`node dist/bench/cluster-throughput.js --seconds ${seconds}\`. 3-node NATS JetStream cluster on loopback, 1 actor host, sim engine at ${TOKENS_PER_SECOND} tokens/s per stream, ${SLOTS} slots per runner, streams of ${MAX_TOKENS} tokens, as many concurrent streams as slots in all, spread evenly over the gateways, closed loop for ${seconds} s. A runner's share is its completion tokens over all of them (from the usage chunk and the x-tributary-runner header).`,
  table,
]);
