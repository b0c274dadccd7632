import t from "tap";
import { colorsWanted, formatLogLine, renderChildLine, resolveLogFormat, type LogStyle } from "../../lib/log.js";

// The two log formats (lib/log.ts): the pretty line a person reads on a terminal, and the JSON
// lines everything else reads; and how `tributary start` shows its processes' lines in either.

const pretty: LogStyle = { format: "pretty", level: "info", colors: false };
const json: LogStyle = { format: "json", level: "info", colors: false };
// A local time, so that the expected clock does not depend on the machine's time zone.
const at = new Date(2026, 0, 2, 9, 5, 7, 123);

t.test("auto is pretty on a terminal and JSON elsewhere; a setting wins", async (t) => {
  t.equal(resolveLogFormat("auto", true), "pretty");
  t.equal(resolveLogFormat("auto", false), "json");
  t.equal(resolveLogFormat("json", true), "json");
  t.equal(resolveLogFormat("pretty", false), "pretty");
});

t.test("colours: FORCE_COLOR wins (0 and false turn them off), then NO_COLOR, then the terminal", async (t) => {
  const terminal = { isTTY: true, hasColors: () => true };
  const pipe = { isTTY: false };
  t.ok(colorsWanted({ noColor: "", forceColor: "" }, terminal));
  t.notOk(colorsWanted({ noColor: "", forceColor: "" }, pipe));
  t.notOk(colorsWanted({ noColor: "", forceColor: "" }, { isTTY: true, hasColors: () => false }), "a terminal without colours (TERM=dumb)");
  t.notOk(colorsWanted({ noColor: "1", forceColor: "" }, terminal));
  t.ok(colorsWanted({ noColor: "", forceColor: "1" }, pipe));
  t.ok(colorsWanted({ noColor: "1", forceColor: "3" }, pipe), "FORCE_COLOR over NO_COLOR");
  t.notOk(colorsWanted({ noColor: "", forceColor: "0" }, terminal));
  t.notOk(colorsWanted({ noColor: "", forceColor: "false" }, terminal));
});

t.test("a pretty line: time, label, level, message, then the event's fields", async (t) => {
  const line = formatLogLine(
    { t: at.toISOString(), level: "warn", msg: "gateway listening", component: "gateway", pid: 42, gatewayId: "g1", host: "127.0.0.1", port: 8080, tls: false, models: ["a/b"], note: "two words", absent: undefined },
    "gateway",
    pretty,
  );
  t.equal(line, `09:05:07 gateway      WARN  gateway listening host=127.0.0.1 port=8080 tls=false models=["a/b"] note="two words"`);
  t.notMatch(line, /\x1b/, "no colours when off");
  t.notMatch(line, /pid=|gatewayId=|component=/, "what names the process is in the label, not repeated");
});

t.test("colours on: the same text, painted", async (t) => {
  const line = formatLogLine({ t: at, level: "error", msg: "boom", component: "runner", model: "a/b" }, "runner", { ...pretty, colors: true });
  t.match(line, /\x1b\[31mERROR/, "the level in red");
  t.match(line, /\x1b\[2m09:05:07\x1b\[0m/, "the time dim");
  t.equal(line.replace(/\x1b\[\d+m/g, ""), "09:05:07 runner       ERROR boom model=a/b");
});

t.test("long values are cut short; an error's message is kept whole", async (t) => {
  const line = formatLogLine({ t: at, level: "info", msg: "m", big: { text: "x".repeat(400) }, err: "e".repeat(300) }, "c", pretty);
  t.match(line, /big=\{"text":"x+…/);
  t.ok(line.length < 520, "the object is cut");
  t.match(line, new RegExp(`err=${"e".repeat(300)}$`));
});

t.test("errors: the message on the line; the stack only at debug", async (t) => {
  const err = new TypeError("fetch failed", { cause: new Error("getaddrinfo ENOTFOUND huggingface.co") });
  const info = formatLogLine({ t: at, level: "error", msg: "download failed", err }, "runner", pretty);
  t.equal(info, `09:05:07 runner       ERROR download failed err="TypeError: fetch failed (cause: getaddrinfo ENOTFOUND huggingface.co)"`);
  const debug = formatLogLine({ t: at, level: "error", msg: "download failed", err }, "runner", { ...pretty, level: "debug" });
  const [first, ...rest] = debug.split("\n");
  t.equal(first, info);
  t.ok(rest.length > 0 && rest.every((l) => /^ {4}at /.test(l)), "the stack follows, indented");

  // As a child's JSON line carries it: serialized, and a `stack` field of its own.
  const serialized = { name: "Error", message: "bad", stack: "Error: bad\n    at f (x.js:1:1)" };
  t.equal(formatLogLine({ t: at, level: "error", msg: "m", err: serialized, stack: "Error: bad\n    at g (y.js:2:2)" }, "c", pretty), `09:05:07 c            ERROR m err=bad`);
  t.equal(
    formatLogLine({ t: at, level: "error", msg: "m", err: serialized, stack: "Error: bad\n    at g (y.js:2:2)" }, "c", { ...pretty, level: "debug" }),
    `09:05:07 c            ERROR m err=bad\n    at f (x.js:1:1)\n    at g (y.js:2:2)`,
  );
});

t.test("a message of several lines: the first on the line, the others below, in full", async (t) => {
  const line = formatLogLine({ t: at, level: "error", msg: "start failed", err: "nats-server did not start; its last lines:\n  [1] [FTL] no store" }, "cli", pretty);
  t.equal(line, `09:05:07 cli          ERROR start failed err="nats-server did not start; its last lines:"\n    [1] [FTL] no store`);
});

t.test("a child's JSON line: rendered under the child's name (pretty), passed on as it is (json)", async (t) => {
  const line = JSON.stringify({ t: at.toISOString(), level: "info", msg: "runner ready", component: "runner", pid: 7, model: "a/b" });
  t.equal(renderChildLine(pretty, "runner a/b#0", line), "09:05:07 runner a/b#0 INFO  runner ready model=a/b");
  t.equal(renderChildLine(json, "runner a/b#0", line), line);
});

t.test("a child's lines below the level are left out, in either format", async (t) => {
  const debug = JSON.stringify({ t: at.toISOString(), level: "debug", msg: "detail" });
  const info = JSON.stringify({ t: at.toISOString(), level: "info", msg: "ready" });
  t.equal(renderChildLine(pretty, "gateway", debug), undefined);
  t.equal(renderChildLine(json, "gateway", debug), undefined);
  t.equal(renderChildLine({ ...json, level: "warn" }, "gateway", info), undefined);
  t.equal(renderChildLine({ ...json, level: "debug" }, "gateway", debug), debug);
});

t.test("a child's other lines count as warnings: prefixed by its name, or wrapped in a record", async (t) => {
  const raw = "(node:12) MaxListenersExceededWarning: Possible EventEmitter memory leak detected.";
  t.match(renderChildLine(pretty, "runner a/b#0", raw), /^\d\d:\d\d:\d\d runner a\/b#0 \(node:12\) MaxListenersExceededWarning/);
  const wrapped = JSON.parse(renderChildLine(json, "runner a/b#0", raw)!) as Record<string, unknown>;
  t.match(wrapped, { level: "warn", msg: raw, component: "runner a/b#0" });
  t.equal(renderChildLine({ ...pretty, level: "error" }, "gateway", raw), undefined, "hidden at level error");
  t.match(renderChildLine(pretty, "gateway", "{not json"), /gateway +\{not json$/, "a line that only looks like JSON");
});
