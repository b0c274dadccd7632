import t from "tap";
import { checkManifest, DEFAULT_TARGET_INFLIGHT, MAX_ENTRYPOINT_LENGTH, MAX_INSTANCES, MAX_TARGET_INFLIGHT, MAX_ENV_VALUE_BYTES, MAX_ENV_VARS, MAX_MANIFEST_BYTES, MAX_SECRETS, MAX_TIMEOUT_SECONDS, MIN_CPU_MHZ, MIN_MEMORY_MB, parseManifest, slugOf } from "../../modules/apps/mod.js";

// Each manifest rule at its edge: at the limit passes, one past it fails with the field named.

const target = { organizationSlug: "acme", projectSlug: "chat" };
const offer = { maxCpuMhz: 2000, maxMemoryMb: 1024, maxGpuCount: 0 };
const base = { entrypoint: "app.main:app", organization_slug: "acme", project: "Chat", project_slug: "chat", cpu_mhz: 500, gpu_count: 0, memory_size_mb: 256 };

/** The error `fn` throws as {param, code} (undefined when it does not throw). */
function refusal(fn: () => unknown): { param: string | null; code: string; tag: string } | undefined {
  try {
    fn();
    return undefined;
  } catch (err) {
    const e = err as { param: string | null; code: string; _tag: string };
    return { param: e.param, code: e.code, tag: e._tag };
  }
}
const check = (fields: Record<string, unknown>, o = offer) => refusal(() => checkManifest(fields, target, o));
const with_ = (over: Record<string, unknown>) => ({ ...base, ...over });

t.test("a full manifest parses from YAML", async (t) => {
  const m = parseManifest(
    "entrypoint: pkg.app:app\norganization_slug: acme\nproject: Chat\nproject_slug: chat\ncpu_mhz: 500\ngpu_count: 0\nmemory_size_mb: 256\nenv:\n  MODEL: stories\n  N: 3\nsecrets: [API_KEY]\nruntime: python\n",
    target,
    offer,
  );
  t.same(m, { entrypoint: "pkg.app:app", organizationSlug: "acme", project: "Chat", projectSlug: "chat", cpuMhz: 500, gpuCount: 0, memorySizeMb: 256, env: { MODEL: "stories", N: "3" }, secrets: ["API_KEY"], runtime: "python", minInstances: 1, maxInstances: 1, targetInflight: DEFAULT_TARGET_INFLIGHT });
});

t.test("instances: one by default; min and max at their edges; scaling's target", async (t) => {
  const scaling = (over: Record<string, unknown>) => {
    const m = checkManifest(with_(over), target, offer);
    return [m.minInstances, m.maxInstances, m.targetInflight];
  };
  t.same(scaling({}), [1, 1, DEFAULT_TARGET_INFLIGHT], "one instance, always");
  t.same(scaling({ min_instances: 0 }), [0, 1, DEFAULT_TARGET_INFLIGHT], "scale to zero, at most one");
  t.same(scaling({ min_instances: 3 }), [3, 3, DEFAULT_TARGET_INFLIGHT], "max follows min");
  t.same(scaling({ max_instances: 4 }), [1, 4, DEFAULT_TARGET_INFLIGHT]);
  t.same(scaling({ min_instances: MAX_INSTANCES, max_instances: MAX_INSTANCES, target_inflight: MAX_TARGET_INFLIGHT }), [MAX_INSTANCES, MAX_INSTANCES, MAX_TARGET_INFLIGHT]);
  t.same(scaling({ min_instances: 2, max_instances: 2, target_inflight: 1 }), [2, 2, 1]);
  t.match(check(with_({ min_instances: -1 })), { param: "manifest.min_instances", code: "invalid_value" });
  t.match(check(with_({ min_instances: MAX_INSTANCES + 1 })), { param: "manifest.min_instances" });
  t.match(check(with_({ min_instances: 1.5 })), { param: "manifest.min_instances", code: "invalid_type" });
  t.match(check(with_({ max_instances: 0 })), { param: "manifest.max_instances" });
  t.match(check(with_({ max_instances: MAX_INSTANCES + 1 })), { param: "manifest.max_instances" });
  t.match(check(with_({ min_instances: 3, max_instances: 2 })), { param: "manifest.max_instances", code: "conflicting_fields" });
  t.match(check(with_({ target_inflight: 0 })), { param: "manifest.target_inflight" });
  t.match(check(with_({ target_inflight: MAX_TARGET_INFLIGHT + 1 })), { param: "manifest.target_inflight" });
  t.match(check(with_({ target_inflight: "10" })), { param: "manifest.target_inflight", code: "invalid_type" });
});

