import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { errors } from "../errors/mod.js";
import { subjects } from "../../lib/nats/subjects.js";
import { fromRoom, memoryOf, shortage, type SandboxNeed } from "./admission.js";
import { encodeJson, execEvent, hostCall, hostHeartbeat, hostReply, type ExecEvent, type HostCall, type HostHeartbeat, type HostReply } from "./protocol.js";

interface HostView extends HostHeartbeat {
  lastSeen: number;
}

export type Placement = { kind: "placed"; host: HostHeartbeat } | { kind: "none" } | { kind: "full"; detail: string };

/**
 * The sandbox hosts a process knows of, from their heartbeats: which are alive, how much room
 * each has (for placement), which sandboxes each runs (for the sweeper).
 */
export class SandboxHostDirectory {
  private readonly hosts = new Map<string, HostView>();
  private subscription: Subscription | undefined;

  constructor(private readonly nc: NatsConnection, private readonly hostTimeoutMs: number) {}

  start(): void {
    this.subscription = this.nc.subscribe(subjects.sandboxHostHeartbeat, {
      callback: (err, msg) => {
        if (err) return;
        try {
          const beat = hostHeartbeat.parseBytes(msg.subject, msg.data);
          this.hosts.set(beat.host_id, { ...beat, lastSeen: performance.now() });
        } catch {
          // a heartbeat that does not decode leaves the host looking silent
        }
      },
    });
  }

  stop(): void {
    this.subscription?.unsubscribe();
  }

  /** The host's last heartbeat when it is alive (heard from within the host timeout). */
  alive(hostId: string): HostHeartbeat | undefined {
    const h = this.hosts.get(hostId);
    return h && performance.now() - h.lastSeen <= this.hostTimeoutMs ? h : undefined;
  }

  /**
   * A live, ready host with room for the sandbox (admission.ts's rule on its last heartbeat): the
   * one with the most memory free. Else "none" (no such host heard from) or "full", saying why.
   */
  place(need: SandboxNeed & { egress?: boolean }): Placement {
    let best: HostView | undefined;
    let roomiest: { host: HostView; detail: string } | undefined;
    let live = 0;
    for (const h of this.hosts.values()) {
      if (!this.alive(h.host_id) || h.state !== "ready" || (need.egress && !h.egress)) continue;
      live++;
      const { budget, reserved } = fromRoom(h);
      const short = shortage(budget, reserved, need);
      if (short) {
        if (!roomiest || h.memory_mb_free > roomiest.host.memory_mb_free) roomiest = { host: h, detail: short.detail };
        continue;
      }
      if (!best || h.memory_mb_free > best.memory_mb_free) best = h;
    }
    if (best) {
      // Count it now: the next placement before its heartbeat sees the room this one takes.
      best.sandboxes_running++;
      best.cpu_mhz_free -= need.cpu_mhz;
      best.memory_mb_free -= memoryOf(need);
      return { kind: "placed", host: best };
    }
    if (!roomiest) return { kind: "none" };
    return { kind: "full", detail: live > 1 ? `${live} hosts, the roomiest: ${roomiest.detail}` : roomiest.detail };
  }

  /** Whether any live host offers network egress (undefined: no host heard from yet). */
  offersEgress(): boolean | undefined {
    let heard = false;
    for (const h of this.hosts.values()) {
      if (!this.alive(h.host_id)) continue;
      heard = true;
      if (h.egress) return true;
    }
    return heard ? false : undefined;
  }

  /** The largest sandbox any live host could hold (its totals), to refuse what fits nowhere. */
  largest(): { cpu_mhz: number; memory_mb: number } | undefined {
    let out: { cpu_mhz: number; memory_mb: number } | undefined;
    for (const h of this.hosts.values()) {
      if (!this.alive(h.host_id)) continue;
      out = { cpu_mhz: Math.max(out?.cpu_mhz ?? 0, h.cpu_mhz_total), memory_mb: Math.max(out?.memory_mb ?? 0, h.memory_mb_total) };
    }
    return out;
  }
}

/** Calls to sandbox hosts over NATS request/reply; a host that does not answer is Unavailable. */
export class SandboxHostClient {
  constructor(private readonly nc: NatsConnection) {}

  async call(hostId: string, call: HostCall, timeoutMs: number): Promise<HostReply> {
    hostCall.decode("outgoing sandbox call", call); // a bug here is ours, not the host's
    let msg;
    try {
      msg = await this.nc.request(subjects.sandboxHostRpc(hostId), encodeJson(call), { timeout: timeoutMs });
    } catch {
      throw errors.unavailable("The sandbox's host did not answer. Please retry shortly.", 1);
    }
    return hostReply.parseBytes(msg.subject, msg.data);
  }

  /** Subscribes to a streamed exec's events before it is started; `onEvent` gets each one decoded. */
  subscribeExec(execId: string, onEvent: (event: ExecEvent) => void): Subscription {
    return this.nc.subscribe(subjects.sandboxExecEvents(execId), {
      callback: (err, msg) => {
        if (err) return;
        try {
          onEvent(execEvent.parseBytes(msg.subject, msg.data));
        } catch {
          onEvent({ t: "error", message: "an output event of the command did not decode" });
        }
      },
    });
  }
}
