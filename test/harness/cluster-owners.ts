import { readdirSync, readFileSync } from "node:fs";
import { Kvm } from "@nats-io/kv";
import { buckets, kvToken, subjects } from "../../lib/nats/subjects.js";
import { RECONCILER_KEY } from "../../modules/apps/mod.js";
import { appDir, localManifest, untilDeployment, uploadBundle, waitForDeployment } from "./apps.js";
import { bystanderCatalog } from "./bystander.js";
import type { ClusterStack } from "./cluster.js";
import { placeByTraces, runLoad, tallyWindows, type Outcome, type WindowTally } from "./load.js";
import { connectAs, TEST_KEY, type ActorHost } from "./processes.js";
import { until } from "./until.js";

// What the actor host that owns things (the rate-limit budgets, the app reconciler) may never do
// twice, watched from outside while it is cut off or killed: a model with a tight budget under a
// demand far above it (no window may admit more than its limit), and a deployed app whose running
// instances are counted from the processes themselves (never more than its max_instances).
// Shared by test/e2e/cluster/partitions.test.ts and bench/cluster-partitions.ts.

export const TIGHT_MODEL = "test/sim-tight";
/** Requests a window admits, of TIGHT_MODEL (the catalog's limits apply per window). */
export const TIGHT_LIMIT = 30;
export const BUDGET_WINDOW_MS = 2_000;
export const APP_MAX_INSTANCES = 2;

/** Environment of a cluster with the tight model, short budget windows and quick app reconciling. */
export function ownersEnv(): NodeJS.ProcessEnv {
  return {
    TRIBUTARY_CATALOG: bystanderCatalog([
      {
        id: TIGHT_MODEL,
        engine: "sim",
        context_length: 2048,
        max_output_tokens: 64,
        slots: 32,
        queue_limit: 256,
        sim: { tokens_per_second: 1000, first_token_latency_ms: 0 },
        rate_limits: { requests_per_minute: TIGHT_LIMIT, tokens_per_minute: 10_000_000 },
      },
    ]),
    TRIBUTARY_RATE_LIMIT_WINDOW_MS: String(BUDGET_WINDOW_MS),
    // A round every 250 ms: the reconciler's lease lapses after 3 s without a renewal.
    TRIBUTARY_APP_RECONCILE_MS: "250",
    TRIBUTARY_APP_HOST_TIMEOUT_MS: "3000",
    TRIBUTARY_APP_SCALE_DOWN_DELAY_MS: "3000",
  };
}

/** App hosts of a small fixed capacity, without the egress probe (apps have no network anyway). */
export const ownersAppHostEnv: NodeJS.ProcessEnv = { TRIBUTARY_APP_MEMORY_MB: "1024", TRIBUTARY_APP_CPU_MHZ: "2000", TRIBUTARY_SANDBOX_EGRESS: "off" };

/** The closed-loop demand on TIGHT_MODEL, and what each budget window admitted. */
export class BudgetWatch {
  private stopped = false;
  private readonly run: Promise<Outcome[]>;
  readonly startedAt = Date.now();

  constructor(private readonly urls: string[]) {
    this.run = runLoad({
      urls,
      clientsPerGateway: 3,
      apiKey: TEST_KEY,
      // Traced: each admission's time, as the gateway saw it, places it in its window (placeByTraces).
      body: { model: TIGHT_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 1, log: true },
      windowMs: BUDGET_WINDOW_MS,
      pauseAfterRefusalMs: 25,
      until: () => this.stopped,
    });
  }

