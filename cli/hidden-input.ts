import { UsageError } from "./args.js";

// Values that must not show or sit on a command line (passwords, secrets): typed at a prompt on a
// terminal with nothing echoed, or piped on stdin. An argument would be seen by every user of the
// machine (ps) and kept in shell history.

export interface HiddenInputOptions {
  /** Piped: the whole of stdin (one trailing line end dropped) rather than its first line. */
  whole?: boolean;
  /** On a terminal: asked twice, and the two must match (a new password). */
  confirm?: boolean;
  input?: NodeJS.ReadStream;
  output?: NodeJS.WritableStream;
}

/** Reads a hidden value: from the terminal in raw mode without echo, else from stdin. */
export async function readHidden(prompt: string, options: HiddenInputOptions = {}): Promise<string> {
  const input = options.input ?? process.stdin;
  const output = options.output ?? process.stderr;
  if (!input.isTTY) return options.whole ? await readAll(input) : await readFirstLine(input);
  const value = await readTyped(prompt, input, output);
  if (options.confirm && (await readTyped("again: ", input, output)) !== value) throw new UsageError("the two entries differ: nothing was sent");
  return value;
}

/** One line typed on a terminal, nothing echoed. Backspace and Ctrl-U edit; Ctrl-C interrupts. */
function readTyped(prompt: string, input: NodeJS.ReadStream, output: NodeJS.WritableStream): Promise<string> {
  // Raw before the prompt: what is typed as soon as it shows is never echoed by the terminal.
  input.setRawMode(true);
  input.resume();
  output.write(prompt);
  let chars: string[] = [];
  return new Promise((resolve) => {
    const finish = () => {
      input.off("data", onData);
      input.setRawMode(false);
      input.pause();
      output.write("\n");
    };
    const onData = (chunk: Buffer) => {
      const text = chunk.toString("utf8");
      // An escape sequence (arrow keys and the like) is not part of the value.
      if (text.startsWith("\u001b")) return;
      for (const c of text) {
        if (c === "\r" || c === "\n" || c === "\u0004") {
          finish();
          return resolve(chars.join(""));
        }
        if (c === "\u0003") {
          finish();
          // As if the terminal had sent it outside raw mode: the default handler ends the process (130).
          process.kill(process.pid, "SIGINT");
          return;
        }
        if (c === "\u007f" || c === "\b") chars.pop();
        else if (c === "\u0015") chars = [];
        else if (c >= " ") chars.push(c);
      }
    };
    input.on("data", onData);
  });
}

async function readAll(input: NodeJS.ReadableStream): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of input) chunks.push(Buffer.from(chunk as Buffer));
  return Buffer.concat(chunks).toString("utf8").replace(/\r?\n$/, "");
}

/** The first line of a stream, without its line end. */
async function readFirstLine(input: NodeJS.ReadableStream): Promise<string> {
  let text = "";
  for await (const chunk of input) {
    text += String(chunk);
    const end = text.indexOf("\n");
    if (end >= 0) return text.slice(0, end).replace(/\r$/, "");
    if (text.length > 4096) break;
  }
  return text.replace(/\r?\n$/, "");
}
