import { parseSecretCreate, parseSecretRotate } from "../../modules/sandboxes/mod.js";
import { SECRET_NAME, type SecretStore } from "../../modules/secrets/mod.js";
import { errors } from "../../modules/errors/mod.js";
import { listObject } from "../../modules/openai/mod.js";
import type { HttpExchange } from "../http/exchange.js";
import type { Router } from "../http/router.js";

export interface SecretRouteDeps {
  secrets: SecretStore;
  maxPerProject: number;
  maxValueBytes: number;
  maxBodyBytes: number;
}

/**
 * /v1/secrets: write-only values of a project. Create (409 when the name exists; 400 when the
 * project holds TRIBUTARY_SECRETS_MAX_PER_PROJECT secrets, exact under parallel creates), rotate
 * (POST /{name}: a new value, version + 1), delete; list and get show metadata only. A value is
 * never in a response, an error or a log line.
 */
export function registerSecretRoutes(router: Router, deps: SecretRouteDeps): void {
  const project = (ex: HttpExchange) => ex.principal!.projectId;
  const notFound = (name: string) => errors.notFound(`No such secret: ${name.slice(0, 128)}`, "name");
  const checkName = (name: string) => {
    if (!SECRET_NAME.test(name)) throw notFound(name);
  };
  // Bodies hold values: the body limit is the value limit plus room for the JSON around it (escapes included).
  const bodyLimit = Math.min(deps.maxBodyBytes, deps.maxValueBytes * 6 + 1024);

  router.post("/v1/secrets", async (ex) => {
    const { name, value } = parseSecretCreate(await ex.readJson(bodyLimit), deps.maxValueBytes);
    const result = await deps.secrets.create(project(ex), name, value, deps.maxPerProject);
    if ("held" in result)
      throw errors.invalidParam("name", `This project has ${result.held} secrets, the limit is ${deps.maxPerProject}. Delete some first.`, "secret_limit_reached");
    if ("exists" in result) throw errors.conflict(`A secret named ${name} exists already: rotate it with POST /v1/secrets/${name}.`, "name", "secret_exists");
    ex.json(200, result.created);
  });

  router.get("/v1/secrets", async (ex) => {
    // Every secret of the project (at most maxPerProject): one page, named by name.
    ex.json(200, listObject({ data: await deps.secrets.list(project(ex)), has_more: false }, (secret) => secret.name));
  });

  router.get("/v1/secrets/:name", async (ex, { name }) => {
    checkName(name!);
    const found = await deps.secrets.get(project(ex), name!);
    if (!found) throw notFound(name!);
    ex.json(200, found);
  });

  router.post("/v1/secrets/:name", async (ex, { name }) => {
    checkName(name!);
    const { value } = parseSecretRotate(await ex.readJson(bodyLimit), deps.maxValueBytes);
    const rotated = await deps.secrets.rotate(project(ex), name!, value);
    if (!rotated) throw notFound(name!);
    ex.json(200, rotated);
  });

  router.delete("/v1/secrets/:name", async (ex, { name }) => {
    checkName(name!);
    if (!(await deps.secrets.delete(project(ex), name!))) throw notFound(name!);
    ex.json(200, { name, object: "secret.deleted", deleted: true });
  });
}
