// The public surface of the actor-runtime module: other modules and processes import from here only.
export { type Actor, type ActorContext } from "./actor.js";
export { openMailbox } from "./mailbox.js";
export { superviseActor, Supervisor, type SupervisedActor } from "./supervisor.js";
export { claimOwnership, type Claim, type OwnedRecord } from "./ownership.js";
