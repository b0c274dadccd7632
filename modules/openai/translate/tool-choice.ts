import { ToolChoice_Mode, type ToolChoice } from "../../../proto/gen/tributary/v1/inference.js";
import { errors } from "../../errors/mod.js";

// The rules that tie `tool_choice` to `tools`, for chat completions and responses alike. They are
// checked here only: the runner takes a GenerateRequest's tool choice as given (its contract says
// a named function is one of the request's tools).

/** The names of `tools`, which must be unique (a model calls a function by its name). */
export function functionNames(names: readonly string[], paramOf: (index: number) => string): ReadonlySet<string> {
  const seen = new Set<string>();
  names.forEach((name, i) => {
    if (seen.has(name)) throw errors.invalidParam(paramOf(i), `Duplicate function name '${name}' in tools.`);
    seen.add(name);
  });
  return seen;
}

/** A `tool_choice` other than "none" needs tools to choose from. */
export function requireToolsFor(choice: unknown, toolCount: number): void {
  if (choice != null && choice !== "none" && toolCount === 0)
    throw errors.invalidParam("tool_choice", "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.");
}

/** The tool choice that forces a call of `name`, which must be one of `names`. */
export function forcedFunction(name: string, names: ReadonlySet<string>, param: string): ToolChoice {
  if (!names.has(name)) throw errors.invalidParam(param, `Invalid value for 'tool_choice': function '${name}' is not in 'tools'.`);
  return { mode: ToolChoice_Mode.MODE_FUNCTION, functionName: name };
}
