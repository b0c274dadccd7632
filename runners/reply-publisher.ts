import type { Outbox } from "../lib/nats/outbox.js";
import {
  ErrorCode,
  RunnerEvent,
  type Error as ProtoError,
  type FinishReason,
  type ToolCallDelta,
} from "../proto/gen/tributary/v1/inference.js";
import type { Logger } from "../lib/log.js";
import type { RequestObserver } from "./scheduler/scheduler.js";

/** Publishes one request's events, numbered from 1, on the reply subject its gateway named. */
export class ReplyPublisher implements RequestObserver {
  private seq = 0;
  private readonly startedAt = performance.now();
  private firstDeltaAt = 0;

  constructor(
    private readonly outbox: Outbox,
    private readonly subject: string,
    private readonly requestId: string,
    private readonly runnerId: string,
    private readonly log: Logger,
    private readonly onFinished: (completionTokens: number) => void = () => {},
  ) {}

  delta(choiceIndex: number, text: string, tokens: number): void {
    if (this.firstDeltaAt === 0) this.firstDeltaAt = performance.now();
    this.send({ $case: "delta", value: { choiceIndex, text, toolCalls: [], tokens } });
  }

  toolCall(choiceIndex: number, delta: ToolCallDelta): void {
    this.send({ $case: "delta", value: { choiceIndex, text: "", toolCalls: [delta], tokens: 0 } });
  }

  choiceEnd(choiceIndex: number, finishReason: FinishReason, completionTokens: number): void {
    this.send({ $case: "choiceEnd", value: { choiceIndex, finishReason, completionTokens } });
  }

  choiceReset(choiceIndex: number): void {
    this.send({ $case: "choiceReset", value: { choiceIndex } });
  }

  final(promptTokens: number, completionTokens: number, error?: ProtoError): void {
    this.send({ $case: "final", value: { usage: { promptTokens, completionTokens }, error } });
    this.onFinished(completionTokens);
    if (this.log.enabled("debug"))
      this.log.debug("request finished", {
        requestId: this.requestId,
        promptTokens,
        completionTokens,
        error: error ? ErrorCode[error.code] : undefined,
        firstDeltaMs: this.firstDeltaAt ? Math.round(this.firstDeltaAt - this.startedAt) : undefined,
        ms: Math.round(performance.now() - this.startedAt),
      });
  }

  private send(event: RunnerEvent["event"]): void {
    const bytes = RunnerEvent.encode({ requestId: this.requestId, seq: ++this.seq, runnerId: this.runnerId, event }).finish();
    this.outbox.publish(this.subject, bytes);
  }
}
