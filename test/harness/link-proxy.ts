import { connect, createServer, type Server, type Socket } from "node:net";

// A slow, lossy link as a TCP proxy (in the test process: this kernel has no netem). Each
// direction is delayed by half the round trip. Loss is modelled as TCP shows it to an
// application, not by dropping bytes (which would corrupt the stream, something real loss never
// does): a lost segment is retransmitted after the retransmission timeout, and TCP delivers in
// order, so that segment and everything after it on the connection arrive that much later. With
// probability `loss` per ~1460-byte segment a chunk is held back by max(200 ms, RTT) (Linux's
// RTO floor; small interactive flows rarely get the three duplicate ACKs of a fast retransmit).
// Order is always kept. A clean link (0 ms, no loss) forwards each chunk as it comes.

export interface LinkShape {
  /** Round-trip time added by the link. */
  rttMs: number;
  /** Probability that a segment is lost (0-1). */
  loss: number;
}

export const CLEAN_LINK: LinkShape = { rttMs: 0, loss: 0 };

const SEGMENT_BYTES = 1460;
/** Bytes queued in one direction before the sender is paused (back-pressure through the proxy). */
const QUEUE_HIGH_WATER = 4 * 1024 * 1024;

/** One direction of one connection: chunks released in order at their due times. */
class DelayedPipe {
  private readonly queue: Array<{ chunk: Buffer; due: number }> = [];
  private queuedBytes = 0;
  private lastDue = 0;
  private timer: NodeJS.Timeout | undefined;
  private ended = false;
  private pausedByQueue = false;

  constructor(
    private readonly from: Socket,
    private readonly to: Socket,
    private readonly shape: () => LinkShape,
    private readonly counters: { bytes: number; heldBack: number },
  ) {
    from.on("data", (chunk: Buffer) => this.push(chunk));
    from.on("end", () => {
      this.ended = true;
      this.flush();
    });
    to.on("drain", () => {
      if (!this.pausedByQueue) from.resume();
    });
  }

  private push(chunk: Buffer): void {
    this.counters.bytes += chunk.length;
    const { rttMs, loss } = this.shape();
    const now = Date.now();
    if (rttMs === 0 && loss === 0 && this.queue.length === 0) return this.write(chunk);
    const segments = Math.ceil(chunk.length / SEGMENT_BYTES);
    const lost = loss > 0 && Math.random() < 1 - (1 - loss) ** segments;
    if (lost) this.counters.heldBack++;
    const due = Math.max(now + rttMs / 2 + (lost ? Math.max(200, rttMs) : 0), this.lastDue);
    this.lastDue = due;
    this.queue.push({ chunk, due });
    this.queuedBytes += chunk.length;
    if (this.queuedBytes > QUEUE_HIGH_WATER && !this.pausedByQueue) {
      this.pausedByQueue = true;
      this.from.pause();
    }
    if (!this.timer) this.schedule();
  }

  private schedule(): void {
    const head = this.queue[0];
    if (!head) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.flush();
    }, Math.max(0, head.due - Date.now()));
  }

  private flush(): void {
    const now = Date.now();
    while (this.queue.length > 0 && this.queue[0]!.due <= now) {
      const { chunk } = this.queue.shift()!;
      this.queuedBytes -= chunk.length;
      this.write(chunk);
    }
    if (this.pausedByQueue && this.queuedBytes < QUEUE_HIGH_WATER / 2) {
      this.pausedByQueue = false;
      if (this.to.writableLength < this.to.writableHighWaterMark) this.from.resume();
    }
    if (this.queue.length > 0) {
      if (!this.timer) this.schedule();
    } else if (this.ended && !this.to.writableEnded) this.to.end();
  }

  private write(chunk: Buffer): void {
    if (this.to.destroyed) return;
    if (!this.to.write(chunk)) this.from.pause();
  }

  close(): void {
    clearTimeout(this.timer);
    this.queue.length = 0;
  }
}

export class LinkProxy {
  /** Bytes forwarded (both directions) and chunks held back as lost, since the start. */
  readonly counters = { bytes: 0, heldBack: 0 };
  private shape: LinkShape = CLEAN_LINK;
  private readonly sockets = new Set<Socket>();

  private constructor(
    /** What it is a link between (for reports). */
    readonly name: string,
    private readonly server: Server,
    readonly host: string,
    readonly port: number,
  ) {}

  /** A proxy listening on `listenHost` (a free port) that forwards each connection to `target`. */
  static async start(name: string, listenHost: string, target: { host: string; port: number }): Promise<LinkProxy> {
    const pipes = new Set<DelayedPipe>();
    let proxy: LinkProxy | undefined;
    const server = createServer({ allowHalfOpen: true, noDelay: true }, (client) => {
      const upstream = connect({ host: target.host, port: target.port, allowHalfOpen: true, noDelay: true });
      const shape = () => proxy!.shape;
      const both = [new DelayedPipe(client, upstream, shape, proxy!.counters), new DelayedPipe(upstream, client, shape, proxy!.counters)];
      for (const p of both) pipes.add(p);
      for (const s of [client, upstream]) proxy!.sockets.add(s);
      // One end failing ends the other (as a reset would reach it through a real link).
      const close = () => {
        for (const p of both) {
          p.close();
          pipes.delete(p);
        }
        client.destroy();
        upstream.destroy();
        proxy!.sockets.delete(client);
        proxy!.sockets.delete(upstream);
      };
      client.on("error", close).on("close", close);
      upstream.on("error", close).on("close", close);
    });
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(0, listenHost, () => resolve());
    });
    proxy = new LinkProxy(name, server, listenHost, (server.address() as { port: number }).port);
    return proxy;
  }

  /** The link's round trip and loss from now on (chunks already queued keep their times). */
  set(shape: LinkShape): void {
    this.shape = { ...shape };
  }

  get current(): LinkShape {
    return this.shape;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
