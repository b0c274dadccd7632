import { RunnerHeartbeat_State as RunnerState } from "../../proto/gen/tributary/v1/inference.js";
import type { RunnerDirectory } from "../../modules/inference/mod.js";
import type { ModelSpec } from "../../modules/catalog/mod.js";
import { errors } from "../../modules/errors/mod.js";
import type { Router } from "../http/router.js";

export function modelObject(spec: ModelSpec) {
  return { id: spec.id, object: "model", created: spec.created, owned_by: spec.ownedBy };
}

/**
 * Whether a model can serve now, as this gateway hears its runners (Tributary's field, beside
 * OpenAI's): runners ready and still loading, with what the loading ones last said (download or
 * load progress).
 */
function modelStatus(spec: ModelSpec, directory: RunnerDirectory) {
  const runners = directory.all(spec.id);
  const ready = runners.filter((r) => r.state === RunnerState.STATE_READY).length;
  const loading = runners.filter((r) => r.state === RunnerState.STATE_LOADING);
  return {
    ready: ready > 0,
    runners_ready: ready,
    runners_loading: loading.length,
    loading_detail: loading.map((r) => r.detail).filter(Boolean),
  };
}

/** GET /v1/models and GET /v1/models/{id} (ids contain "/": the SDK encodes it, curl may not). */
export function registerModelRoutes(router: Router, catalog: ReadonlyMap<string, ModelSpec>, directory: RunnerDirectory): void {
  router.get("/v1/models", (ex) => {
    ex.json(200, { object: "list", data: [...catalog.values()].map((spec) => ({ ...modelObject(spec), status: modelStatus(spec, directory) })) });
  });
  router.get("/v1/models/*id", (ex, params) => {
    const spec = catalog.get(params.id!);
    if (!spec) throw errors.modelNotFound(params.id!);
    ex.json(200, { ...modelObject(spec), status: modelStatus(spec, directory) });
  });
}