t.test("YAML: not YAML, not a mapping, aliases, too large", async (t) => {
  t.match(refusal(() => parseManifest("entrypoint: [", target, offer)), { param: "manifest", code: "invalid_yaml" });
  t.match(refusal(() => parseManifest("- a\n- b\n", target, offer)), { param: "manifest", code: "invalid_type" });
  t.match(refusal(() => parseManifest("a: &x [1]\nb: *x\n", target, offer)), { param: "manifest" }, "aliases are refused");
  try {
    parseManifest("a: &x [1]\nb: *x\n", target, offer);
  } catch (err) {
    t.notMatch((err as Error).message, /Error/, "without the library's error class");
  }
  t.match(refusal(() => parseManifest("entrypoint: a:b\nentrypoint: c:d\n", target, offer)), { param: "manifest" }, "duplicate keys");
  t.match(refusal(() => parseManifest("#".repeat(MAX_MANIFEST_BYTES + 1), target, offer)), { param: "manifest", tag: "TooLarge" });
});

t.test("unknown fields and missing fields are named", async (t) => {
  t.match(check(with_({ replicas: 2 })), { param: "manifest.replicas", code: "unknown_parameter" });
  for (const field of ["entrypoint", "organization_slug", "project", "project_slug", "cpu_mhz", "gpu_count", "memory_size_mb"]) {
    const fields: Record<string, unknown> = { ...base };
    delete fields[field];
    t.match(check(fields), { param: `manifest.${field}`, code: "missing_required_parameter" }, field);
  }
});

t.test("entrypoint: package.module:variable", async (t) => {
  for (const ok of ["app:app", "a.b.c:handler", "_p.m2:App_1"]) t.equal(check(with_({ entrypoint: ok })), undefined, ok);
  for (const bad of ["app", "app:", ":app", "a..b:app", "a.b:c:d", "1app:app", "app:1x", "a/b:app", "a.b :app", "a-b:app", "app.main:app()"])
    t.match(check(with_({ entrypoint: bad })), { param: "manifest.entrypoint", code: "invalid_entrypoint" }, bad);
  const longest = "a".repeat(MAX_ENTRYPOINT_LENGTH - 4) + ":app";
  t.equal(check(with_({ entrypoint: longest })), undefined, "at the length limit");
  t.match(check(with_({ entrypoint: "a" + longest })), { param: "manifest.entrypoint" }, "one past it");
  t.match(check(with_({ entrypoint: 3 })), { param: "manifest.entrypoint", code: "invalid_type" });
});

t.test("slugs are DNS labels of at most 63 and match the key's organization and project", async (t) => {
  const label63 = "a".repeat(63);
  t.equal(refusal(() => checkManifest(with_({ project_slug: label63 }), { ...target, projectSlug: label63 }, offer)), undefined, "63 characters");
  t.match(check(with_({ project_slug: label63 + "a" })), { param: "manifest.project_slug", code: "invalid_slug" }, "64 characters");
  for (const bad of ["Chat", "-chat", "chat-", "ch_at", "ch.at", "", "chät"]) {
    t.match(check(with_({ project_slug: bad })), { param: "manifest.project_slug", code: "invalid_slug" }, `project_slug ${bad}`);
    t.match(check(with_({ organization_slug: bad })), { param: "manifest.organization_slug", code: "invalid_slug" }, `organization_slug ${bad}`);
  }
  t.equal(refusal(() => checkManifest(with_({ project_slug: "a-1" }), { ...target, projectSlug: "a-1" }, offer)), undefined, "inner hyphen and digit");
  t.match(check(with_({ organization_slug: "other" })), { param: "manifest.organization_slug", code: "slug_mismatch" });
  t.match(check(with_({ project_slug: "other" })), { param: "manifest.project_slug", code: "slug_mismatch" });
});

