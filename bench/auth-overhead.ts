// What authentication and rate-limit admission add to a request, measured end to end.
//
//   npm run build && node dist/bench/auth-overhead.js [--requests 400] [--rounds 5] [--concurrency 4]
//
// Starts its own nats-server, actor host, a runner on the sim engine (no first-token latency,
// max_tokens 1: the engine costs next to nothing, so what is measured is the gateway path), and
// six gateways: three with rate limits on, three with TRIBUTARY_RATE_LIMITS=off. Every request is
// authenticated with a KV-backed key in both cases; the difference between the two is the cost of
// budget admission. Configurations (1 or 3 gateways, limits on or off) run interleaved in rounds,
// so that the load of the machine falls on all of them alike. Separately it measures the
// authenticator in process (a cached key) and the first request of a new organization (key and
// budget both cold). Writes bench/results/auth-overhead.md.

import { writeFileSync, mkdirSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { startActorHost, startGateway, startNats, startRunner, repoRoot, testCatalog, TEST_KEY, TEST_MODEL, type Gateway, type Proc } from "../test/harness/processes.js";
import { AccountStore, AccountDirectory, AccountAuthenticator, LastUsedRecorder } from "../modules/accounts/mod.js";
import { createLogger } from "../lib/log.js";
import { loadCatalog } from "../modules/catalog/mod.js";
import { catalogOverridesConfig, readConfig } from "../lib/config.js";
import { BudgetClient, ClusterRateLimiter } from "../modules/ratelimit/mod.js";

const { values: args } = parseArgs({
  options: {
    requests: { type: "string", default: "400" },
    rounds: { type: "string", default: "5" },
    concurrency: { type: "string", default: "4" },
    "cold-orgs": { type: "string", default: "40" },
  },
});
const REQUESTS = Number(args.requests);
const ROUNDS = Number(args.rounds);
const CONCURRENCY = Number(args.concurrency);
const COLD_ORGS = Number(args["cold-orgs"]);

const env = {
  TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({
    [TEST_MODEL]: {
      engine: "sim",
      sim: { tokens_per_second: 100_000, first_token_latency_ms: 0 },
      slots: 64,
      queue_limit: 1000,
      // Far above the load: the budget is never the limit, only its bookkeeping is measured.
      rate_limits: { requests_per_minute: 100_000_000, tokens_per_minute: 1_000_000_000 },
    },
  }),
};
const body = JSON.stringify({ model: TEST_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 1 });

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function timedRequest(url: string, key: string): Promise<number> {
  const started = performance.now();
  const res = await fetch(url + "/v1/chat/completions", { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body });
  await res.arrayBuffer();
  if (res.status !== 200) throw new Error(`unexpected status ${res.status}`);
  return performance.now() - started;
}

/** `count` requests from `concurrency` closed-loop clients, spread round-robin over `urls`. */
async function measure(urls: string[], count: number): Promise<number[]> {
  const latencies: number[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < count) {
        const i = next++;
        latencies.push(await timedRequest(urls[i % urls.length]!, TEST_KEY));
      }
    }),
  );
  return latencies;
}

/** Lease round trips so far: the gateways with limits on log each one at debug level. */
const leaseCount = (gateways: Gateway[]) => gateways.reduce((n, g) => n + g.logs.filter((r) => r.msg === "budget lease").length, 0);

