// Runners per model and threads per runner, picked from the machine and the model (docs/operations.md:
// "Runner layout"). The rule is pure (rule.ts); machine.ts reads the facts.
export {
  classify,
  MAX_OVERHEAD_BOUND_RUNNERS,
  MAX_THREADS_PER_RUNNER,
  MEMORY_SHARE,
  OVERHEAD_BOUND_BYTES,
  pickLayout,
  servicesCpus,
  type LlamaLibrary,
  type MachineFacts,
  type ModelClass,
  type ModelFacts,
  type ModelLayout,
} from "./rule.js";
export { llamaLibrary, machineFacts, modelFacts, usableCpus, usableMemoryBytes } from "./machine.js";
export { decodeThreadEnv, OPENMP_SPIN_COUNT, type DecodeEnvSettings } from "./decode-env.js";
