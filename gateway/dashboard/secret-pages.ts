import { isDomainError } from "../../modules/errors/mod.js";
import { parseSecretCreate, parseSecretRotate } from "../../modules/sandboxes/mod.js";
import { SECRET_NAME, type SecretObject } from "../../modules/secrets/mod.js";
import type { HttpExchange } from "../http/exchange.js";
import type { Router } from "../http/router.js";
import { cell, formatTime, html, listTable, page } from "./html.js";
import { type DashboardKit, field, inProject, messageOf, notFoundPage, postButton, type Signed } from "./kit.js";

// Secrets of a project: names, versions and times; create, rotate, delete. A value goes in through
// a form and never comes back: no page renders one, a form that is refused is shown again empty,
// and errors never quote it (the checks are the API's own).

const pub = { public: true };

type Notice = { text: string; error?: boolean };

export function registerSecretPages(router: Router, kit: DashboardKit): void {
  const { deps } = kit;
  const { store, maxPerProject, maxValueBytes } = deps.secrets;
  // A value is percent-encoded in the form (3 characters a byte at most), beside its name and token.
  const formBytes = maxValueBytes * 3 + 4096;
  const secretLink = (s: Signed, name: string, suffix = "") => inProject(s, `/dashboard/secrets/${encodeURIComponent(name)}${suffix}`);
  // A textarea's line ends arrive as CRLF (HTML forms normalise them): stored as typed, with LF.
  const valueOf = (form: URLSearchParams) => (form.get("value") ?? "").replace(/\r\n/g, "\n");
  const valueField = (label: string) =>
    html`<label>${label}<textarea name="value" rows="4" required autocomplete="off" spellcheck="false"></textarea></label>`;
  const csrf = (s: Signed) => html`<input type="hidden" name="csrf" value="${s.session.csrf}">`;

  async function secretsPage(ex: HttpExchange, s: Signed, status = 200, notice?: Notice): Promise<void> {
    const secrets = await store.list(s.project);
    const rows = secrets.map((x) => [html`<a href="${secretLink(s, x.name)}"><code>${x.name}</code></a>`, cell(x.version, "num"), formatTime(x.created_at), formatTime(x.updated_at)]);
    kit.sendHtml(ex, status, page(kit.layoutOf(s, "Secrets", "secrets"), html`<h1>Secrets</h1>${kit.projectPicker(s, "/dashboard/secrets")}
${notice ? html`<div class="notice${notice.error ? " error" : ""}" role="status">${notice.text}</div>` : ""}
${listTable(["Name", "Version", "Created", "Updated"], rows, "secrets")}
${secrets.length === 0 ? html`<p class="muted">No secrets in this project.</p>` : ""}
<h2>New secret</h2><div class="card"><form class="stack" method="post" action="${inProject(s, "/dashboard/secrets")}">${csrf(s)}
<label>Name<input name="name" required maxlength="128" pattern="[A-Z_][A-Z0-9_]*" autocomplete="off" spellcheck="false" placeholder="DATABASE_URL"></label>${valueField("Value")}
<button type="submit">Create secret</button></form>
<p class="muted">Sandboxes, jobs and apps that name a secret get it as an environment variable of that name. Its value is encrypted at rest and never shown again, here or by the API. ${secrets.length} of ${maxPerProject} secrets; values up to ${Math.floor(maxValueBytes / 1024)} KiB.</p></div>`));
  }

  async function secretPage(ex: HttpExchange, s: Signed, secret: SecretObject, status = 200, notice?: Notice): Promise<void> {
    const name = encodeURIComponent(secret.name);
    kit.sendHtml(ex, status, page(kit.layoutOf(s, `Secret ${secret.name}`, "secrets"), html`<h1>Secret <span class="muted">${secret.name}</span></h1>
${notice ? html`<div class="notice${notice.error ? " error" : ""}" role="status">${notice.text}</div>` : ""}
<div class="card"><dl class="kv grid">${field("Name", html`<code>${secret.name}</code>`)}${field("Version", secret.version)}${field("Created", formatTime(secret.created_at))}${field("Updated", formatTime(secret.updated_at))}</dl></div>
<h2>Rotate</h2><div class="card"><form class="stack" method="post" action="${secretLink(s, secret.name, "/rotate")}">${csrf(s)}${valueField("New value")}<button type="submit">Rotate secret</button></form>
<p class="muted">Sandboxes, jobs and deployments started from now on get the new value; what runs keeps the value it started with.</p></div>
<h2>Delete</h2><div class="actions">${postButton(s, `/dashboard/secrets/${name}/delete`, "Delete secret")}<span class="muted">Sandboxes and jobs that name it will not start, nor will deployments.</span></div>
<div class="actions"><a href="${inProject(s, "/dashboard/secrets")}">All secrets</a></div>`));
  }

  /** The secret named in the path, or undefined after answering 404. */
  async function secretOf(ex: HttpExchange, s: Signed, name: string): Promise<SecretObject | undefined> {
    const secret = SECRET_NAME.test(name) ? await store.get(s.project, name) : undefined;
    if (!secret) notFoundPage(kit, ex, s, "secrets", "Secret");
    return secret;
  }

  router.get("/dashboard/secrets", async (ex) => {
    const s = await kit.signedIn(ex);
    if (s) await secretsPage(ex, s);
  }, pub);

  router.post("/dashboard/secrets", async (ex) => {
    const s = await kit.signedIn(ex);
    if (!s) return;
    const form = await kit.checkedForm(ex, s, formBytes);
    if (!form) return;
    let created: Awaited<ReturnType<typeof store.create>>;
    let name: string;
    try {
      const parsed = parseSecretCreate({ name: form.get("name") ?? "", value: valueOf(form) }, maxValueBytes);
      name = parsed.name;
      created = await store.create(s.project, parsed.name, parsed.value, maxPerProject);
    } catch (err) {
      if (!isDomainError(err)) throw err;
      return secretsPage(ex, s, 400, { text: messageOf(err), error: true });
    }
    if ("held" in created) return secretsPage(ex, s, 400, { text: `This project has ${created.held} secrets, the limit is ${maxPerProject}. Delete some first.`, error: true });
    if ("exists" in created) return secretsPage(ex, s, 409, { text: `A secret named ${name} exists already: open it to rotate its value.`, error: true });
    await secretsPage(ex, s, 200, { text: `Secret ${created.created.name} created (version 1). Its value is not shown again.` });
  }, pub);

  router.get("/dashboard/secrets/:name", async (ex, { name }) => {
    const s = await kit.signedIn(ex);
    if (!s) return;
    const secret = await secretOf(ex, s, name!);
    if (secret) await secretPage(ex, s, secret);
  }, pub);

  router.post("/dashboard/secrets/:name/rotate", async (ex, { name }) => {
    const s = await kit.signedIn(ex);
    if (!s) return;
    const form = await kit.checkedForm(ex, s, formBytes);
    if (!form) return;
    const secret = await secretOf(ex, s, name!);
    if (!secret) return;
    try {
      const { value } = parseSecretRotate({ value: valueOf(form) }, maxValueBytes);
      const rotated = await store.rotate(s.project, secret.name, value);
      if (!rotated) return notFoundPage(kit, ex, s, "secrets", "Secret");
      await secretPage(ex, s, rotated, 200, { text: `Secret ${rotated.name} rotated: version ${rotated.version}.` });
    } catch (err) {
      if (!isDomainError(err)) throw err;
      await secretPage(ex, s, secret, 400, { text: messageOf(err), error: true });
    }
  }, pub);

  router.post("/dashboard/secrets/:name/delete", async (ex, { name }) => {
    const s = await kit.signedIn(ex);
    if (!s) return;
    if (!(await kit.checkedForm(ex, s))) return;
    const secret = await secretOf(ex, s, name!);
    if (!secret) return;
    if (!(await store.delete(s.project, secret.name))) return notFoundPage(kit, ex, s, "secrets", "Secret");
    await secretsPage(ex, s, 200, { text: `Secret ${secret.name} deleted.` });
  }, pub);
}
