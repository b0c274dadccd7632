import type { ModelSpec } from "../../modules/catalog/mod.js";
import { errors } from "../../modules/errors/mod.js";
import type { Router } from "../http/router.js";

export function modelObject(spec: ModelSpec) {
  return { id: spec.id, object: "model", created: spec.created, owned_by: spec.ownedBy };
}

/** GET /v1/models and GET /v1/models/{id} (ids contain "/": the SDK encodes it, curl may not). */
export function registerModelRoutes(router: Router, catalog: ReadonlyMap<string, ModelSpec>): void {
  router.get("/v1/models", (ex) => {
    ex.json(200, { object: "list", data: [...catalog.values()].map(modelObject) });
  });
  router.get("/v1/models/*id", (ex, params) => {
    const spec = catalog.get(params.id!);
    if (!spec) throw errors.modelNotFound(params.id!);
    ex.json(200, modelObject(spec));
  });
}
