// The public surface of the actor-runtime module: other modules and processes import from here only.
export { type Actor, type ActorContext } from "./actor.js";
export { openMailbox } from "./mailbox.js";
export { superviseActor, Supervisor, type SupervisedActor } from "./supervisor.js";
export { actsUntil, claimOwnership, LeaseWatch, leaseLapsed, mayTakeOver, seeRevision, type Claim, type LeaseTerms, type OwnedRecord, type OwnerProbe, type SeenRevision } from "./ownership.js";
