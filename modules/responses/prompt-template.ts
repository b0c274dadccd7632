import { errors } from "../errors/mod.js";
import { requestLimits } from "../openai/mod.js";

// Prompt templates: `{{name}}` placeholders (spaces inside the braces allowed; names are
// letters, digits and underscores, not starting with a digit) in a template's instructions and
// in the text of its input. Anything else in braces is left as written.

const PLACEHOLDER = /\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}/g;

/** The placeholder names of a body's templated fields (exactly those `renderBody` fills). */
export function placeholdersOf(body: Record<string, unknown>): Set<string> {
  const names = new Set<string>();
  mapTemplated(body, (text) => {
    for (const m of text.matchAll(PLACEHOLDER)) names.add(m[1]!);
    return text;
  });
  return names;
}

/** Checks `inputs` against the placeholders: each one needs a value, and no value is left unused. */
export function checkInputs(template: string, placeholders: ReadonlySet<string>, inputs: Record<string, unknown>): Record<string, string> {
  // No prototype: a placeholder named {{constructor}} or {{toString}} finds no inherited value.
  const values: Record<string, string> = Object.create(null) as Record<string, string>;
  for (const [name, value] of Object.entries(inputs)) {
    if (!placeholders.has(name))
      throw errors.invalidParam(`inputs.${name}`, `Template '${template}' has no placeholder '{{${name}}}'.`, "unknown_parameter");
    if (typeof value !== "string" && typeof value !== "number" && typeof value !== "boolean")
      throw errors.invalidParam(`inputs.${name}`, `Invalid type for 'inputs.${name}': expected a string, a number or a boolean.`, "invalid_type");
    values[name] = String(value);
  }
  for (const name of placeholders)
    if (!Object.hasOwn(values, name)) throw errors.invalidParam(`inputs.${name}`, `Missing input '${name}' for template '${template}'.`, "missing_required_parameter");
  return values;
}

/** Replaces the placeholders in a string. */
export function renderText(text: string, values: Readonly<Record<string, string>>): string {
  return text.replace(PLACEHOLDER, (whole, name: string) => (Object.hasOwn(values, name) ? values[name]! : whole));
}

/**
 * Characters the templated fields of `body` would have once rendered with `values`, counted
 * without rendering them (a placeholder used many times with a long value multiplies it).
 */
export function renderedChars(body: Record<string, unknown>, values: Readonly<Record<string, string>>): number {
  let total = 0;
  mapTemplated(body, (text) => {
    total += text.length;
    for (const m of text.matchAll(PLACEHOLDER)) if (Object.hasOwn(values, m[1]!)) total += values[m[1]!]!.length - m[0].length;
    return text;
  });
  return total;
}

/**
 * Renders the templated fields of a response body: `instructions`, and the text of `input` (a
 * string, message contents, input_text parts). Tools, schemas and other settings are taken as
 * stored. What it would render is measured first: past `maxChars`, a 400 and nothing rendered.
 */
export function renderBody(body: Record<string, unknown>, values: Readonly<Record<string, string>>, maxChars = requestLimits().maxTemplateRenderChars): Record<string, unknown> {
  const chars = renderedChars(body, values);
  if (chars > maxChars)
    throw errors.invalidParam("inputs", `The template would render to ${chars} characters with these inputs; the limit is ${maxChars}.`, "template_too_large");
  return mapTemplated(body, (text) => renderText(text, values));
}

function mapTemplated(body: Record<string, unknown>, render: (text: string) => string): Record<string, unknown> {
  const out = { ...body };
  if (typeof out.instructions === "string") out.instructions = render(out.instructions);
  const input = out.input;
  if (typeof input === "string") out.input = render(input);
  else if (Array.isArray(input))
    out.input = input.map((item: unknown) => {
      if (!item || typeof item !== "object") return item;
      const it = { ...(item as Record<string, unknown>) };
      if (typeof it.content === "string") it.content = render(it.content);
      else if (Array.isArray(it.content))
        it.content = it.content.map((p: unknown) => {
          const part = p as Record<string, unknown>;
          return part && part.type === "input_text" && typeof part.text === "string" ? { ...part, text: render(part.text) } : part;
        });
      return it;
    });
  return out;
}