  /** Ends the load: every whole window it spanned, and how many admissions went over the limit. */
  async stop(): Promise<{ windows: WindowTally[]; over: number; overDetail: string; unplaced: number; admitted: number; refused: number; unavailable: number; outcomes: Outcome[] }> {
    const stoppedAt = Date.now();
    this.stopped = true;
    const outcomes = await this.run;
    const unplaced = await placeByTraces(outcomes, BUDGET_WINDOW_MS, TIGHT_MODEL, this.startedAt, this.urls[0]!, TEST_KEY);
    const windows = tallyWindows(outcomes, BUDGET_WINDOW_MS, this.startedAt, stoppedAt);
    // A window over its limit, told in full: each admission's send and reply, ms into the window.
    const overDetail = windows
      .filter((w) => w.admitted > TIGHT_LIMIT)
      .map((w) => `window ${w.window}: ${outcomes.filter((o) => o.status === 200 && o.window === w.window).map((o) => `${o.sent - w.window * BUDGET_WINDOW_MS}..${o.at - w.window * BUDGET_WINDOW_MS} ${o.requestId}`).join(" ")}`)
      .join("; ");
    return {
      windows,
      overDetail,
      unplaced,
      over: windows.reduce((n, w) => n + Math.max(0, w.admitted - TIGHT_LIMIT), 0),
      admitted: outcomes.filter((o) => o.status === 200).length,
      refused: outcomes.filter((o) => o.status === 429).length,
      unavailable: outcomes.filter((o) => o.status !== 200 && o.status !== 429).length,
      outcomes,
    };
  }
}

/**
 * App instances running now on the app hosts `hostIds`, by instance id, from the processes
 * themselves: each instance's bubblewrap binds its run directory, <tmp>/tributary-apps-<host>/run/<instance>.
 */
