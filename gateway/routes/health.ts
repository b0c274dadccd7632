import type { Router } from "../http/router.js";

export interface Readiness {
  /** Connected to a NATS server now. */
  natsConnected(): boolean;
  draining(): boolean;
  /** Runners this gateway hears from that are ready to serve (any model). */
  readyRunners(): number;
}

/**
 * Unauthenticated probes for process supervisors and Kubernetes. Liveness says only that the
 * process answers HTTP: it never depends on NATS, so an outage does not restart every gateway.
 * Readiness is what a load balancer needs: connected to NATS, at least one runner ready, not
 * draining (per-model readiness is in GET /v1/models).
 */
export function registerHealthRoutes(router: Router, readiness: Readiness): void {
  router.get("/healthz", (ex) => ex.json(200, { status: "ok" }), { public: true });
  router.get(
    "/readyz",
    (ex) => {
      const nats = readiness.natsConnected();
      const runners = readiness.readyRunners();
      const draining = readiness.draining();
      const ready = nats && runners > 0 && !draining;
      ex.json(ready ? 200 : 503, { status: ready ? "ready" : "not ready", nats: nats ? "connected" : "disconnected", ready_runners: runners, draining });
    },
    { public: true },
  );
}
