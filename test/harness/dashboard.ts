import { mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import type { AdminApi } from "../../modules/admin-api/mod.js";

// Dashboard helpers: an organization with its first owner (an invitation redeemed with an email
// and a password), a cookie-keeping HTTP client that signs in through the form as a browser would,
// and the Chromium tests' screenshots.

export async function ownerOrganization(
  stack: { admin: AdminApi; gateway: { url: string } },
  email: string,
  password: string,
  /** The names (a hosted address is made of them, and belongs to the first project that deploys at it). */
  names = { organization: "Dash Org", project: "Dash Project" },
) {
  const { gateway } = stack;
  const { code } = await stack.admin.createInvitation({ note: email, expiresInSeconds: 0 });
  const res = await fetch(gateway.url + "/v1/invitations/redeem", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ code, organization_name: names.organization, project_name: names.project, email, password }),
  });
  if (res.status !== 200) throw new Error(`redeem failed: ${res.status} ${await res.text()}`);
  return (await res.json()) as { organization: { id: string }; project: { id: string }; api_key: { value: string; id: string }; owner: { id: string; email: string; role: string } };
}

export class CookieClient {
  readonly cookies = new Map<string, string>();
  constructor(readonly base: string) {}

  async request(path: string, init: { method?: string; form?: Record<string, string>; headers?: Record<string, string> } = {}) {
    const headers: Record<string, string> = { ...init.headers };
    if (this.cookies.size > 0) headers.cookie = [...this.cookies].map(([k, v]) => `${k}=${v}`).join("; ");
    if (init.form) headers["content-type"] = "application/x-www-form-urlencoded";
    const res = await fetch(this.base + path, {
      method: init.method ?? (init.form ? "POST" : "GET"),
      headers,
      body: init.form ? new URLSearchParams(init.form).toString() : undefined,
      redirect: "manual",
    });
    for (const c of res.headers.getSetCookie()) {
      const [pair] = c.split(";");
      const [name, value] = pair!.split("=");
      if (/Max-Age=0/.test(c)) this.cookies.delete(name!);
      else this.cookies.set(name!, value!);
    }
    return { status: res.status, headers: res.headers, text: await res.text() };
  }

  /**
   * The cells' text of the table row whose cell `column` holds `text` (an object's row in a list):
   * tags as spaces, entities decoded, white space collapsed; undefined when there is none.
   */
  static rowOf(html: string, text: string, column = 0): string[] | undefined {
    const cells = (row: string) =>
      row
        .split(/<td[^>]*>/)
        .slice(1)
        .map((c) =>
          c
            .replace(/<[^>]*>/g, " ")
            .replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/&amp;/g, "&")
            .replace(/\s+/g, " ")
            .trim(),
        );
    return (html.match(/<tr>[^]*?<\/tr>/g) ?? []).map(cells).find((c) => c[column]?.includes(text));
  }

  /** The hidden csrf field of a page's first form. */
  static csrfOf(html: string): string {
    const m = /name="csrf" value="([^"]+)"/.exec(html);
    if (!m) throw new Error("no csrf field on the page");
    return m[1]!;
  }

  async signIn(email: string, password: string) {
    const form = await this.request("/dashboard/sign-in");
    return this.request("/dashboard/sign-in", { form: { csrf: CookieClient.csrfOf(form.text), email, password } });
  }
}

/**
 * Where the Chromium tests put their screenshots: TEST_SCREENSHOTS=DIR (made if missing), for a
 * person to look at the pages. Unset, no screenshot is taken (their encoding is much of those
 * tests' time); the pages' checks run either way.
 */
export const screenshotsDir: string | undefined = process.env.TEST_SCREENSHOTS ? resolve(process.env.TEST_SCREENSHOTS) : undefined;
if (screenshotsDir) mkdirSync(screenshotsDir, { recursive: true });

/** A full-page screenshot of `page` as `<name>.png` in screenshotsDir, when it is set. */
export async function screenshot(page: { screenshot(options: { path: string; fullPage: boolean }): Promise<unknown> }, name: string, fullPage = true): Promise<void> {
  if (screenshotsDir) await page.screenshot({ path: join(screenshotsDir, `${name}.png`), fullPage });
}
