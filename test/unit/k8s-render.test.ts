import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import t from "tap";
import { parseAllDocuments } from "yaml";
import { k8sNatsAuthManifest } from "../../cli/k8s-nats-auth.js";
import { repoRoot } from "../../lib/paths.js";

// What `kubectl apply -k k8s/` would send: the folder rendered by kubectl's own kustomize (the
// Go YAML parser, stricter than the JavaScript one), every object validated against the
// OpenAPI schemas of a current Kubernetes release (kubernetes-models) and, for the TLS
// certificates, of cert-manager (@kubernetes-models/cert-manager). CI installs kubectl from
// Debian's kubernetes-client package (kubectl 1.20, kustomize v2) when none is present.

type K8sObject = { apiVersion: string; kind: string; metadata: { name: string; namespace?: string } } & Record<string, unknown>;

function render(): string {
  try {
    return execFileSync("kubectl", ["kustomize", join(repoRoot, "k8s")], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  } catch (err) {
    const e = err as { code?: string; stderr?: string; message: string };
    if (e.code === "ENOENT") throw new Error("kubectl is not installed: apt-get install kubernetes-client (see .ci/run)");
    throw new Error(`kubectl kustomize k8s/ failed: ${e.stderr || e.message}`);
  }
}

/** The model class of an object: kubernetes-models for the core API, cert-manager's for its kinds. */
async function modelOf(o: K8sObject): Promise<{ validate(): void } | undefined> {
  const [group, version] = o.apiVersion.includes("/") ? o.apiVersion.split("/") : ["", o.apiVersion];
  const module = group.endsWith("cert-manager.io") ? `@kubernetes-models/cert-manager/${group}/${version}` : `kubernetes-models/${group ? group + "/" : ""}${version}`;
  const exports = (await import(module).catch(() => ({}))) as Record<string, new (data: unknown) => { validate(): void }>;
  const Model = exports[o.kind];
  return Model ? new Model(o) : undefined;
}

const objects = parseAllDocuments(render()).map((d) => d.toJS() as K8sObject).filter(Boolean);

t.test("kubectl kustomize renders the folder", async (t) => {
  const kinds = new Set(objects.map((o) => o.kind));
  for (const kind of ["Namespace", "StatefulSet", "Deployment", "Service", "ConfigMap", "PodDisruptionBudget", "HorizontalPodAutoscaler", "Certificate", "Issuer"])
    t.ok(kinds.has(kind), `renders a ${kind}`);
});

t.test("every rendered object is valid against its OpenAPI schema", async (t) => {
  for (const o of objects) {
    const model = await modelOf(o);
    if (!model) {
      t.fail(`${o.apiVersion} ${o.kind} has no schema here`);
      continue;
    }
    try {
      model.validate();
      t.pass(`${o.kind}/${o.metadata.name}`);
    } catch (err) {
      t.fail(`${o.kind}/${o.metadata.name}: ${(err as Error).message}`);
    }
  }
});

t.test("a schema violation is caught (the validator is not a no-op)", async (t) => {
  const deployment = structuredClone(objects.find((o) => o.kind === "Deployment")!) as any;
  deployment.spec.template.spec.containers[0].ports = [{ containerPort: "http" }];
  await t.rejects((async () => (await modelOf(deployment))!.validate())(), /containerPort/);
});

t.test("k8s/nats-auth.yaml is the one lib/nats/permissions.ts renders", async (t) => {
  t.equal(readFileSync(join(repoRoot, "k8s", "nats-auth.yaml"), "utf8"), k8sNatsAuthManifest(), "regenerate: node dist/cli/main.js nats-auth-k8s > k8s/nats-auth.yaml");
});

const containersOf = (o: any): any[] => o.spec?.template?.spec?.containers ?? [];
const envValue = (c: any, name: string) => c.env?.find((e: any) => e.name === name)?.value;

t.test("every pod outlives its drain, and every container has requests and limits", async (t) => {
  for (const o of objects.filter((o) => o.kind === "Deployment" || o.kind === "StatefulSet") as any[]) {
    const pod = o.spec.template.spec;
    for (const c of containersOf(o)) {
      t.ok(c.resources?.requests?.cpu && c.resources?.requests?.memory && c.resources?.limits?.memory, `${o.metadata.name}: cpu and memory requests, memory limit`);
      const drainMs = Number(envValue(c, "TRIBUTARY_DRAIN_TIMEOUT_MS") ?? (c.name === "nats" ? 35_000 : NaN));
      t.ok(pod.terminationGracePeriodSeconds * 1000 > drainMs + 5_000, `${o.metadata.name}: grace ${pod.terminationGracePeriodSeconds} s > drain ${drainMs / 1000} s + 5 s`);
    }
  }
});

t.test("Tributary pods connect with their own NATS identity over TLS", async (t) => {
  for (const o of objects.filter((o) => o.kind === "Deployment") as any[]) {
    for (const c of containersOf(o)) {
      const identity = { gateway: "gateway", actors: "actors", runner: "runner", "sandbox-host": "sandbox-host" }[c.args[0] as string];
      t.equal(envValue(c, "TRIBUTARY_NATS_USER"), identity, `${o.metadata.name} is ${identity}`);
      const password = c.env.find((e: any) => e.name === "TRIBUTARY_NATS_PASSWORD");
      t.same(password?.valueFrom?.secretKeyRef, { name: "tributary-nats-auth", key: identity }, `${o.metadata.name}: its password from the Secret`);
      t.ok(envValue(c, "TRIBUTARY_NATS_TLS_CA"), `${o.metadata.name} verifies the servers`);
    }
  }
});

t.test("disruption budgets and anti-affinity", async (t) => {
  const pdbs = objects.filter((o) => o.kind === "PodDisruptionBudget") as any[];
  for (const o of objects.filter((o) => o.kind === "Deployment" || o.kind === "StatefulSet") as any[]) {
    const labels = o.spec.template.metadata.labels;
    t.ok(pdbs.some((p) => Object.entries(p.spec.selector.matchLabels).every(([k, v]) => labels[k] === v)), `${o.metadata.name} has a PodDisruptionBudget`);
  }
  const nats = objects.find((o) => o.kind === "StatefulSet" && o.metadata.name === "nats") as any;
  t.ok(nats.spec.template.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution, "one NATS server per node");
  const actors = objects.find((o) => o.kind === "Deployment" && o.metadata.name === "actors") as any;
  t.ok(actors.spec.template.spec.affinity.podAntiAffinity, "actor hosts spread over nodes");
});