t.test("slugs derived from account names are DNS labels", async (t) => {
  t.equal(slugOf("Local"), "local");
  t.equal(slugOf("proj_a"), "proj-a");
  t.equal(slugOf("  My  Project!! "), "my-project");
  t.equal(slugOf("x".repeat(70)).length, 63);
  t.equal(slugOf("a".repeat(62) + "-b"), "a".repeat(62), "no trailing hyphen after the cut");
  t.equal(slugOf("___"), "x");
});

t.test("resources: within what app hosts offer", async (t) => {
  t.equal(check(with_({ cpu_mhz: offer.maxCpuMhz })), undefined, "cpu at the offer");
  t.match(check(with_({ cpu_mhz: offer.maxCpuMhz + 1 })), { param: "manifest.cpu_mhz", code: "resources_unavailable" });
  t.equal(check(with_({ cpu_mhz: MIN_CPU_MHZ })), undefined, "cpu at the minimum");
  t.match(check(with_({ cpu_mhz: MIN_CPU_MHZ - 1 })), { param: "manifest.cpu_mhz" });
  t.equal(check(with_({ memory_size_mb: offer.maxMemoryMb })), undefined, "memory at the offer");
  t.match(check(with_({ memory_size_mb: offer.maxMemoryMb + 1 })), { param: "manifest.memory_size_mb", code: "resources_unavailable" });
  t.equal(check(with_({ memory_size_mb: MIN_MEMORY_MB })), undefined, "memory at the minimum");
  t.match(check(with_({ memory_size_mb: MIN_MEMORY_MB - 1 })), { param: "manifest.memory_size_mb" });
  t.match(check(with_({ memory_size_mb: 256.5 })), { param: "manifest.memory_size_mb", code: "invalid_type" });
  t.match(check(with_({ cpu_mhz: "500" })), { param: "manifest.cpu_mhz", code: "invalid_type" });
  t.match(check(with_({ gpu_count: 1 })), { param: "manifest.gpu_count", code: "resources_unavailable" }, "no GPU app host");
  t.match(check(with_({ gpu_count: -1 })), { param: "manifest.gpu_count" });
  const gpuOffer = { ...offer, maxGpuCount: 2 };
  t.equal(check(with_({ gpu_count: 2 }), gpuOffer), undefined, "gpus at the offer");
  t.match(check(with_({ gpu_count: 3 }), gpuOffer), { param: "manifest.gpu_count", code: "resources_unavailable" });
});

t.test("runtime: Python only", async (t) => {
  t.equal(check(with_({ runtime: "python" })), undefined);
  for (const bad of ["node", "python2", 3]) t.match(check(with_({ runtime: bad })), { param: "manifest.runtime", code: "unsupported_runtime" }, String(bad));
});

t.test("project: a display name", async (t) => {
  t.match(check(with_({ project: "  " })), { param: "manifest.project" });
  t.equal(check(with_({ project: "p".repeat(256) })), undefined);
  t.match(check(with_({ project: "p".repeat(257) })), { param: "manifest.project" });
});

