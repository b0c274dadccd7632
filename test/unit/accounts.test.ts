import t from "tap";
import { invitationIdOfCode, keyPrefix, newApiKey, newInvitationCode, sameDigest, sha256Hex, parseConfiguredKeys, invitationStatus, type InvitationRecord } from "../../modules/accounts/mod.js";
import { estimatePromptTokens, estimateRequestTokens } from "../../modules/ratelimit/mod.js";
import { GenerateRequest } from "../../proto/gen/tributary/v1/inference.js";
import type { ModelSpec } from "../../modules/catalog/mod.js";

t.test("keys: kind prefix, high entropy, a short prefix shown", async (t) => {
  const a = newApiKey("project");
  const b = newApiKey("organization");
  t.match(a, /^sk-proj-[A-Za-z0-9]{48}$/);
  t.match(b, /^sk-org-[A-Za-z0-9]{48}$/);
  t.not(a, newApiKey("project"));
  t.equal(keyPrefix(a), a.slice(0, 12));
  t.equal(keyPrefix(b), b.slice(0, 11));
  t.equal(keyPrefix("sk-local-AbCdEfGh"), "sk-local-AbCd");
  t.equal(keyPrefix("weird"), "weird");
  t.equal(sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  t.ok(sameDigest(sha256Hex("x"), sha256Hex("x")));
  t.notOk(sameDigest(sha256Hex("x"), sha256Hex("y")));
  t.notOk(sameDigest("", ""));
});

t.test("invitation codes name their invitation", async (t) => {
  const code = newInvitationCode("inv_ABC123");
  t.match(code, /^inv_ABC123-[A-Za-z0-9]{32}$/);
  t.equal(invitationIdOfCode(code), "inv_ABC123");
  t.equal(invitationIdOfCode(`  ${code}\n`), "inv_ABC123");
  for (const bad of ["inv_ABC123", "inv_ABC123-short", "xyz_ABC-" + "a".repeat(32), "inv_a.b-" + "a".repeat(32)]) t.equal(invitationIdOfCode(bad), undefined, bad);
  const inv: InvitationRecord = { id: "inv_x", note: "", code_hash: "", created_at: 100, expires_at: 200, redeemed_at: null, organization_id: null, revoked_at: null };
  t.equal(invitationStatus(inv, 150), "pending");
  t.equal(invitationStatus(inv, 200), "expired");
  t.equal(invitationStatus({ ...inv, revoked_at: 120 }, 150), "revoked");
  t.equal(invitationStatus({ ...inv, redeemed_at: 120, revoked_at: 130 }, 250), "redeemed");
});

t.test("TRIBUTARY_API_KEYS: key=project pairs", async (t) => {
  t.same(parseConfiguredKeys(" sk-a=proj_a, sk=b=proj-b ,"), [
    { key: "sk-a", projectId: "proj_a" },
    { key: "sk=b", projectId: "proj-b" },
  ]);
  t.throws(() => parseConfiguredKeys("sk-a"), /expected key=project/);
  t.throws(() => parseConfiguredKeys("sk-a=proj.a"), /not a valid project id/);
});

t.test("the token estimate: characters / 4 for the prompt, plus max tokens per choice", async (t) => {
  const spec = { contextLength: 2048, maxOutputTokens: 1024 } as ModelSpec;
  const req = GenerateRequest.fromPartial({
    messages: [
      { role: "system", content: "a".repeat(40) },
      { role: "user", content: "b".repeat(41) },
    ],
    sampling: { maxTokens: 100, n: 2 },
  });
  t.equal(estimatePromptTokens(req), 10 + 11 + 8);
  t.equal(estimateRequestTokens(req, spec), 29 + 200);
  const unbounded = GenerateRequest.fromPartial({ messages: [{ role: "user", content: "c".repeat(4000) }] });
  t.equal(estimateRequestTokens(unbounded, spec), 1004 + 1024, "no max_tokens: the model's max output");
  const long = GenerateRequest.fromPartial({ messages: [{ role: "user", content: "c".repeat(6000) }] });
  t.equal(estimateRequestTokens(long, spec), 1504 + 544, "or what the context leaves");
  const tools = GenerateRequest.fromPartial({
    messages: [{ role: "user", content: "" }],
    tools: [{ name: "get", description: "d".repeat(17), parametersJson: "{}" }],
    responseFormat: { schemaJson: "x".repeat(8) },
  });
  t.equal(estimatePromptTokens(tools), Math.ceil((3 + 17 + 2 + 8) / 4) + 4, "tools and schemas count");
});
