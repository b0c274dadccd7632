// Benchmark 2 of the streaming spine: how many concurrent streams, each at the simulated
// cadence of 20 tokens/s, the gateway + NATS + runner (sim engine, no model) carry while the
// p99 gap between tokens stays within 5 ms of the cadence (50 ms) and nothing fails; and the
// gateway's memory at that load.
//   node dist/bench/sim-streams.js [--levels 500,1000,1500,2000] [--hold 20] [--rate 20] [--out sim-streams.md]
import { parseArgs } from "node:util";
import { loadavg } from "node:os";
import { cpuMs, cpuSplit, cpuSplitSince, rssMiB, type CpuSplit, startActorHost, startGateway, startNats, startRunner, TEST_KEY, TEST_MODEL } from "./lib/processes.js";
import { driveSimLoad, simStackEnv } from "./lib/sim-load.js";
import { fmt, percentile } from "./lib/stats.js";
import { machineLine, markdownTable, writeResults } from "./lib/table.js";

const { values } = parseArgs({
  options: {
    levels: { type: "string", default: "500,1000,1500,2000" },
    hold: { type: "string", default: "20" },
    rate: { type: "string", default: "20" },
    ramp: { type: "string", default: "2" },
    tolerance: { type: "string", default: "5" },
    // Where the table goes, under bench/results/ (comparison drivers point it into raw/).
    out: { type: "string", default: "sim-streams.md" },
  },
});
const levels = values.levels!.split(",").map(Number);
const holdSeconds = Number(values.hold);
const rate = Number(values.rate);
const rampSeconds = Number(values.ramp);
const toleranceMs = Number(values.tolerance);
const cadenceMs = 1000 / rate;
const tokens = Math.round(rate * holdSeconds);
const maxLevel = Math.max(...levels);
const env = simStackEnv(maxLevel, rate, 50);

async function main(): Promise<void> {
  const loadStart = loadavg()[0]!;
  const nats = await startNats();
  // The whole stack: the actor host owns the rate-limit budgets (set far above this load).
  const actors = await startActorHost(nats.url, env);
  const runner = await startRunner(nats.url, env);
  const gateway = await startGateway(nats.url, env);
  const pids = { gateway: gateway.child.pid!, runner: runner.child.pid!, nats: nats.child.pid! };
  const rows: Array<Array<string | number>> = [];
  let best = 0;
  let bestRss = NaN;
  try {
    for (const streams of levels) {
      process.stderr.write(`${streams} streams...\n`);
      const cpuBefore = { gateway: cpuMs(pids.gateway), runner: cpuMs(pids.runner), nats: cpuMs(pids.nats), self: process.cpuUsage() };
      const splitBefore = { gateway: cpuSplit(pids.gateway), runner: cpuSplit(pids.runner), nats: cpuSplit(pids.nats) };
      let peakRss = rssMiB(pids.gateway);
      const sampler = setInterval(() => (peakRss = Math.max(peakRss, rssMiB(pids.gateway))), 250);
      const { wall, delivered, errors, errorKinds, gaps, gapsBySecond } = await driveSimLoad(gateway.port, TEST_KEY, TEST_MODEL, { streams, tokens, rampSeconds, holdSeconds });
      clearInterval(sampler);
      const self = process.cpuUsage(cpuBefore.self);
      const cpuUsed = { gateway: cpuMs(pids.gateway) - cpuBefore.gateway, runner: cpuMs(pids.runner) - cpuBefore.runner, nats: cpuMs(pids.nats) - cpuBefore.nats };
      // Where each process's time went, per delivered token: main thread user/system, other threads user/system.
      const splitUsed = { gateway: cpuSplitSince(splitBefore.gateway, cpuSplit(pids.gateway)), runner: cpuSplitSince(splitBefore.runner, cpuSplit(pids.runner)), nats: cpuSplitSince(splitBefore.nats, cpuSplit(pids.nats)) };
      const perToken = (d: CpuSplit) => [d.mainUser, d.mainSys, d.otherUser, d.otherSys].map((ms) => Math.round((ms * 10000) / delivered) / 10);
      const cpu = (used: number) => fmt((used / 1000 / wall) * 100, 0);
      const p50 = percentile(gaps, 50);
      const p99 = percentile(gaps, 99);
      const pass = errors === 0 && p99 <= cadenceMs + toleranceMs;
      if (pass && streams > best) {
        best = streams;
        bestRss = peakRss;
      }
      rows.push([
        streams,
        fmt(delivered / wall, 0),
        `${fmt(p50, 1)} / ${fmt(p99, 1)} / ${fmt(percentile(gaps, 99.9), 1)}`,
        errors,
        fmt(peakRss, 0),
        `${cpu(cpuUsed.gateway)} / ${cpu(cpuUsed.runner)} / ${cpu(cpuUsed.nats)} / ${fmt(((self.user + self.system) / 1000 / 1000 / wall) * 100, 0)}`,
        // The stack's cost per token, less sensitive than wall-clock figures to a shared machine.
        `${fmt((cpuUsed.gateway * 1000) / delivered, 1)} / ${fmt((cpuUsed.runner * 1000) / delivered, 1)} / ${fmt((cpuUsed.nats * 1000) / delivered, 1)} / ${fmt(((cpuUsed.gateway + cpuUsed.runner + cpuUsed.nats) * 1000) / delivered, 1)}`,
        pass ? "yes" : "no",
      ]);
      // One line per level for drivers that compare builds (bench/results/sim-streams.md says how).
      process.stderr.write(`${JSON.stringify({ streams, delivered, wall, p50, p99, p99BySecond: Array.from(gapsBySecond, (g) => Math.round(percentile(g ?? [], 99) * 10) / 10), errors, errorKinds, cpuMs: cpuUsed, loadGeneratorCpuMs: (self.user + self.system) / 1000, usPerTokenMainUserSysOtherUserSys: { gateway: perToken(splitUsed.gateway), runner: perToken(splitUsed.runner), nats: perToken(splitUsed.nats) } })}\n`);
      await new Promise((r) => setTimeout(r, 1000));
    }
  } finally {
    await gateway.stop();
    await runner.stop();
    await actors.stop();
    await nats.stop();
  }
  writeResults(values.out!, "Concurrent streams at a simulated cadence (sim engine)", [
    machineLine(),
    `Sim engine at ${rate} tokens/s per stream (gap ${cadenceMs} ms), ${tokens} tokens per stream (${holdSeconds} s), streams started over ${rampSeconds} s. ` +
      `Processes: nats-server, the actor host, one runner process (sim), one gateway; the load generator is this process (one TCP connection per stream, HTTP/1.1 and SSE parsed by hand to keep its CPU low). ` +
      `Gaps are measured in the steady state (from 1 s after the last stream started until 1 s before the first one ended); ` +
      `a level passes when no stream fails or loses a token and the p99 gap between tokens is within ${toleranceMs} ms of the cadence.`,
    markdownTable(["streams", "tokens/s delivered", "gap p50 / p99 / p99.9 ms", "failed streams", "gateway peak RSS MiB", "CPU % gateway / runner / nats / load generator", "CPU µs per token gateway / runner / nats / stack", "pass"], rows),
    `Largest passing level: **${best} streams** (target >= 1,000), gateway peak RSS there ${fmt(bestRss, 0)} MiB.`,
    `Command: \`npm run build && node dist/bench/sim-streams.js${process.argv.slice(2).map((a) => " " + a).join("")}\``,
    `Load average (1 min) at start and end: ${loadStart.toFixed(1)}, ${loadavg()[0]!.toFixed(1)}.`,
  ]);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
