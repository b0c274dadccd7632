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
    return {
      delta: (d) => {
        this.streamedTokens += d.tokens;
        listener.delta(d);
      },
      choiceEnd: (e) => listener.choiceEnd(e),
      choiceReset: (i) => listener.choiceReset?.(i),
      final: (f) => {
        this.admission.settle(f.usage ? f.usage.promptTokens + f.usage.completionTokens : this.sofar());
        listener.final(f);
      },
      failure: (err) => {
        this.abandon();
        listener.failure(err);
      },
    };
  }

  /** The generation ended without a final event (client gone, runner lost). */
  abandon(): void {
    this.admission.settle(this.sofar());
  }

  private sofar(): number {
    return this.promptTokens + this.streamedTokens;
  }
}
