import { Schema } from "effect";
import { decodeBody } from "./common.js";

const Name = Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(200));

/** POST /v1/invitations/redeem */
export const RedeemInvitationBody = Schema.Struct({
  /** The invitation code an operator sent. */
  code: Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(256)),
  organization_name: Name,
  project_name: Schema.optionalKey(Name),
  key_name: Schema.optionalKey(Name),
});

export type RedeemInvitationRequest = typeof RedeemInvitationBody.Type;

export function parseRedeemInvitation(input: unknown): RedeemInvitationRequest {
  return decodeBody(RedeemInvitationBody, input);
}
