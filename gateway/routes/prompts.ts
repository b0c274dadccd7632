import { listObject, parsePromptCreateRequest } from "../../modules/openai/mod.js";
import { errors } from "../../modules/errors/mod.js";
import type { HttpExchange } from "../http/exchange.js";
import type { Router } from "../http/router.js";
import type { PromptStore } from "../../modules/responses/mod.js";
import { placeholdersOf } from "../../modules/responses/mod.js";

export interface PromptRouteDeps {
  prompts: PromptStore;
  catalog: ReadonlyMap<string, unknown>;
  maxBodyBytes: number;
}

/**
 * Prompt templates of a project: POST /v1/prompts creates one (or replaces it with the next
 * version), GET lists or reads, DELETE removes; POST /v1/responses/{name} runs one.
 */
export function registerPromptRoutes(router: Router, deps: PromptRouteDeps): void {
  router.post("/v1/prompts", async (ex) => {
    const request = parsePromptCreateRequest(await ex.readJson(deps.maxBodyBytes));
    const model = request.body.model as string;
    if (!deps.catalog.has(model)) throw errors.modelNotFound(model);
    const prompt = await deps.prompts.put(projectOf(ex), {
      id: request.name,
      object: "prompt",
      name: request.name,
      description: request.description,
      variables: [...placeholdersOf(request.body)].sort(),
      body: request.body,
    });
    ex.json(200, prompt);
  });

  router.get("/v1/prompts", async (ex) => {
    // Every template of the project: one page.
    ex.json(200, listObject({ data: await deps.prompts.list(projectOf(ex)), has_more: false }));
  });

  router.get("/v1/prompts/*name", async (ex, { name }) => {
    const prompt = await deps.prompts.get(projectOf(ex), name!);
    if (!prompt) throw errors.notFound(`Prompt template '${name}' not found.`);
    ex.json(200, prompt);
  });

  router.delete("/v1/prompts/*name", async (ex, { name }) => {
    if (!(await deps.prompts.delete(projectOf(ex), name!))) throw errors.notFound(`Prompt template '${name}' not found.`);
    ex.json(200, { id: name, object: "prompt.deleted", deleted: true });
  });
}

function projectOf(ex: HttpExchange): string {
  return ex.principal!.projectId;
}
