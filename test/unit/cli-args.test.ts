import t, { type Test } from "tap";
import { Writable } from "node:stream";
import { CommandFailed, exitCodeOf, HelpRequested, intOption, keyValueOptions, parseCommand, pickAction, UsageError } from "../../cli/args.js";
import { ConfigurationError } from "../../lib/config.js";

// The one argument parser of the tributary commands (cli/args.ts): strict, with messages that name
// the command and what is wrong, help before anything else, and the exit codes main.ts uses.

const usage = "usage: tributary thing [--json] [--name NAME] ID [MORE...]\n";
const spec = {
  name: "tributary thing",
  usage,
  options: { json: { type: "boolean" }, name: { type: "string" }, tag: { type: "string", multiple: true } },
  positionals: ["ID", "[MORE...]"],
} as const;

/** The UsageError `fn` throws (the test fails when it throws none). */
function usageError(t: Test, fn: () => unknown): UsageError {
  try {
    fn();
  } catch (err) {
    t.type(err, UsageError);
    return err as UsageError;
  }
  t.fail("no usage error");
  return new UsageError("");
}

t.test("values and positionals of a valid command line", async (t) => {
  const { values, positionals } = parseCommand(["x1", "--json", "--name", "n", "--tag", "a", "--tag=b", "more", "--", "--literal"], spec);
  t.same(values, { json: true, name: "n", tag: ["a", "b"] });
  t.same(positionals, ["x1", "more", "--literal"], "after --, words starting with a dash are arguments");
});

t.test("an unknown option is named, with the command and its usage", async (t) => {
  for (const [argv, named] of [
    [["x1", "--no-such-flag"], "--no-such-flag"],
    [["x1", "--no-such-flag=3"], "--no-such-flag"],
    [["-q", "x1"], "-q"],
  ] as const) {
    const err = usageError(t, () => parseCommand([...argv], spec));
    t.equal(err.message, `tributary thing: unknown option ${named}`, argv.join(" "));
    t.equal(err.usage, usage);
  }
});

t.test("option values: missing, dash-led, and given to a flag", async (t) => {
  t.equal(usageError(t, () => parseCommand(["x1", "--name"], spec)).message, "tributary thing: option --name needs a value");
  t.match(usageError(t, () => parseCommand(["x1", "--name", "--json"], spec)).message, /^tributary thing: option --name needs a value \(a value starting with a dash: --name=-VALUE\)$/);
  t.same(parseCommand(["x1", "--name=-dash"], spec).values.name, "-dash");
  t.equal(usageError(t, () => parseCommand(["x1", "--json=yes"], spec)).message, "tributary thing: option --json takes no value");
});

t.test("positionals: the first missing one is named; extras are refused unless the last is variadic", async (t) => {
  t.equal(usageError(t, () => parseCommand([], spec)).message, "tributary thing: missing ID");
  const one = { ...spec, positionals: ["ID"] };
  t.equal(usageError(t, () => parseCommand(["a", "b"], one)).message, "tributary thing: unexpected argument 'b'");
  t.equal(usageError(t, () => parseCommand(["a"], { ...spec, positionals: ["ID", "COMMAND..."] })).message, "tributary thing: missing COMMAND");
  t.same(parseCommand(["a", "b", "c"], { ...spec, positionals: ["ID", "COMMAND..."] }).positionals, ["a", "b", "c"]);
  t.equal(
    usageError(t, () => parseCommand(["a", "ls", "-la"], { ...spec, positionals: ["ID", "COMMAND..."] })).message,
    "tributary thing: unknown option -l (the command's own options go after --)",
    "a command run elsewhere: its options go after --",
  );
  t.equal(usageError(t, () => parseCommand(["a"], { ...spec, positionals: [] })).message, "tributary thing: unexpected argument 'a'");
});

t.test("--help or -h anywhere before -- is help, whatever else is wrong; after -- it is an argument", async (t) => {
  for (const argv of [["--help"], ["-h"], ["--no-such-flag", "--help"], ["x1", "--name", "n", "-h"]]) t.throws(() => parseCommand(argv, spec), HelpRequested, argv.join(" "));
  t.same(parseCommand(["x1", "--", "ls", "-h"], spec).positionals, ["x1", "ls", "-h"]);
});

t.test("pickAction: the action word, or a usage error naming what is wrong", async (t) => {
  const group = { name: "tributary thing", usage, actions: ["list", "rm"] as const };
  t.same(pickAction(["rm", "x1", "--json"], group), ["rm", ["x1", "--json"]]);
  t.equal(usageError(t, () => pickAction([], group)).message, "tributary thing: missing action (list, rm)");
  t.equal(usageError(t, () => pickAction(["nope"], group)).message, "tributary thing: unknown action 'nope' (list, rm)");
  t.equal(usageError(t, () => pickAction(["--json", "list"], group)).message, "tributary thing: expected an action (list, rm) before --json");
  for (const help of ["--help", "-h", "help"]) t.throws(() => pickAction([help], group), HelpRequested, help);
});

t.test("integer and KEY=VALUE options", async (t) => {
  t.equal(intOption("tributary thing", "port", undefined, 0, 65535), undefined);
  t.equal(intOption("tributary thing", "port", "0", 0, 65535), 0);
  t.equal(intOption("tributary thing", "port", "65535", 0, 65535), 65535);
  for (const bad of ["65536", "-1", "1.5", "8080x", "", "0x10"])
    t.equal(usageError(t, () => intOption("tributary thing", "port", bad, 0, 65535)).message, `tributary thing: --port: expected an integer from 0 to 65535, got '${bad}'`);
  t.same(keyValueOptions("tributary thing", "env", ["A=1", "B=x=y", "C="]), { A: "1", B: "x=y", C: "" });
  t.same(keyValueOptions("tributary thing", "env", undefined), {});
  t.equal(usageError(t, () => keyValueOptions("tributary thing", "env", ["=1"])).message, "tributary thing: --env: expected KEY=VALUE, got '=1'");
  t.equal(usageError(t, () => keyValueOptions("tributary thing", "env", ["NOVALUE"])).message, "tributary thing: --env: expected KEY=VALUE, got 'NOVALUE'");
});

t.test("exit codes and what a person reads: help 0 on stdout, usage 2, failures 1, never a stack", async (t) => {
  const run = (err: unknown) => {
    let stdout = "";
    let stderr = "";
    const sink = (append: (s: string) => void) => new Writable({ write: (chunk, _enc, done) => (append(String(chunk)), done()) });
    const code = exitCodeOf(err, { stdout: sink((s) => (stdout += s)), stderr: sink((s) => (stderr += s)) });
    return { code, stdout, stderr };
  };
  t.same(run(new HelpRequested(usage)), { code: 0, stdout: usage, stderr: "" });
  t.same(run(new UsageError("tributary thing: unknown option --x", usage)), { code: 2, stdout: "", stderr: `tributary thing: unknown option --x\n\n${usage}` });
  t.same(run(new UsageError("tributary thing: --model: no such file: /x")), { code: 2, stdout: "", stderr: "tributary thing: --model: no such file: /x\n" });
  t.same(run(new ConfigurationError("invalid configuration: TRIBUTARY_PORT")), { code: 2, stdout: "", stderr: "invalid configuration: TRIBUTARY_PORT\n" });
  t.same(run(new CommandFailed("No such sandbox: sbx_1")), { code: 1, stdout: "", stderr: "error: No such sandbox: sbx_1\n" });
  const unexpected = run(new TypeError("boom"));
  t.equal(unexpected.code, 1);
  t.equal(unexpected.stderr, "error: boom\n", "no stack trace");
});
