// What `tributary start` writes for a person: messages on stdout (the start report, answers to
// Ctrl-C; shown whatever the log level), log lines on stderr, and, when stdout is a terminal, a
// block of status lines at its bottom (download progress bars) redrawn in place. Whatever else is
// written goes above the block: it is erased first and drawn again after.

export interface OutputStream {
  write(text: string): unknown;
  isTTY?: boolean;
  columns?: number;
}

const ERASE_LINE = "\r\x1b[2K";
const UP = "\x1b[1A";

export class TerminalOutput {
  private block: string[] = [];
  private closed = false;

  constructor(
    private readonly out: OutputStream,
    private readonly err: OutputStream,
  ) {}

  /** Whether status lines are drawn in place (stdout is a terminal); else a caller prints its own lines. */
  get drawsInPlace(): boolean {
    return this.out.isTTY === true;
  }

  /** A message for the person at the terminal (text ending in a newline). */
  print(text: string): void {
    this.around(() => this.out.write(text));
  }

  /** A log line (ending in a newline). */
  log(text: string): void {
    // Only a block on the same terminal as stderr is in the way.
    if (this.err.isTTY === true) this.around(() => this.err.write(text));
    else this.err.write(text);
  }

  /** The status lines shown from now on, in place of the previous ones (none: the block goes). */
  status(lines: readonly string[]): void {
    if (!this.drawsInPlace || this.closed) return;
    // columns is 0 on a terminal that never said its size.
    const width = Math.max((this.out.columns || 80) - 1, 10);
    // A line longer than the terminal wraps, and the erase would miss its second row.
    const next = lines.map((l) => (l.length > width ? l.slice(0, width - 1) + "…" : l));
    if (next.length === this.block.length && next.every((l, i) => l === this.block[i])) return;
    this.erase();
    this.block = next;
    this.draw();
  }

  /** Erases the block and draws none again: the stack is stopping. */
  close(): void {
    this.erase();
    this.block = [];
    this.closed = true;
  }

  private around(write: () => void): void {
    this.erase();
    write();
    this.draw();
  }

  private erase(): void {
    if (this.block.length === 0) return;
    this.out.write(ERASE_LINE + (UP + ERASE_LINE).repeat(this.block.length - 1));
  }

  private draw(): void {
    if (this.block.length > 0) this.out.write(this.block.join("\n"));
  }
}

/** This process's terminal. */
export const terminal = new TerminalOutput(process.stdout, process.stderr);
