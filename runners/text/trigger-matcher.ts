/**
 * Finds trigger strings (stop sequences, a tool-call prefix) in streamed text. Text that could
 * still be the start of a trigger is held back, so a trigger split across tokens is neither
 * emitted nor missed, and the trigger itself never reaches the output.
 */
export interface Trigger<K> {
  text: string;
  kind: K;
}

export interface MatchResult<K> {
  /** Text safe to emit now. */
  emit: string;
  /** The first trigger found, if any; text after it is discarded by the caller's choice. */
  hit?: Trigger<K>;
  /** Text that followed the trigger in the input seen so far. */
  after?: string;
}

export class TriggerMatcher<K> {
  private held = "";
  private readonly maxLength: number;

  constructor(private readonly triggers: ReadonlyArray<Trigger<K>>) {
    this.maxLength = triggers.reduce((m, t) => Math.max(m, t.text.length), 0);
  }

  get pending(): string {
    return this.held;
  }

  push(text: string): MatchResult<K> {
    if (this.triggers.length === 0) return { emit: text };
    const buffer = this.held + text;
    let best: { at: number; trigger: Trigger<K> } | undefined;
    for (const trigger of this.triggers) {
      if (trigger.text.length === 0) continue;
      const at = buffer.indexOf(trigger.text);
      if (at !== -1 && (best === undefined || at < best.at)) best = { at, trigger };
    }
    if (best) {
      this.held = "";
      return { emit: buffer.slice(0, best.at), hit: best.trigger, after: buffer.slice(best.at + best.trigger.text.length) };
    }
    const keep = this.partialSuffixLength(buffer);
    this.held = buffer.slice(buffer.length - keep);
    return { emit: buffer.slice(0, buffer.length - keep) };
  }

  /** Ends the stream: whatever was held back is plain text after all. */
  flush(): string {
    const out = this.held;
    this.held = "";
    return out;
  }

  /**
   * Length of the longest suffix of `buffer` that is a proper prefix of some trigger. Compares
   * in place (no substring per candidate length): it runs on every token.
   */
  private partialSuffixLength(buffer: string): number {
    const limit = Math.min(buffer.length, this.maxLength - 1);
    for (let len = limit; len > 0; len--) {
      const start = buffer.length - len;
      for (const trigger of this.triggers) if (trigger.text.length > len && startsAt(buffer, start, trigger.text)) return len;
    }
    return 0;
  }
}

/** Whether `buffer` from `start` to its end equals the same length of `text`'s beginning. */
function startsAt(buffer: string, start: number, text: string): boolean {
  for (let i = start, j = 0; i < buffer.length; i++, j++) if (buffer.charCodeAt(i) !== text.charCodeAt(j)) return false;
  return true;
}
