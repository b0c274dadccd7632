// The public surface of the inference module: other modules and processes import from here only.
export { admitGeneration, collectChatCompletion, runChatCompletion } from "./chat-completion.js";
export { GenerationClient } from "./generation-client.js";
export { type GenerationListener, GenerationStream, type GenerationSource, type StreamOwner } from "./generation-stream.js";
export { RunnerDirectory, type RunnerView } from "./runner-directory.js";
export { DEFAULT_MAX_PREFIX_ENTRIES, orderByPrefix, PrefixPlacements, prefixKey, prefixRoutingOption, type PrefixRouting, type RoutedRunner, type RoutingSettings } from "./prefix-routing.js";
export { domainErrorFromRunner } from "./runner-errors.js";
