// tier: slow (a stack of its own)
import t from "tap";
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startStack } from "../../harness/stack.js";
import { TEST_KEY } from "../../harness/processes.js";
import { appDir, waitForDeployment } from "../../harness/apps.js";

// A bundle is bounded while it unpacks, in total bytes and in files (here 8 MiB and 100): a small
// archive that unpacks past either, built of files each within the per-file bound, fails its
// deployment (bundle_too_large) naming the limit, and leaves nothing of it on the app host. A
// bundle within both deploys.
const MAX_BYTES = 8 * 1024 * 1024;
const MAX_FILES = 100;
const stack = await startStack(t, {
  runners: 0,
  sandboxHosts: 1,
  sandboxHostEnv: { TRIBUTARY_APP_BUNDLE_MAX_BYTES: String(MAX_BYTES), TRIBUTARY_APP_BUNDLE_MAX_FILES: String(MAX_FILES) },
});
const auth = { authorization: `Bearer ${TEST_KEY}` };
const MANIFEST = 'entrypoint: "app:app"\norganization_slug: "local"\nproject: "Default project"\nproject_slug: "default-project"\ncpu_mhz: 250\ngpu_count: 0\nmemory_size_mb: 96\n';
const APP = `
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})
`;

/** Deploys the app with what `prepare` adds beside it (names sorted in the archive, as `tributary deploy` packs); the deployment once final or healthy. */
async function deploy(prepare: (dir: string) => void): Promise<{ deployment: any; archiveBytes: number }> {
  const dir = appDir(undefined, { "app.py": APP, "tributary.yaml": MANIFEST });
  prepare(dir);
  const archive = execFileSync("tar", ["-czf", "-", "--sort=name", "-C", dir, "."], { maxBuffer: 64 * 1024 * 1024 });
  const form = new FormData();
  form.set("manifest", MANIFEST);
  form.set("file", new Blob([archive]), "bundle.tar.gz");
  const artifact = (await (await fetch(`${stack.gateway.url}/v1/artifacts`, { method: "POST", body: form, headers: auth })).json()) as { id: string };
  const created = await fetch(`${stack.gateway.url}/v1/apps/deployments`, { method: "POST", body: JSON.stringify({ artifact_id: artifact.id }), headers: { ...auth, "content-type": "application/json" } });
  const { id } = (await created.json()) as { id: string };
  return { deployment: await waitForDeployment(stack.gateway.url, TEST_KEY, id, ["healthy", "failed"]), archiveBytes: archive.length };
}

/** Whether anything of the deployment's bundle is left on any app host of this machine. */
function bundleLeft(deploymentId: string): boolean {
  return readdirSync(tmpdir())
    .filter((d) => d.startsWith("tributary-apps-"))
    .some((d) => existsSync(join(tmpdir(), d, "bundles", deploymentId)) || existsSync(join(tmpdir(), d, "bundles", `${deploymentId}.tgz`)));
}

t.test("a bundle that unpacks past the byte bound, each file within it: refused, nothing left", async (t) => {
  const { deployment, archiveBytes } = await deploy((dir) => {
    for (const name of ["data-1.bin", "data-2.bin", "data-3.bin"]) writeFileSync(join(dir, name), Buffer.alloc(3 * 1024 * 1024));
  });
  t.ok(archiveBytes < 100 * 1024, `a small archive (${archiveBytes} bytes) of 9 MiB`);
  t.match(deployment, { status: "failed", reason: "bundle_too_large", message: "the bundle unpacks to more than 8 MiB (TRIBUTARY_APP_BUNDLE_MAX_BYTES): refused at ./data-3.bin" });
  t.notOk(bundleLeft(deployment.id), "no partial files");
});

t.test("a bundle of more files than the bound: refused, nothing left", async (t) => {
  const { deployment } = await deploy((dir) => {
    for (let i = 0; i < MAX_FILES; i++) writeFileSync(join(dir, `empty-${String(i).padStart(3, "0")}`), "");
  });
  t.match(deployment, { status: "failed", reason: "bundle_too_large", message: /^the bundle holds more than 100 files, directories and links \(TRIBUTARY_APP_BUNDLE_MAX_FILES\): refused at / });
  t.notOk(bundleLeft(deployment.id), "no partial files");
});

t.test("a bundle within both bounds deploys", async (t) => {
  const { deployment } = await deploy((dir) => writeFileSync(join(dir, "data.bin"), Buffer.alloc(7 * 1024 * 1024)));
  t.equal(deployment.status, "healthy", JSON.stringify(deployment));
  await fetch(`${stack.gateway.url}/v1/apps/deployments/${deployment.id}/stop`, { method: "POST", headers: auth });
});
