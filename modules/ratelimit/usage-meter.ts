import type { ChoiceEnd, Final, TokenDelta } from "../../proto/gen/tributary/v1/inference.js";
import type { DomainError } from "../errors/mod.js";
import type { GenerationListener } from "../inference/mod.js";
import type { Admission } from "./rate-limiter.js";

/**
 * Settles an admission from the generation it admitted: with the runner's usage when the final
 * event carries it, else (a failure, the client leaving) with the prompt the runner counted at
 * admission plus the tokens streamed so far.
 */
export class UsageMeter {
  private streamedTokens = 0;

  constructor(private readonly admission: Admission, private readonly promptTokens: number) {}

  /** `listener`, counting what passes through and settling on the end. */
  wrap(listener: GenerationListener): GenerationListener {
    return new MeteredListener(this, listener);
  }

  /** Counts tokens streamed (the settlement's fallback when no final usage comes). */
  counted(tokens: number): void {
    this.streamedTokens += tokens;
  }

  /** Settles from the final event: its usage when it carries one, else what was counted. */
  settleFinal(f: Final): void {
    this.admission.settle(f.usage ? f.usage.promptTokens + f.usage.completionTokens : this.sofar());
  }

  /** The generation ended without a final event (client gone, runner lost). */
  abandon(): void {
    this.admission.settle(this.sofar());
  }

  private sofar(): number {
    return this.promptTokens + this.streamedTokens;
  }
}

/**
 * UsageMeter.wrap's listener. A class, not an object of closures: a token passes through it, and
 * each closure and its context would be two more objects to reach, cold, per token.
 */
class MeteredListener implements GenerationListener {
  constructor(private readonly meter: UsageMeter, private readonly listener: GenerationListener) {}

  delta(d: TokenDelta): void {
    this.meter.counted(d.tokens);
    this.listener.delta(d);
  }

  choiceEnd(e: ChoiceEnd): void {
    this.listener.choiceEnd(e);
  }

  choiceReset(i: number): void {
    this.listener.choiceReset?.(i);
  }

  final(f: Final): void {
    this.meter.settleFinal(f);
    this.listener.final(f);
  }

  failure(err: DomainError): void {
    this.meter.abandon();
    this.listener.failure(err);
  }
}
