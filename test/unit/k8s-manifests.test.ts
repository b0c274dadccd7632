import t from "tap";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import { parseCatalog } from "../../modules/catalog/mod.js";
import { repoRoot } from "../../lib/paths.js";

// The cluster manifests cannot be deployed here; this checks what can be checked without a
// cluster: they parse, every object is namespaced, containers run real CLI commands, every
// variable they set is one the processes read (documented in docs/configuration.md), and the catalog
// they ship is a valid catalog.

const dir = join(repoRoot, "k8s");
const configPage = readFileSync(join(repoRoot, "docs", "configuration.md"), "utf8");
type Obj = { kind: string; metadata: { name: string; namespace?: string }; spec?: any; data?: Record<string, string> };
const objects: Obj[] = [];
for (const file of readdirSync(dir).filter((f) => f.endsWith(".yaml") && f !== "kustomization.yaml"))
  for (const doc of parseAllDocuments(readFileSync(join(dir, file), "utf8"))) {
    t.same(doc.errors, [], `${file} parses`);
    objects.push(doc.toJS() as Obj);
  }

t.test("objects are complete and namespaced", async (t) => {
  for (const o of objects) {
    t.ok(o.kind && o.metadata?.name, `${o.kind} ${o.metadata?.name}`);
    if (o.kind !== "Namespace") t.equal(o.metadata.namespace, "tributary", `${o.kind}/${o.metadata.name} is in the namespace`);
  }
  const kustomization = readFileSync(join(dir, "kustomization.yaml"), "utf8");
  for (const file of readdirSync(dir).filter((f) => f.endsWith(".yaml") && f !== "kustomization.yaml"))
    t.match(kustomization, file, `kustomization lists ${file}`);
});

t.test("containers run Tributary commands with known settings", async (t) => {
  const commands = new Set(["gateway", "runner", "actors", "sandbox-host"]);
  for (const o of objects.filter((o) => o.kind === "Deployment")) {
    for (const c of o.spec.template.spec.containers) {
      if (!String(c.image).includes("tributary")) continue;
      t.ok(commands.has(c.args[0]), `${o.metadata.name} runs "${c.args[0]}"`);
      for (const e of c.env ?? []) t.match(configPage, `\`${e.name}\``, `${e.name} is documented`);
    }
  }
  const config = objects.find((o) => o.metadata.name === "tributary-config")!;
  for (const name of Object.keys(config.data!)) t.match(configPage, `\`${name}\``, `${name} is documented`);
});

t.test("the shipped catalog is valid", async (t) => {
  const catalog = objects.find((o) => o.metadata.name === "tributary-catalog")!;
  const specs = parseCatalog(catalog.data!["catalog.yaml"]!, "k8s catalog", {});
  t.same(specs.map((s) => s.id), ["qwen/qwen3-0.6b", "meta/llama-3.2-3b-instruct"]);
  const runnerModels = objects
    .filter((o) => o.kind === "Deployment" && o.metadata.name.startsWith("runner-"))
    .map((o) => o.spec.template.spec.containers[0].env.find((e: { name: string }) => e.name === "TRIBUTARY_RUNNER_MODELS").value);
  t.same(runnerModels.sort(), specs.map((s) => s.id).sort(), "one runner Deployment per catalog model");
});
