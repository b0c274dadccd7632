#!/usr/bin/env node
// Writes docs/configuration.md from lib/config.ts: one section per `Config.all` block (the first
// line of its comment is the title, the rest the introduction), one row per environment variable
// (its default, read from the code, and its meaning, the variable's comment).
//   node scripts/config-doc.mjs           write the page
//   node scripts/config-doc.mjs --check   exit 1 when the page differs from what the code says
// test/unit/config-doc.test.ts runs the same render and fails when the page is stale.

import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const repoRoot = join(dirname(fileURLToPath(import.meta.url)), "..");
export const configSource = join(repoRoot, "lib", "config.ts");
export const configPage = join(repoRoot, "docs", "configuration.md");

/** An environment variable's name as the code quotes it: capitals, digits and at least one underscore. */
const VARIABLE = /"([A-Z][A-Z0-9]*_[A-Z0-9_]*)"/;

/** The text of a `/** ... *\/` comment: its lines without the leading stars. */
function commentLines(comment) {
  return comment
    .replace(/^\/\*\*/, "")
    .replace(/\*\/$/, "")
    .split("\n")
    .map((line) => line.replace(/^\s*\*\s?/, "").trim());
}

/** The `/** ... *\/` comment that ends right before `index` (only blanks between), or undefined. */
function commentBefore(text, index) {
  const before = text.slice(0, index).trimEnd();
  if (!before.endsWith("*/")) return undefined;
  const start = before.lastIndexOf("/**");
  return start < 0 ? undefined : before.slice(start);
}

/**
 * Splits an object literal's body into its entries at top-level commas, keeping the `/** *\/`
 * comment before each (strings and nested brackets are skipped over).
 */
function entries(body) {
  const out = [];
  let depth = 0;
  let current = "";
  let doc;
  for (let i = 0; i < body.length; i++) {
    const c = body[i];
    if (c === "/" && body[i + 1] === "*") {
      const end = body.indexOf("*/", i + 2);
      if (depth === 0 && current.trim() === "") doc = body.slice(i, end + 2);
      else current += body.slice(i, end + 2);
      i = end + 1;
      continue;
    }
    if (c === "/" && body[i + 1] === "/") {
      i = body.indexOf("\n", i);
      if (i < 0) break;
      continue;
    }
    if (c === '"' || c === "`" || c === "'") {
      let j = i + 1;
      while (body[j] !== c) j += body[j] === "\\" ? 2 : 1;
      current += body.slice(i, j + 1);
      i = j;
      continue;
    }
    if ("([{".includes(c)) depth++;
    if (")]}".includes(c)) depth--;
    if (c === "," && depth === 0) {
      out.push({ doc, text: current.trim() });
      current = "";
      doc = undefined;
      continue;
    }
    current += c;
  }
  if (current.trim()) out.push({ doc, text: current.trim() });
  return out;
}

/** The arguments of the call whose `(` is at `open` in `text`. */
function callArgs(text, open) {
  const args = [];
  let depth = 0;
  let current = "";
  for (let i = open + 1; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      const j = text.indexOf('"', i + 1);
      current += text.slice(i, j + 1);
      i = j;
      continue;
    }
    if ("([{".includes(c)) depth++;
    if (")]}".includes(c)) {
      if (depth === 0) {
        args.push(current.trim());
        return args;
      }
      depth--;
    }
    if (c === "," && depth === 0) {
      args.push(current.trim());
      current = "";
      continue;
    }
    current += c;
  }
  throw new Error(`unclosed call in ${text}`);
}

/** The value a default expression of lib/config.ts stands for (a string or a number), or throws. */
export function evaluateDefault(expression) {
  const e = expression.replace(/\s+as const$/, "").trim();
  const string = /^"([^"]*)"$/.exec(e);
  if (string) return string[1];
  if (/^[\d_\s*+\-().]+$/.test(e)) return Function(`"use strict"; return (${e.replace(/_/g, "")});`)();
  const path = /^resolve\(repoRoot,\s*(.+)\)$/.exec(e);
  if (path) return callArgs(`(${path[1]})`, 0).map((a) => evaluateDefault(a)).join("/");
  throw new Error(`config-doc: cannot read the default ${expression}: teach scripts/config-doc.mjs its form`);
}

