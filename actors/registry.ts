import type { ModelSpec } from "../lib/catalog/model-spec.js";
import type { Actor } from "./runtime/actor.js";

export interface PlatformContext {
  catalog: readonly ModelSpec[];
  home: string;
  env: NodeJS.ProcessEnv;
}

/**
 * The actors an actor host runs, as factories (the supervisor makes a fresh instance on each
 * restart). Each platform feature adds its actors here.
 */
export function platformActors(_ctx: PlatformContext): Array<() => Actor> {
  return [];
}
