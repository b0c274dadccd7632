import type { Logger } from "../../lib/log.js";
import * as states from "./deployment-states.js";
import { nowSeconds, type DeploymentStore } from "./deployments.js";
import type { AppHostDirectory } from "./service.js";

/**
 * The backstop of deployments, run by actor hosts: a deployment whose app host went silent ends
 * as failed (host_lost) and stops serving its address (the route is dropped, so the address
 * answers 404 rather than wait on a dead host); one stuck pending or starting ends as failed.
 * App hosts write every other end themselves. Several sweepers may run: every change is a
 * compare-and-set on a live record.
 */
export class AppDeploymentSweeper {
  private readonly startedAt = performance.now();

  constructor(
    private readonly store: DeploymentStore,
    private readonly hosts: AppHostDirectory,
    private readonly hostTimeoutMs: number,
    private readonly log: Logger,
  ) {}

  async sweep(): Promise<{ lost: number; stuck: number }> {
    const counts = { lost: 0, stuck: 0 };
    // Right after a restart no heartbeat has arrived yet: every host would look lost.
    if (performance.now() - this.startedAt <= this.hostTimeoutMs) return counts;
    const now = nowSeconds();
    for (const record of await this.store.all()) {
      const { deployment, project, host_id: hostId, manifest } = record;
      const wrong = states.verdict(deployment, now, this.hosts.alive(hostId));
      if (!wrong) continue;
      const ending = states.placementFailed(wrong, wrong === "host_lost" ? "the app host stopped answering" : "the deployment did not start in time");
      await this.store.transition(project, deployment.id, (cur) => states.end(cur, ending, now));
      await this.store.dropRoute(manifest.projectSlug, manifest.organizationSlug, deployment.id);
      counts[wrong === "host_lost" ? "lost" : "stuck"]++;
    }
    if (counts.lost || counts.stuck) this.log.info("app deployment sweep", counts);
    return counts;
  }
}
