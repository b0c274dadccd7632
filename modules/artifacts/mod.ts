// The public surface of the artifacts module: other modules and processes import from here only.
export {
  type Artifact,
  type ArtifactLimits,
  type ArtifactListOptions,
  type ArtifactStatus,
  ArtifactStore,
  type NewUpload,
  partSizeFor,
  type UploadedPart,
  validArtifactId,
} from "./artifact-store.js";
export { type ArtifactRequestLimits, checkFilename, checkManifest, createBodyLimit, finishBodyLimit, parseFinish, parsePartNumber, parseUploadCreate } from "./requests.js";
