/**
 * Follows streamed JSON text and tells where the top-level object or array closes, so that
 * grammar-constrained generation can stop exactly at the end of the value.
 */
export class JsonCompletionTracker {
  private depth = 0;
  private inString = false;
  private escaped = false;
  private started = false;
  private done = false;

  get complete(): boolean {
    return this.done;
  }

  /** Returns the offset just after the closing character if the value completed in `text`, else -1. */
  push(text: string): number {
    if (this.done) return 0;
    for (let i = 0; i < text.length; i++) {
      const c = text[i]!;
      if (this.inString) {
        if (this.escaped) this.escaped = false;
        else if (c === "\\") this.escaped = true;
        else if (c === '"') this.inString = false;
        continue;
      }
      if (c === '"') this.inString = true;
      else if (c === "{" || c === "[") {
        this.depth++;
        this.started = true;
      } else if (c === "}" || c === "]") {
        this.depth--;
        if (this.started && this.depth === 0) {
          this.done = true;
          return i + 1;
        }
      }
    }
    return -1;
  }
}
