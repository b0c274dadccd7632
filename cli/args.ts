import { parseArgs, type ParseArgsConfig } from "node:util";
import { ConfigurationError, logConfig, readConfig } from "../lib/config.js";

// The one argument parser of every tributary command: node:util's parseArgs, strict. Bad input is
// a UsageError (its message, the command's usage when it has one, exit 2); --help or -h anywhere
// before `--` is HelpRequested (the usage on stdout, exit 0) and nothing else runs. cli/main.ts
// turns both into output and an exit code (exitCodeOf).

export type OptionSpecs = NonNullable<ParseArgsConfig["options"]>;

/** Bad command-line input: exit 2, with the command's usage when `usage` is given. */
export class UsageError extends Error {
  override name = "UsageError";
  constructor(message: string, readonly usage?: string) {
    super(message);
  }
}

/** --help or -h: the usage on stdout, exit 0. */
export class HelpRequested extends Error {
  override name = "HelpRequested";
  constructor(readonly usage: string) {
    super("help requested");
  }
}

/** A failure to report as `error: <message>` with exit 1 (an API error, an unreachable gateway). */
export class CommandFailed extends Error {
  override name = "CommandFailed";
}

export interface CommandSpec<O extends OptionSpecs> {
  /** The command as messages name it: "tributary sandbox create". */
  name: string;
  usage: string;
  options: O;
  /**
   * The positional arguments, in order, as the usage names them: "ID" required, "[DIR]" optional,
   * "COMMAND..." one or more, "[ARGS...]" any number (a variadic one comes last).
   */
  positionals?: readonly string[];
}

type Parsed<O extends OptionSpecs> = ReturnType<typeof parseArgs<{ args: string[]; options: O; strict: true; allowPositionals: true }>>;

/** Whether `argv` asks for help: --help or -h before a `--` (after it, words belong to a command run elsewhere). */
export function asksForHelp(argv: readonly string[]): boolean {
  for (const word of argv) {
    if (word === "--") return false;
    if (word === "--help" || word === "-h") return true;
  }
  return false;
}

/** Parses `argv` strictly against `spec`: its values and positionals, or a UsageError / HelpRequested. */
export function parseCommand<const O extends OptionSpecs>(argv: readonly string[], spec: CommandSpec<O>): Parsed<O> {
  if (asksForHelp(argv)) throw new HelpRequested(spec.usage);
  let parsed: Parsed<O>;
  try {
    parsed = parseArgs({ args: [...argv], options: spec.options, strict: true, allowPositionals: true });
  } catch (err) {
    const error = err as Error & { code?: string };
    // A command run elsewhere (sandbox exec, jobs create) has options of its own: they go after --.
    const hint = error.code === "ERR_PARSE_ARGS_UNKNOWN_OPTION" && spec.positionals?.some((p) => p.startsWith("COMMAND")) ? " (the command's own options go after --)" : "";
    throw new UsageError(`${spec.name}: ${describeParseError(error)}${hint}`, spec.usage);
  }
  checkPositionals(parsed.positionals, spec);
  return parsed;
}

function checkPositionals(given: readonly string[], spec: CommandSpec<OptionSpecs>): void {
  const names = spec.positionals ?? [];
  const last = names.at(-1);
  const variadic = last?.endsWith("...]") || last?.endsWith("...");
  const required = names.filter((n) => !n.startsWith("["));
  if (given.length < required.length) throw new UsageError(`${spec.name}: missing ${required[given.length]!.replace(/\.\.\.$/, "")}`, spec.usage);
  if (!variadic && given.length > names.length) throw new UsageError(`${spec.name}: unexpected argument '${given[names.length]}'`, spec.usage);
}

/** parseArgs's messages, shorter and naming the option as typed. */
function describeParseError(err: Error & { code?: string }): string {
  const option = /'(-[^' ]+)/.exec(err.message)?.[1]?.replace(/ <value>$/, "");
  switch (err.code) {
    case "ERR_PARSE_ARGS_UNKNOWN_OPTION":
      return `unknown option ${option ?? err.message}`;
    case "ERR_PARSE_ARGS_INVALID_OPTION_VALUE":
      // "argument missing", "argument is ambiguous" (the next word starts with a dash), "does not take an argument".
      if (/does not take an argument/.test(err.message)) return `option ${option} takes no value`;
      return `option ${option} needs a value${/ambiguous/.test(err.message) ? ` (a value starting with a dash: ${option}=-VALUE)` : ""}`;
    case "ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL":
      return err.message.replace(/\. This command.*$/, "").replace(/^Unexpected/, "unexpected");
    default:
      return err.message;
  }
}

/**
 * The action word of a command group (`tributary sandbox list` -> "list") and the words after
 * it. No action, or one not in `actions`, is a UsageError; `--help` before an action is help.
 */
export function pickAction<A extends string>(argv: readonly string[], group: { name: string; usage: string; actions: readonly A[] }): [A, string[]] {
  const [action, ...rest] = argv;
  if (action === undefined) throw new UsageError(`${group.name}: missing action (${group.actions.join(", ")})`, group.usage);
  if (action === "--help" || action === "-h" || action === "help") throw new HelpRequested(group.usage);
  if (action.startsWith("-")) throw new UsageError(`${group.name}: expected an action (${group.actions.join(", ")}) before ${action}`, group.usage);
  if (!(group.actions as readonly string[]).includes(action)) throw new UsageError(`${group.name}: unknown action '${action}' (${group.actions.join(", ")})`, group.usage);
  return [action as A, rest];
}

/** An integer option of `command` within bounds (undefined when not given), or a UsageError naming it. */
export function intOption(command: string, option: string, value: string | undefined, min: number, max: number): number | undefined {
  if (value === undefined) return undefined;
  if (!/^-?\d+$/.test(value.trim()) || Number(value) < min || Number(value) > max) throw new UsageError(`${command}: --${option}: expected an integer from ${min} to ${max}, got '${value}'`);
  return Number(value);
}

/** Repeated KEY=VALUE options of `command` (--env A=1 --env B=2) as a record, or a UsageError naming the bad one. */
export function keyValueOptions(command: string, option: string, values: readonly string[] | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of values ?? []) {
    const eq = pair.indexOf("=");
    if (eq <= 0) throw new UsageError(`${command}: --${option}: expected KEY=VALUE, got '${pair}'`);
    out[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return out;
}

/**
 * The exit code for an error a command threw, after writing what a person should read: usage
 * errors (2), help (0), failures (1). Anything else is a bug or an environment problem: its
 * message, exit 1; the stack only with TRIBUTARY_LOG_LEVEL=debug.
 */
export function exitCodeOf(err: unknown, streams: { stdout: NodeJS.WritableStream; stderr: NodeJS.WritableStream } = process): number {
  if (err instanceof HelpRequested) {
    streams.stdout.write(err.usage);
    return 0;
  }
  if (err instanceof UsageError) {
    streams.stderr.write(`${err.message}\n${err.usage ? `\n${err.usage}` : ""}`);
    return 2;
  }
  if (err instanceof ConfigurationError) {
    streams.stderr.write(`${err.message}\n`);
    return 2;
  }
  const message = err instanceof Error ? err.message : String(err);
  streams.stderr.write(`error: ${message}\n`);
  if (!(err instanceof CommandFailed) && err instanceof Error && readConfig(logConfig).level === "debug") streams.stderr.write(`${err.stack}\n`);
  return 1;
}