t.test("env: names, values, count, reserved names", async (t) => {
  const many = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`V${i}`, "x"]));
  t.equal(check(with_({ env: many(MAX_ENV_VARS) })), undefined, "at the count limit");
  t.match(check(with_({ env: many(MAX_ENV_VARS + 1) })), { param: "manifest.env" });
  t.equal(check(with_({ env: { A: "x".repeat(MAX_ENV_VALUE_BYTES) } })), undefined, "value at the size limit");
  t.match(check(with_({ env: { A: "x".repeat(MAX_ENV_VALUE_BYTES + 1) } })), { param: "manifest.env.A" });
  t.match(check(with_({ env: { "1A": "x" } })), { param: "manifest.env.1A" });
  t.match(check(with_({ env: { "A-B": "x" } })), { param: "manifest.env.A-B" });
  t.match(check(with_({ env: { TRIBUTARY_BASE_URL: "x" } })), { param: "manifest.env.TRIBUTARY_BASE_URL", code: "reserved_name" });
  t.match(check(with_({ env: { A: { nested: 1 } } })), { param: "manifest.env.A", code: "invalid_type" });
  t.match(check(with_({ env: ["A=1"] })), { param: "manifest.env", code: "invalid_type" });
});

t.test("secrets: names, count, duplicates, not also in env", async (t) => {
  const names = (n: number) => Array.from({ length: n }, (_, i) => `S${i}`);
  t.equal(check(with_({ secrets: names(MAX_SECRETS) })), undefined, "at the count limit");
  t.match(check(with_({ secrets: names(MAX_SECRETS + 1) })), { param: "manifest.secrets" });
  t.match(check(with_({ secrets: ["lower"] })), { param: "manifest.secrets[0]" });
  t.match(check(with_({ secrets: ["A", "A"] })), { param: "manifest.secrets[1]", code: "duplicate_value" });
  t.match(check(with_({ secrets: ["TRIBUTARY_X"] })), { param: "manifest.secrets[0]", code: "reserved_name" });
  t.match(check(with_({ secrets: "A" })), { param: "manifest.secrets", code: "invalid_type" });
  t.match(check(with_({ secrets: ["KEY"], env: { KEY: "plain" } })), { param: "manifest.env.KEY", code: "conflicting_fields" });
});

t.test("timeouts: whole seconds from 1 to the bound, each optional", async (t) => {
  const timeoutsOf = (timeouts: unknown) => checkManifest(with_({ timeouts }), target, offer).timeouts;
  t.equal(checkManifest(base, target, offer).timeouts, undefined, "none written: the defaults apply later");
  t.same(timeoutsOf({ request_seconds: 1, idle_seconds: MAX_TIMEOUT_SECONDS }), { requestSeconds: 1, idleSeconds: MAX_TIMEOUT_SECONDS }, "at both edges");
  t.same(timeoutsOf({ idle_seconds: 900 }), { idleSeconds: 900 }, "one field only");
  t.same(timeoutsOf({}), {}, "an empty mapping");
  for (const field of ["request_seconds", "idle_seconds"]) {
    t.match(check(with_({ timeouts: { [field]: 0 } })), { param: `manifest.timeouts.${field}`, code: "invalid_value" }, `${field} 0`);
    t.match(check(with_({ timeouts: { [field]: MAX_TIMEOUT_SECONDS + 1 } })), { param: `manifest.timeouts.${field}`, code: "invalid_value" }, `${field} past the bound`);
    t.match(check(with_({ timeouts: { [field]: 1.5 } })), { param: `manifest.timeouts.${field}`, code: "invalid_type" }, `${field} not whole`);
    t.match(check(with_({ timeouts: { [field]: "60" } })), { param: `manifest.timeouts.${field}`, code: "invalid_type" }, `${field} a string`);
  }
  t.match(check(with_({ timeouts: { connect_seconds: 5 } })), { param: "manifest.timeouts.connect_seconds", code: "unknown_parameter" });
  t.match(check(with_({ timeouts: 60 })), { param: "manifest.timeouts", code: "invalid_type" });
  t.match(check(with_({ timeouts: [60] })), { param: "manifest.timeouts", code: "invalid_type" });
});
