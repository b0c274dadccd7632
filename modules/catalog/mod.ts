// The public surface of the catalog module: other modules and processes import from here only.
export { CatalogError, loadCatalog, parseCatalog } from "./load.js";
export { type ModelSpec } from "./model-spec.js";
export { defaultModelCache, hfCachePath, hfReference, localModelPath } from "./model-file.js";
export { SINGLE_MODEL_CONTEXT_LENGTH, singleModelCatalog, singleModelOf, type SingleModel } from "./single-model.js";
export {
  ChecksumMismatch, classifyModelFailure, describeError, DiskFull, downloadFailureTags, HttpStatus, InvalidGguf, ModelFileMissing, ModelLoadFailed, NoNetwork,
  type ModelFileFailure,
} from "./model-file-failure.js";
