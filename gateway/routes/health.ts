import type { NatsConnection } from "@nats-io/transport-node";
import type { Router } from "../http/router.js";

/** Unauthenticated probes for process supervisors and Kubernetes. */
export function registerHealthRoutes(router: Router, nc: NatsConnection, isDraining: () => boolean): void {
  router.get("/healthz", (ex) => ex.json(200, { status: "ok" }), { public: true });
  router.get(
    "/readyz",
    (ex) => {
      const ready = !nc.isClosed() && !isDraining();
      ex.json(ready ? 200 : 503, { status: ready ? "ready" : "not ready" });
    },
    { public: true },
  );
}
