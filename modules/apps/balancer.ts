import { errors } from "../errors/mod.js";
import type { AppExchangeClient, AppExchangeRequest, ExchangeOutcome, ResponseSink } from "./exchange-client.js";
import type { AppHostDirectory, ServingInstance } from "./host-directory.js";
import type { AppService, HostedTarget } from "./service.js";

// Which instance of a deployment a hosted request goes to, and what happens when that instance
// cannot take it. The gateway sends each request to the serving instance (from the app hosts'
// heartbeats) with the fewest requests in flight from this gateway; with none serving (scaled to
// zero, or every instance lost) it asks the reconciler for one and waits for it (a cold start).
//
// A request goes to another instance when its first one failed it before the response head for a
// reason that is not the app's:
// - the host refused it (no such instance serves there any more): nothing reached the app, so
//   any request is retried;
// - the instance's host went silent or shut down before the host took the request (a request
//   with a body: no credit came back, so nothing of it reached the app): any request is retried;
// - the host went silent or shut down after it may have passed the request to the app: only
//   idempotent requests (IDEMPOTENT_METHODS) are retried, since the app may have acted on it;
//   others get a 502 `app_instance_lost`.
// A request during which the app itself failed (its connection broke: it crashed or was killed
// for its memory) is never retried, since the request may be what killed it; nor is anything
// once the response head was sent.

/**
 * Methods HTTP defines as idempotent (RFC 9110, 9.2.2), whose bodies the gateway does not relay:
 * sent twice, they do what once does. PUT is idempotent too, but its body streams through once
 * and is gone.
 */
export const IDEMPOTENT_METHODS: ReadonlySet<string> = new Set(["GET", "HEAD", "OPTIONS", "DELETE", "TRACE"]);

export interface AppBalancerOptions {
  /** Longest a request waits for an instance of a deployment that has none serving (a cold start). */
  coldStartTimeoutMs: number;
}

/** Instances one request is sent to at most. */
const MAX_ATTEMPTS = 4;
/** How often a request waiting for an instance repeats its demand and checks its deployment still runs. */
const DEMAND_EVERY_MS = 1_000;

export class AppBalancer {
  /** This gateway's requests in flight per instance id. */
  private readonly inFlight = new Map<string, number>();
  /** Where the scan for the least busy instance starts: rotates, so ties take turns. */
  private turn = 0;

  constructor(
    private readonly hosts: AppHostDirectory,
    private readonly exchanges: AppExchangeClient,
    private readonly apps: Pick<AppService, "resolve" | "isLive" | "demand">,
    private readonly options: AppBalancerOptions,
  ) {}

  /** Relays one request to an instance of the deployment `address` serves (`target`), retrying as the module's header says. */
  async relay(address: string, target: HostedTarget, request: Omit<AppExchangeRequest, "hostId" | "deploymentId" | "instanceId" | "timeouts">, sink: ResponseSink): Promise<void> {
    const body = request.body ? new SharedBody(request.body) : undefined;
    try {
      const deadline = performance.now() + this.options.coldStartTimeoutMs;
      const tried = new Set<string>();
      for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
        const instance = this.pick(target.deploymentId, tried) ?? (await this.awaitInstance(target, deadline, sink));
        if (!instance) return; // the client left while it waited
        tried.add(instance.instanceId);
        const outcome = await this.send(instance, target, { ...request, body: body?.view() }, sink);
        if (outcome === "done") return;
        if (outcome === "lost" && !IDEMPOTENT_METHODS.has(request.method))
          throw errors.appUnavailable("The app's host was lost while the app handled this request; it was not sent again, as it may have taken effect.", "app_instance_lost");
        if (outcome === "refused") {
          // A redeploy may have switched the address meanwhile: its route, read afresh.
          const fresh = await this.apps.resolve(address, true);
          if (!fresh || fresh.project !== target.project) break;
          target = fresh;
        }
      }
      throw errors.appUnavailable("The app has no healthy instance right now. Please retry shortly.", "app_not_running");
    } finally {
      await body?.close();
    }
  }

  /** The serving instance with the fewest of this gateway's requests in flight, other than `avoid`'s. */
  private pick(deploymentId: string, avoid: ReadonlySet<string>): ServingInstance | undefined {
    const serving = this.hosts.servingInstances(deploymentId);
    const n = serving.length;
    if (n === 0) return undefined;
    const start = this.turn++ % n;
    let best: ServingInstance | undefined;
    let fewest = Infinity;
    for (let k = 0; k < n; k++) {
      const candidate = serving[(start + k) % n]!;
      if (avoid.has(candidate.instanceId)) continue;
      const load = this.inFlight.get(candidate.instanceId) ?? 0;
      if (load < fewest) {
        best = candidate;
        fewest = load;
      }
    }
    return best;
  }

  /**
   * Waits for an instance to serve the deployment, asking the reconciler for one (again every
   * second, in case the reconciler moved): undefined when the client left. Throws when the
   * deployment ended, or at the deadline.
   */
  private async awaitInstance(target: HostedTarget, deadline: number, sink: ResponseSink): Promise<ServingInstance | undefined> {
    for (;;) {
      if (!sink.live) return undefined;
      if (!(await this.apps.isLive(target))) throw errors.appUnavailable("The app's deployment is not running: it failed or was stopped.", "app_not_running");
      this.apps.demand(target);
      const left = deadline - performance.now();
      if (left <= 0) throw errors.appUnavailable(`No instance of the app answered within ${Math.round(this.options.coldStartTimeoutMs / 1000)} s. Please retry shortly.`, "app_not_running");
      await this.hosts.nextServing(target.deploymentId, Math.min(left, DEMAND_EVERY_MS));
      // After a wait, any serving instance will do, even one tried before (it may have restarted).
      const instance = this.pick(target.deploymentId, NONE);
      if (instance) return instance;
    }
  }

  private async send(instance: ServingInstance, target: HostedTarget, request: Omit<AppExchangeRequest, "hostId" | "deploymentId" | "instanceId" | "timeouts">, sink: ResponseSink): Promise<ExchangeOutcome> {
    const id = instance.instanceId;
    this.inFlight.set(id, (this.inFlight.get(id) ?? 0) + 1);
    try {
      return await this.exchanges.exchange({ ...request, hostId: instance.hostId, deploymentId: target.deploymentId, instanceId: id, timeouts: target.timeouts }, sink);
    } finally {
      const left = (this.inFlight.get(id) ?? 1) - 1;
      if (left > 0) this.inFlight.set(id, left);
      else this.inFlight.delete(id);
    }
  }
}

const NONE: ReadonlySet<string> = new Set();

/**
 * A request body offered to one attempt after another: they share one reader, and an attempt
 * that ends does not close it (an attempt is retried only when nothing of the body was read);
 * closed once, after the last.
 */
class SharedBody {
  private readonly chunks: AsyncIterator<Uint8Array>;

  constructor(body: AsyncIterable<Uint8Array>) {
    this.chunks = body[Symbol.asyncIterator]();
  }

  view(): AsyncIterable<Uint8Array> {
    const chunks = this.chunks;
    return { [Symbol.asyncIterator]: () => ({ next: () => chunks.next(), return: async () => ({ done: true, value: undefined }) }) };
  }

  async close(): Promise<void> {
    await this.chunks.return?.().catch(() => undefined);
  }
}
