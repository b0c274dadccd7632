import { FileStore } from "../../modules/files/mod.js";
import { PeriodicSweep } from "../periodic-sweep.js";

/**
 * Deletes expired files (their metadata and contents) and the leftovers of interrupted uploads,
 * every `intervalMs`. Reads already treat an expired file as gone; this reclaims the storage.
 * Several hosts may sweep at once: every deletion is idempotent.
 */
export function fileSweeper(intervalMs: number): PeriodicSweep {
  return new PeriodicSweep("file-sweeper", intervalMs, async (ctx) => {
    const store = await FileStore.open(ctx.nc);
    return async () => {
      const { expired, orphans, undecodable } = await store.sweep();
      if (expired || orphans) ctx.log.info("file sweep", { expired, orphans });
      if (undecodable.length > 0) ctx.log.error("file records that do not decode were left alone", { keys: undecodable.slice(0, 20), count: undecodable.length });
    };
  });
}
