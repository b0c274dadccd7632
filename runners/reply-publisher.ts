import type { NatsConnection } from "@nats-io/transport-node";
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

  constructor(
    private readonly nc: NatsConnection,
    private readonly subject: string,
    private readonly requestId: string,
    private readonly runnerId: string,
    private readonly log: Logger,
  ) {}

  delta(choiceIndex: number, text: string, tokens: number): void {
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
    if (this.log.enabled("debug"))
      this.log.debug("request finished", {
        requestId: this.requestId,
        promptTokens,
        completionTokens,
        error: error ? ErrorCode[error.code] : undefined,
        ms: Math.round(performance.now() - this.startedAt),
      });
  }

  private send(event: RunnerEvent["event"]): void {
    const bytes = RunnerEvent.encode({ requestId: this.requestId, seq: ++this.seq, runnerId: this.runnerId, event }).finish();
    this.nc.publish(this.subject, bytes);
  }
}
