import { ArtifactStore } from "../../modules/artifacts/mod.js";
import { PeriodicSweep } from "../periodic-sweep.js";

/**
 * Deletes unfinished multipart uploads past their expiry (record and parts) and the leftovers of
 * interrupted uploads (objects no record wants, chunks of puts cut off by a crash) once they have
 * been idle for the upload expiry, every `intervalMs`. Reads already treat an expired upload as
 * gone; this reclaims the storage.
 */
export function artifactSweeper(intervalMs: number, uploadTtlS: number): PeriodicSweep {
  return new PeriodicSweep("artifact-sweeper", intervalMs, async (ctx) => {
    const store = await ArtifactStore.open(ctx.nc);
    return async () => {
      const { expired, orphans, undecodable } = await store.sweep(uploadTtlS * 1000);
      if (expired || orphans) ctx.log.info("artifact sweep", { expired, orphans });
      if (undecodable.length > 0) ctx.log.error("artifact records that do not decode were left alone", { keys: undecodable.slice(0, 20), count: undecodable.length });
    };
  });
}
