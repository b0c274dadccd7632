import type { SseOutput } from "../../gateway/sse/sse-writer.js";

/**
 * An SseOutput for unit tests of the SSE streams: it records each write (and the end's final
 * frames) as written, and lets the test play the socket's backpressure by hand (fillUp, catchUp).
 */
export class RecordedSseOutput implements SseOutput {
  /** Each write (and the end's final frames), as written. */
  readonly writes: string[] = [];
  /** Each pending-bytes figure the stream reported, in order. */
  readonly holds: number[] = [];
  ended = false;
  dropped = false;
  private behind = false;
  private held = 0;
  private drain: (() => void) | undefined;

  /** `maxPendingBytes` plays the gateway's pending budget for this one stream. */
  constructor(private readonly maxPendingBytes: number) {}

  hold(bytes: number): void {
    this.held = bytes;
    this.holds.push(bytes);
  }
  get overLimit(): boolean {
    return this.held > this.maxPendingBytes;
  }
  drop(): void {
    if (this.ended) throw new Error("dropped after end");
    this.dropped = true;
    this.ended = true;
  }
  get writable(): boolean {
    return !this.behind && !this.ended;
  }
  get closed(): boolean {
    return this.ended;
  }
  onDrain(handler: () => void): void {
    this.drain = handler;
  }
  write(frames: string | Uint8Array): boolean {
    if (this.ended) throw new Error("write after end");
    // Bytes are copied now, as uWS does: the writer may reuse its buffer after the call.
    this.writes.push(typeof frames === "string" ? frames : Buffer.from(frames).toString("utf8"));
    return this.writable;
  }
  end(finalFrames = ""): void {
    if (this.ended) throw new Error("ended twice");
    this.writes.push(finalFrames);
    this.ended = true;
  }
  /** The socket's buffer is full: the producer must hold its output. */
  fillUp(): void {
    this.behind = true;
  }
  /** The client read everything: the producer may write again. */
  catchUp(): void {
    this.behind = false;
    this.drain?.();
  }
  /** Every SSE frame written, in order, as text. */
  get frames(): string[] {
    return this.writes.join("").split(/(?<=\n\n)/).filter(Boolean);
  }
  /** Every SSE data frame written so far, in order ("[DONE]" as a string, the rest parsed). */
  get events(): unknown[] {
    return this.writes.join("").split("\n\n").filter(Boolean).map((frame) => {
      if (!frame.startsWith("data: ")) throw new Error(`not an SSE data frame: ${frame}`);
      const data = frame.slice(6);
      return data === "[DONE]" ? data : JSON.parse(data);
    });
  }
  /** Every named SSE event written so far ("event: <type>" and a data line of that type), parsed. */
  get namedEvents(): Array<Record<string, unknown>> {
    return this.frames.map((frame) => {
      const m = /^event: ([^\n]*)\ndata: ([^\n]*)\n\n$/.exec(frame);
      if (!m) throw new Error(`not an SSE event frame: ${JSON.stringify(frame)}`);
      const data = JSON.parse(m[2]!) as Record<string, unknown>;
      if (data.type !== m[1]) throw new Error(`event name ${m[1]} differs from type ${String(data.type)}`);
      return data;
    });
  }
}
