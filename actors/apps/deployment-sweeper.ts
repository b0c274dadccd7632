import { AppDeploymentSweeper, AppHostDirectory, DeploymentStore } from "../../modules/apps/mod.js";
import { PeriodicSweep } from "../periodic-sweep.js";

/**
 * Ends deployments whose app host was lost (host_lost, and their address stops routing to it)
 * or that never started, every `intervalMs` (see AppDeploymentSweeper).
 */
export function appDeploymentSweeper(intervalMs: number, hostTimeoutMs: number): PeriodicSweep {
  return new PeriodicSweep("app-deployment-sweeper", intervalMs, async (ctx) => {
    const hosts = new AppHostDirectory(ctx.nc, hostTimeoutMs);
    hosts.start();
    const sweeper = new AppDeploymentSweeper(await DeploymentStore.open(ctx.nc), hosts, hostTimeoutMs, ctx.log);
    return async () => {
      await sweeper.sweep();
    };
  });
}
