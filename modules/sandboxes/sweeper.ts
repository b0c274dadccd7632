import type { Logger } from "../../lib/log.js";
import type { SandboxHostClient, SandboxHostDirectory } from "./client.js";
import { nowSeconds, type SandboxStore } from "./records.js";
import * as states from "./sandbox-states.js";
/** How often a sweeper reads every record to adopt live ones the live indexes lack (also on its first sweep). */
const FULL_SCAN_MS = 30 * 60_000;

/**
 * The backstop of sandbox lifetimes, run by actor hosts: records whose host went silent end as
 * failed (host_lost); records past their deadline whose host is alive are stopped through it; a
 * record stuck in starting ends as failed. Hosts end their own sandboxes on time; this catches
 * what a dead host or a lost message leaves behind, after any restart (it reads only KV and
 * heartbeats). Several sweepers may run: every change is a compare-and-set on a live record.
 */
export class SandboxSweeper {
  private readonly startedAt = performance.now();
  private lastFullScan: number | undefined;

  constructor(
    private readonly store: SandboxStore,
    private readonly directory: SandboxHostDirectory,
    private readonly hosts: SandboxHostClient,
    private readonly hostTimeoutMs: number,
    private readonly log: Logger,
  ) {}

  async sweep(): Promise<{ lost: number; expired: number; stuck: number }> {
    const counts = { lost: 0, expired: 0, stuck: 0 };
    // Right after a restart no heartbeat has arrived yet: every host would look lost.
    const heardLongEnough = performance.now() - this.startedAt > this.hostTimeoutMs;
    const now = nowSeconds();
    // The live indexes are the sweeper's view (bounded by what runs, not by 7 days of history);
    // a rare full scan repairs what they lack (records from before them, an index that expired).
    if (this.lastFullScan === undefined || performance.now() - this.lastFullScan > FULL_SCAN_MS) {
      this.lastFullScan = performance.now();
      const adopted = await this.store.adoptUnindexed();
      if (adopted > 0) this.log.info("sandbox sweep adopted unindexed live records", { adopted });
    }
    for (const record of await this.store.live()) {
      const { sandbox, project, host_id: hostId } = record;
      const wrong = states.verdict(sandbox, now, this.directory.alive(hostId) !== undefined);
      if (wrong === "host_lost") {
        if (!heardLongEnough) continue;
        await this.store.transition(project, sandbox.id, (s) => states.end(s, "host_lost", nowSeconds(), "the sandbox host stopped answering"));
        counts.lost++;
      } else if (wrong === "stuck") {
        await this.hosts.call(hostId, { op: "stop", project, sandbox_id: sandbox.id, reason: "error" }, 5_000).catch(() => undefined);
        await this.store.transition(project, sandbox.id, (s) => states.end(s, "error", nowSeconds(), "the sandbox did not start in time"));
        counts.stuck++;
      } else if (wrong === "expired") {
        const reply = await this.hosts.call(hostId, { op: "stop", project, sandbox_id: sandbox.id, reason: "timeout" }, 5_000).catch(() => undefined);
        if (!reply?.ok) await this.store.transition(project, sandbox.id, (s) => states.end(s, "timeout", nowSeconds()));
        counts.expired++;
      }
    }
    if (counts.lost || counts.expired || counts.stuck) this.log.info("sandbox sweep", counts);
    return counts;
  }
}