/** A variable's entry: its name, its default (undefined when it has none) and its meaning. */
function variableOf(entry) {
  const name = VARIABLE.exec(entry.text)?.[1];
  if (!name) return undefined;
  const expression = entry.text.replace(/^\w+:\s*/, "");
  let def;
  const withDefault = expression.indexOf("Config.withDefault(");
  if (withDefault >= 0) def = callArgs(expression, withDefault + "Config.withDefault".length)[0];
  else if (/^(str|int)\(/.test(expression)) def = callArgs(expression, expression.indexOf("("))[1];
  const meaning = entry.doc ? commentLines(entry.doc).filter(Boolean).join(" ") : "";
  return { name, field: /^(\w+):/.exec(entry.text)?.[1], default: def === undefined ? undefined : evaluateDefault(def), meaning };
}

/** The sections of lib/config.ts: each `Config.all` block with its title, introduction and variables. */
export function parseConfig(source) {
  const sections = [];
  const block = /export const (\w+) = Config\.all\(\{/g;
  for (let m; (m = block.exec(source)); ) {
    const bodyStart = m.index + m[0].length;
    const bodyEnd = source.indexOf("\n});", bodyStart);
    const doc = commentBefore(source, m.index);
    const lines = doc ? commentLines(doc) : [];
    while (lines[0] === "") lines.shift();
    const variables = entries(source.slice(bodyStart, bodyEnd)).map(variableOf).filter(Boolean);
    sections.push({ name: m[1], title: lines[0] ?? m[1], intro: lines.slice(1).filter(Boolean).join(" "), variables });
  }
  return sections;
}

/** `8388608` → "8 MiB", `30000` ms → "30 s", `2592000` s → "30 days", for a variable of that unit. */
function readable(name, value) {
  if (typeof value !== "number" || value <= 0) return "";
  if (/_BYTES$/.test(name) && value >= 1024 && value % 1024 === 0) {
    const units = ["KiB", "MiB", "GiB", "TiB"];
    let v = value / 1024;
    let u = 0;
    while (v >= 1024 && v % 1024 === 0) (v /= 1024), u++;
    return `${v} ${units[u]}`;
  }
  const seconds = /_MS$/.test(name) ? value / 1000 : /_(SECONDS|S)$/.test(name) ? value : undefined;
  if (seconds === undefined || seconds < 60) return seconds !== undefined && /_MS$/.test(name) && value >= 1000 ? `${seconds} s` : "";
  for (const [unit, size] of [["days", 86400], ["h", 3600], ["min", 60]]) {
    if (seconds % size === 0) return `${seconds / size} ${unit === "days" && seconds === 86400 ? "day" : unit}`;
  }
  return "";
}

function defaultCell(variable) {
  if (variable.default === undefined) return "unset";
  if (variable.default === "") return "empty";
  const human = readable(variable.name, variable.default);
  return "`" + variable.default + "`" + (human ? ` (${human})` : "");
}

const anchor = (title) => title.toLowerCase().replace(/[^a-z0-9 -]/g, "").replace(/ /g, "-");
const cell = (text) => text.replace(/\|/g, "\\|");

/** The page: every variable once (the first block that reads it documents it). */
export function renderConfigDoc(source) {
  const sections = parseConfig(source);
  const seen = new Set();
  const parts = [
    "# Configuration",
    "",
    "<!-- Generated from lib/config.ts by `node scripts/config-doc.mjs`: edit the comments there, then regenerate. -->",
    "",
    "Every setting is an environment variable, and every one is optional: `npm start` runs on the",
    "defaults below. Each process reads the variables of the parts it runs; `tributary start` passes",
    "its environment on to the processes it starts. A value that does not parse stops the process",
    "with an error naming the variable. The model catalog, a file, is described in",
    "[operations.md](operations.md#the-model-catalog).",
    "",
  ];
  const body = [];
  const contents = [];
  for (const section of sections) {
    const rows = section.variables.filter((v) => !seen.has(v.name));
    if (rows.length === 0) continue;
    for (const v of rows) {
      if (!v.meaning) throw new Error(`config-doc: ${v.name} (${section.name}.${v.field}) has no comment in lib/config.ts`);
      seen.add(v.name);
    }
    contents.push(`[${section.title}](#${anchor(section.title)})`);
    body.push(`## ${section.title}`, "");
    if (section.intro) body.push(section.intro, "");
    body.push("| variable | default | meaning |", "|---|---|---|");
    for (const v of rows) body.push(`| \`${v.name}\` | ${defaultCell(v)} | ${cell(v.meaning)} |`);
    body.push("");
  }
  parts.push("Sections: " + contents.join(" · ") + ".", "", ...body);
  return parts.join("\n");
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const page = renderConfigDoc(readFileSync(configSource, "utf8"));
  if (process.argv.includes("--check")) {
    const current = readFileSync(configPage, "utf8");
    if (current !== page) {
      process.stderr.write("docs/configuration.md is stale: run `node scripts/config-doc.mjs`\n");
      process.exit(1);
    }
  } else {
    writeFileSync(configPage, page);
    process.stdout.write(`wrote ${configPage}\n`);
  }
}
