import type { AccountStore } from "./account-store.js";
import type { Logger } from "../../lib/log.js";

/**
 * Records when each key was last used without a KV write per request: uses are noted in memory
 * and written in one pass every `flushMs` (a key's stored time is at most that much behind).
 */
export class LastUsedRecorder {
  private pending = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> | undefined;

  constructor(private readonly store: AccountStore, private readonly flushMs: number, private readonly log: Logger) {}

  start(): void {
    this.timer = setInterval(() => void this.flush(), this.flushMs);
    this.timer.unref();
  }

  touch(keyId: string): void {
    this.pending.set(keyId, Math.floor(Date.now() / 1000));
  }

  async flush(): Promise<void> {
    if (this.flushing) return this.flushing;
    if (this.pending.size === 0) return;
    const batch = this.pending;
    this.pending = new Map();
    this.flushing = (async () => {
      for (const [keyId, at] of batch) {
        try {
          await this.store.recordLastUsed(keyId, at);
        } catch (err) {
          this.log.warn("could not record a key's last use", { keyId, err });
        }
      }
    })().finally(() => (this.flushing = undefined));
    return this.flushing;
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.flush();
  }
}