async function main(): Promise<void> {
  const procs: Proc[] = [];
  const nats = await startNats();
  procs.push(nats);
  try {
    procs.push(await startActorHost(nats.url, env));
    procs.push(await startRunner(nats.url, env));
    const on: Gateway[] = [];
    const off: Gateway[] = [];
    for (let i = 0; i < 3; i++) {
      on.push(await startGateway(nats.url, { ...env, TRIBUTARY_LOG_LEVEL: "debug" }));
      off.push(await startGateway(nats.url, { ...env, TRIBUTARY_RATE_LIMITS: "off" }));
    }
    procs.push(...on, ...off);
    const nc = await nats.connect();

    const configs = [
      { name: "1 gateway, limits off", urls: [off[0]!.url], limits: false, gateways: 1 },
      { name: "1 gateway, limits on", urls: [on[0]!.url], limits: true, gateways: 1 },
      { name: "3 gateways, limits off", urls: off.map((g) => g.url), limits: false, gateways: 3 },
      { name: "3 gateways, limits on", urls: on.map((g) => g.url), limits: true, gateways: 3 },
    ];
    // Warm-up: connections, JIT, key caches, budget activation and first chunks.
    for (const c of configs) await measure(c.urls, 200);
    const samples = new Map<string, number[]>(configs.map((c) => [c.name, []]));
    const leases = new Map<string, number>(configs.map((c) => [c.name, 0]));
    for (let round = 0; round < ROUNDS; round++) {
      const order = round % 2 === 0 ? configs : [...configs].reverse();
      for (const c of order) {
        const before = leaseCount(on);
        samples.get(c.name)!.push(...(await measure(c.urls, REQUESTS)));
        leases.set(c.name, leases.get(c.name)! + leaseCount(on) - before);
      }
      process.stderr.write(`round ${round + 1}/${ROUNDS} done\n`);
    }

    const stats = configs.map((c) => {
      const sorted = samples.get(c.name)!.sort((a, b) => a - b);
      return { ...c, n: sorted.length, p50: percentile(sorted, 50), p90: percentile(sorted, 90), p99: percentile(sorted, 99), leasesPer1000: (1000 * leases.get(c.name)!) / sorted.length };
    });
    const byName = new Map(stats.map((s) => [s.name, s]));

    // The authenticator in process, against the same KV: a cached key, and a key seen the first time.
    const store = await AccountStore.open(nc);
    const log = createLogger("bench");
    const directory = new AccountDirectory(nc, store.kv, log);
    await directory.start();
    const auth = new AccountAuthenticator(directory, new LastUsedRecorder(store, 3_600_000, log));
    await auth.authenticate(`Bearer ${TEST_KEY}`, {});
    const warmIterations = 200_000;
    const t0 = performance.now();
    for (let i = 0; i < warmIterations; i++) auth.authenticate(`Bearer ${TEST_KEY}`, {});
    const warmNs = ((performance.now() - t0) * 1e6) / warmIterations;

    // Admission in process, against the live budget owner: what limits-on adds to each request
    // once the gateway holds a chunk (leases are counted: each is a round trip to the owner).
    const spec = loadCatalog(testCatalog, readConfig(catalogOverridesConfig, { ...process.env, ...env })).find((m) => m.id === TEST_MODEL)!;
    const budgetClient = new BudgetClient(nc, { gatewayId: "gbench", waitMs: 10_000, requestTimeoutMs: 1_000 }, log);
    const limiter = new ClusterRateLimiter(budgetClient, "organization");
    const principal = { organizationId: "org-bench-admission", projectId: "proj-bench", keyId: "key-bench" };
    for (let i = 0; i < 1000; i++) (await limiter.admit(principal, spec, 8)).settle(6);
    const leasesBefore = budgetClient.stats.leases;
    const admissions = 200_000;
    const a0 = performance.now();
    for (let i = 0; i < admissions; i++) {
      const admission = limiter.admit(principal, spec, 8);
      (admission instanceof Promise ? await admission : admission).settle(6);
    }
    const admissionNs = ((performance.now() - a0) * 1e6) / admissions;
    const inProcessLeases = budgetClient.stats.leases - leasesBefore;
    await limiter.stop();

    // Cold path: new organizations, each first request finds neither its key nor its budget.
    const coldKeys: string[] = [];
    for (let i = 0; i < COLD_ORGS; i++) {
      const { project } = await store.createOrganization({ name: `bench ${i}` });
      coldKeys.push((await store.createApiKey({ projectId: project.id, name: "bench" })).secret);
    }
    const coldAuth: number[] = [];
    for (const key of coldKeys.slice(0, COLD_ORGS / 2)) {
      const s = performance.now();
      await auth.authenticate(`Bearer ${key}`, {});
      coldAuth.push(performance.now() - s);
    }
    const firstOn: number[] = [];
    const secondOn: number[] = [];
    const firstOff: number[] = [];
    for (const [i, key] of coldKeys.entries()) {
      const url = i % 2 === 0 ? on[0]!.url : off[0]!.url;
      const first = await timedRequest(url, key);
      const second = await timedRequest(url, key);
      if (i % 2 === 0) {
        firstOn.push(first);
        secondOn.push(second);
      } else firstOff.push(first);
    }
    directory.stop();
    await nc.close();

    const sortN = (xs: number[]) => [...xs].sort((a, b) => a - b);
    const f = (ms: number) => ms.toFixed(3);
    const lines: string[] = [];
    lines.push("# Authentication and rate-limit admission: added latency per request", "");
    lines.push(`Command: \`node dist/bench/auth-overhead.js --requests ${REQUESTS} --rounds ${ROUNDS} --concurrency ${CONCURRENCY}\``);
    lines.push(`Machine: ${cpus().length} × ${cpus()[0]?.model ?? "cpu"}, load average at the end ${loadavg().map((l) => l.toFixed(2)).join(" ")} (shared with other work).`);
    lines.push(`Date: ${new Date().toISOString()}`, "");
    lines.push(
      "Chat completions of one token (`max_tokens: 1`) on the sim engine with no first-token latency, so that the",
      "engine costs next to nothing and the gateway path is what is measured. Every request is authenticated with a",
      "KV-backed API key in all configurations (cached after first use); \"limits on\" adds budget admission (a chunk",
      "leased from the budget's owner, admission from it in the gateway) and settlement. Limits are set far above the",
      `load, so nothing is refused. ${CONCURRENCY} closed-loop clients; ${ROUNDS} interleaved rounds of ${REQUESTS} requests per configuration.`,
      "",
    );
    lines.push("| configuration | requests | p50 ms | p90 ms | p99 ms | lease round trips / 1000 requests |", "|---|---:|---:|---:|---:|---:|");
    for (const s of stats) lines.push(`| ${s.name} | ${s.n} | ${f(s.p50)} | ${f(s.p90)} | ${f(s.p99)} | ${s.limits ? s.leasesPer1000.toFixed(2) : "-"} |`);
    lines.push("", "Added by rate-limit admission (limits on − limits off, same run):", "");
    lines.push("| gateways | p50 added ms | p99 added ms |", "|---:|---:|---:|");
    for (const g of [1, 3]) {
      const a = byName.get(`${g} gateway${g > 1 ? "s" : ""}, limits on`)!;
      const b = byName.get(`${g} gateway${g > 1 ? "s" : ""}, limits off`)!;
      lines.push(`| ${g} | ${f(a.p50 - b.p50)} | ${f(a.p99 - b.p99)} |`);
    }
    const coldA = sortN(coldAuth);
    lines.push("", "Authentication itself (the gateway's authenticator, in process, against the same JetStream KV):", "");
    lines.push("| case | p50 | p99 |", "|---|---:|---:|");
    lines.push(`| key cached (sha256 + cache lookup), ${warmIterations} calls | ${warmNs.toFixed(0)} ns (mean) | - |`);
    lines.push(`| key seen for the first time (one KV read), ${coldA.length} keys | ${f(percentile(coldA, 50))} ms | ${f(percentile(coldA, 99))} ms |`);
    lines.push("", "Admission itself (the gateway's rate limiter, in process, leasing from the live budget owner):", "");
    lines.push("| case | mean per request | lease round trips |", "|---|---:|---:|");
    lines.push(`| admit + settle, ${admissions} requests back to back | ${admissionNs.toFixed(0)} ns | ${inProcessLeases} |`);
    const fo = sortN(firstOn);
    const so = sortN(secondOn);
    const ff = sortN(firstOff);
    lines.push("", "First request of a new organization (key not cached; with limits on, its budget activated: an actor host claims it in KV):", "");
    lines.push("| case | requests | p50 ms | p99 ms |", "|---|---:|---:|---:|");
    lines.push(`| first request, limits off (cold key) | ${ff.length} | ${f(percentile(ff, 50))} | ${f(percentile(ff, 99))} |`);
    lines.push(`| first request, limits on (cold key + budget activation + first lease) | ${fo.length} | ${f(percentile(fo, 50))} | ${f(percentile(fo, 99))} |`);
    lines.push(`| second request, limits on (warm) | ${so.length} | ${f(percentile(so, 50))} | ${f(percentile(so, 99))} |`);
    lines.push("");
    const text = lines.join("\n");
    const dir = join(repoRoot, "bench", "results");
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, "auth-overhead.md"), text);
    process.stdout.write(text + "\n");
  } finally {
    for (const p of procs.reverse()) await p.kill().catch(() => {});
    await nats.stop().catch(() => {});
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`auth-overhead failed: ${(err as Error).stack ?? err}\n`);
    process.exit(1);
  },
);