export function runningInstances(hostIds: readonly string[]): Set<string> {
  const found = new Set<string>();
  const pattern = /tributary-apps-([A-Za-z0-9_-]+)\/run\/([A-Za-z0-9_-]+)/;
  for (const pid of readdirSync("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    let cmdline: string;
    try {
      cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
    } catch {
      continue; // gone meanwhile
    }
    if (!cmdline.startsWith("bwrap")) continue;
    const m = pattern.exec(cmdline);
    if (m && hostIds.includes(m[1]!)) found.add(m[2]!);
  }
  return found;
}

/** Samples the running instances every 100 ms: the most seen at once, and when. */
export class InstanceCensus {
  most = 0;
  mostAt = 0;
  samples = 0;
  private readonly timer: NodeJS.Timeout;

  constructor(readonly hostIds: readonly string[]) {
    this.timer = setInterval(() => {
      const n = runningInstances(hostIds).size;
      this.samples++;
      if (n > this.most) {
        this.most = n;
        this.mostAt = Date.now();
      }
    }, 100);
  }

  stop(): void {
    clearInterval(this.timer);
  }
}

/** An app answering after 3 s on /hold: held requests past target_inflight scale it up to max_instances. */
const HOLD_APP = `
import asyncio
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["path"] == "/hold":
        await asyncio.sleep(3)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})
`;

/** Deploys HOLD_APP (min 1, max APP_MAX_INSTANCES, target_inflight 1) through `gatewayUrl`; its id, once healthy. */
export async function deployScalingApp(gatewayUrl: string): Promise<string> {
  const scaling = `min_instances: 1\nmax_instances: ${APP_MAX_INSTANCES}\ntarget_inflight: 1\n`;
  const artifact = await uploadBundle(gatewayUrl, TEST_KEY, appDir(undefined, { "app.py": HOLD_APP, "tributary.yaml": localManifest(250, scaling) }));
  const res = await fetch(`${gatewayUrl}/v1/apps/deployments`, { method: "POST", body: JSON.stringify({ artifact_id: artifact }), headers: { authorization: `Bearer ${TEST_KEY}`, "content-type": "application/json" } });
  const body = (await res.json()) as { id?: string };
  if (res.status !== 201 || !body.id) throw new Error(`deploy: ${res.status} ${JSON.stringify(body)}`);
  const d = await waitForDeployment(gatewayUrl, TEST_KEY, body.id, ["healthy", "failed"], 60_000);
  if (d.status !== "healthy") throw new Error(`the app did not deploy: ${JSON.stringify(d)}`);
  return body.id;
}

/** Healthy instances of the deployment, as the API lists them. */
export async function healthyInstances(gatewayUrl: string, id: string, want: (n: number) => boolean, what: string, timeoutMs = 30_000): Promise<number> {
  const d = await untilDeployment(gatewayUrl, TEST_KEY, id, (d) => want(d.instances.filter((i: any) => i.status === "healthy").length), what, timeoutMs);
  return d.instances.filter((i: any) => i.status === "healthy").length;
}

/** Requests held by the app (3 s each), `concurrency` at a time over the gateways, until stopped: the demand that scales it up. */
export function holdDemand(urls: string[], concurrency: number): { stop(): Promise<{ ok: number; failed: number; answeredAt: number[] }> } {
  let stopped = false;
  const counts = { ok: 0, failed: 0, answeredAt: [] as number[] };
  const worker = async (i: number) => {
    while (!stopped) {
      const res = await fetch(`${urls[i % urls.length]}/apps/local/default-project/hold`, { headers: { authorization: `Bearer ${TEST_KEY}` }, signal: AbortSignal.timeout(20_000) }).catch(() => undefined);
      await res?.text().catch(() => undefined);
      if (res?.status === 200) {
        counts.ok++;
        counts.answeredAt.push(Date.now());
      }
      else {
        counts.failed++;
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  };
  const workers = Array.from({ length: concurrency }, (_, i) => worker(i));
  return {
    async stop() {
      stopped = true;
      await Promise.all(workers);
      return counts;
    },
  };
}

/**
 * Which actor host (index; -1: none) each owned thing names as its owner: the TIGHT_MODEL budget,
 * the app reconciler. Read from the store, retried through a failover (for up to a minute).
 */
export async function owners(cluster: Pick<ClusterStack, "nats" | "actors">): Promise<{ budget: number; reconciler: number }> {
  let result: { budget: number; reconciler: number } | undefined;
  await until(async () => {
    const nc = await connectAs(cluster.nats.url);
    try {
      const limits = await new Kvm(nc).open(buckets.rateLimits);
      const deployments = await new Kvm(nc).open(buckets.appDeployments);
      const budget = (await limits.get(`${kvToken(TIGHT_MODEL)}.organization.org-local`))?.json<{ owner: string }>().owner ?? "";
      const reconciler = (await deployments.get(RECONCILER_KEY))?.json<{ owner: string }>().owner ?? "";
      result = { budget: actorNamed(cluster.actors, budget), reconciler: actorNamed(cluster.actors, reconciler) };
      return true;
    } catch {
      return false;
    } finally {
      await nc.close().catch(() => undefined);
    }
  }, "the owners' records to be read", 60_000);
  return result!;
}

/** The actor host whose log names `id` as its budgets' or reconciler's ("rate-limit budgets ready", "reconciling app deployments"); -1 when none. */
export function actorNamed(actors: readonly ActorHost[], id: string): number {
  if (!id) return -1;
  return actors.findIndex((a) => a.logs.some((r) => r.hostId === id || r.reconcilerId === id));
}

/** The actor hosts that say they reconcile now (each asked on its probe subject; one that does not answer says nothing). */
export async function selfDeclaredReconcilers(cluster: Pick<ClusterStack, "nats" | "actors">): Promise<number[]> {
  const nc = await connectAs(cluster.nats.url);
  try {
    const says = await Promise.all(
      cluster.actors.map(async (a, i) => {
        const ids = new Set(a.logs.filter((r) => r.msg === "reconciling app deployments").map((r) => String(r.reconcilerId)));
        for (const id of ids) {
          const reply = await nc.request(subjects.appReconcilerProbe(id), new Uint8Array(), { timeout: 1_000 }).catch(() => undefined);
          if (reply && (reply.json<{ owns: boolean }>()).owns) return i;
        }
        return -1;
      }),
    );
    return says.filter((i) => i >= 0);
  } finally {
    await nc.close();
  }
}
