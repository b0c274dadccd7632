// Server-rendered HTML for the dashboard. Every value that comes from users or requests
// (prompts, outputs, names, ids) goes through `esc` (or `text`), so it is always text, never markup;
// pages carry no script at all, and the Content-Security-Policy forbids any.

export const esc = (value: unknown): string =>
  String(value ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);

/** Markup built by these helpers: only `Html` values are inserted unescaped. */
export class Html {
  constructor(readonly value: string) {}
  toString(): string {
    return this.value;
  }
}

/** Tagged template: interpolated values are escaped unless they are Html (or arrays of it). */
export function html(strings: TemplateStringsArray, ...values: unknown[]): Html {
  let out = strings[0]!;
  values.forEach((v, i) => {
    out += render(v) + strings[i + 1]!;
  });
  return new Html(out);
}

function render(v: unknown): string {
  if (v instanceof Html) return v.value;
  if (Array.isArray(v)) return v.map(render).join("");
  if (v === undefined || v === null || v === false) return "";
  return esc(v);
}

export const CSP = "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

export const STYLESHEET = `
:root { --fg: #1d2330; --muted: #667085; --line: #e4e7ec; --accent: #3b5bdb; --bad: #c92a2a; --ok: #2b8a3e; --bg: #f8f9fb; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg); }
header { display: flex; align-items: center; gap: 24px; padding: 10px 24px; background: #fff; border-bottom: 1px solid var(--line); }
header .brand { font-weight: 700; letter-spacing: .02em; }
header nav a { margin-right: 16px; color: var(--muted); text-decoration: none; }
header nav a.on { color: var(--fg); font-weight: 600; }
header .who { margin-left: auto; color: var(--muted); display: flex; gap: 12px; align-items: center; }
main { padding: 20px 24px; max-width: 1440px; }
h1 { font-size: 20px; margin: 0 0 16px; }
h2 { font-size: 15px; margin: 24px 0 8px; }
table { border-collapse: collapse; width: 100%; background: #fff; border: 1px solid var(--line); }
th, td { text-align: left; padding: 6px 10px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { font-weight: 600; color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .03em; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
a { color: var(--accent); }
form.filters { display: flex; gap: 8px; align-items: end; margin-bottom: 12px; flex-wrap: wrap; }
label { display: flex; flex-direction: column; font-size: 12px; color: var(--muted); gap: 2px; }
input, select, button { font: inherit; padding: 5px 8px; border: 1px solid var(--line); border-radius: 4px; background: #fff; }
button { background: var(--accent); color: #fff; border-color: var(--accent); cursor: pointer; }
button.quiet { background: #fff; color: var(--fg); border-color: var(--line); }
button.danger { background: #fff; color: var(--bad); border-color: var(--bad); }
.status-success { color: var(--ok); } .status-error { color: var(--bad); } .status-cancelled, .status-client_disconnected { color: var(--muted); }
progress { width: 140px; height: 12px; vertical-align: middle; }
pre { background: #fff; border: 1px solid var(--line); padding: 10px; overflow: auto; max-height: 420px; white-space: pre-wrap; word-break: break-word; }
.card { background: #fff; border: 1px solid var(--line); padding: 16px; border-radius: 6px; margin-bottom: 16px; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(180px, 1fr)); gap: 12px; }
.kv dt { color: var(--muted); font-size: 12px; } .kv dd { margin: 0 0 8px; overflow-wrap: anywhere; }
figure { margin: 0 0 16px; }
.notice { padding: 10px 14px; border-radius: 4px; background: #fff4e6; border: 1px solid #ffd8a8; margin-bottom: 12px; }
.error { background: #fff5f5; border-color: #ffc9c9; color: var(--bad); }
.secret { font-family: ui-monospace, monospace; background: #ebfbee; border: 1px solid #b2f2bb; padding: 8px; word-break: break-all; }
.signin { max-width: 360px; margin: 80px auto; }
.signin form { display: flex; flex-direction: column; gap: 12px; }
.pager { margin-top: 12px; display: flex; gap: 12px; }
svg text { font: 11px system-ui, sans-serif; fill: var(--muted); }
.muted { color: var(--muted); }
.legend { margin-left: 12px; display: inline-flex; align-items: center; gap: 4px; }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; }
.swatch.s0 { background: #3b5bdb; } .swatch.s1 { background: #e8590c; } .swatch.s2 { background: #2b8a3e; }
form.inline { display: inline-flex; gap: 6px; align-items: center; margin: 0; }
td form.inline input { padding: 3px 6px; }
dl.kv { margin: 0; }
`;

export interface Layout {
  title: string;
  /** Navigation item that is active. */
  active?: "traces" | "usage" | "keys" | "batches" | "members" | "projects" | "invitations" | "files" | "limits";
  email?: string;
  csrf?: string;
  project?: string;
}

export function page(layout: Layout, body: Html): string {
  const q = layout.project ? `?project=${encodeURIComponent(layout.project)}` : "";
  const nav = (key: NonNullable<Layout["active"]>, label: string) => html`<a href="/dashboard/${key}${new Html(esc(q))}" class="${layout.active === key ? "on" : ""}">${label}</a>`;
  const header = layout.email
    ? html`<header><span class="brand">Tributary</span><nav>${nav("traces", "Logs")}${nav("usage", "Usage")}${nav("batches", "Batches")}${nav("files", "Files")}${nav("limits", "Rate limits")}${nav("keys", "API keys")}${nav("projects", "Projects")}${nav("members", "Members")}${nav("invitations", "Invitations")}</nav>
<span class="who"><span>${layout.email}</span><form method="post" action="/dashboard/sign-out"><input type="hidden" name="csrf" value="${layout.csrf}"><button class="quiet" type="submit">Sign out</button></form></span></header>`
    : html``;
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(layout.title)} · Tributary</title><link rel="stylesheet" href="/dashboard/static/app.css"></head>
<body>${header.value}<main>${body.value}</main></body></html>`;
}

/** Bar chart (inline SVG): one bar per bucket, labelled below; values are numbers only. */
export function barChart(points: Array<{ label: string; value: number }>, options: { title: string; height?: number; color?: string }): Html {
  const width = 720;
  const height = options.height ?? 160;
  const pad = { left: 48, bottom: 22, top: 10 };
  const max = Math.max(1, ...points.map((p) => p.value));
  const bw = points.length > 0 ? (width - pad.left) / points.length : 0;
  const plotH = height - pad.bottom - pad.top;
  const bars = points.map((p, i) => {
    const h = (p.value / max) * plotH;
    return html`<rect x="${(pad.left + i * bw + 1).toFixed(1)}" y="${(pad.top + plotH - h).toFixed(1)}" width="${Math.max(1, bw - 2).toFixed(1)}" height="${h.toFixed(1)}" fill="${options.color ?? "#3b5bdb"}"><title>${p.label}: ${p.value}</title></rect>`;
  });
  const every = Math.max(1, Math.ceil(points.length / 8));
  const labels = points.map((p, i) => (i % every === 0 ? html`<text x="${(pad.left + i * bw).toFixed(1)}" y="${height - 6}">${p.label}</text>` : html``));
  return html`<figure class="card"><figcaption class="muted">${options.title}</figcaption>
<svg viewBox="0 0 ${width} ${height}" width="100%" role="img" aria-label="${options.title}">
<line x1="${pad.left}" y1="${pad.top + plotH}" x2="${width}" y2="${pad.top + plotH}" stroke="#e4e7ec"/>
<text x="0" y="${pad.top + 10}">${formatNumber(max)}</text><text x="0" y="${pad.top + plotH}">0</text>
${bars}${labels}</svg></figure>`;
}

const SERIES_COLORS = ["#3b5bdb", "#e8590c", "#2b8a3e"];

/**
 * Line chart (inline SVG): one polyline per series over the buckets, a point per bucket that has a
 * value (a bucket with no requests has none: the line breaks there). Values are numbers only.
 */
export function lineChart(points: Array<{ label: string; values: Array<number | null> }>, options: { title: string; series: string[]; id: string; height?: number }): Html {
  const width = 720;
  const height = options.height ?? 160;
  const pad = { left: 48, bottom: 22, top: 10, right: 8 };
  const max = Math.max(1, ...points.flatMap((p) => p.values.filter((v): v is number => v !== null)));
  const plotH = height - pad.bottom - pad.top;
  const step = points.length > 1 ? (width - pad.left - pad.right) / (points.length - 1) : 0;
  const x = (i: number) => pad.left + i * step;
  const y = (v: number) => pad.top + plotH - (v / max) * plotH;
  const lines = options.series.map((name, s) => {
    const color = SERIES_COLORS[s % SERIES_COLORS.length]!;
    // Runs of consecutive buckets with values: one polyline each.
    const runs: Array<Array<[number, number]>> = [];
    let run: Array<[number, number]> = [];
    points.forEach((p, i) => {
      const v = p.values[s];
      if (v === null || v === undefined) {
        if (run.length) runs.push(run);
        run = [];
      } else run.push([x(i), y(v)]);
    });
    if (run.length) runs.push(run);
    const dots = points.map((p, i) => {
      const v = p.values[s];
      return v === null || v === undefined ? html`` : html`<circle class="series-${s}" cx="${x(i).toFixed(1)}" cy="${y(v).toFixed(1)}" r="2.5" fill="${color}"><title>${p.label} ${name}: ${v.toFixed(1)}</title></circle>`;
    });
    return html`${runs.map((r) => html`<polyline fill="none" stroke="${color}" stroke-width="1.5" points="${r.map(([a, b]) => `${a.toFixed(1)},${b.toFixed(1)}`).join(" ")}"/>`)}${dots}`;
  });
  const every = Math.max(1, Math.ceil(points.length / 8));
  const labels = points.map((p, i) => (i % every === 0 ? html`<text x="${x(i).toFixed(1)}" y="${height - 6}">${p.label}</text>` : html``));
  const legend = options.series.map((name, s) => html`<span class="legend"><span class="swatch s${s}"></span>${name}</span>`);
  return html`<figure class="card" id="${options.id}"><figcaption class="muted">${options.title} ${legend}</figcaption>
<svg viewBox="0 0 ${width} ${height}" width="100%" role="img" aria-label="${options.title}">
<line x1="${pad.left}" y1="${pad.top + plotH}" x2="${width}" y2="${pad.top + plotH}" stroke="#e4e7ec"/>
<text x="0" y="${pad.top + 10}">${formatNumber(max)}</text><text x="0" y="${pad.top + plotH}">0</text>
${lines}${labels}</svg></figure>`;
}

/** A trace's timeline: one bar per phase, on a common scale (inline SVG). */
export function timeline(phases: Array<{ label: string; from: number; to: number }>, totalMs: number): Html {
  const width = 720;
  const rowH = 22;
  const left = 150;
  const scale = (width - left - 60) / Math.max(totalMs, 0.001);
  const rows = phases.map((p, i) => {
    const x = left + p.from * scale;
    const w = Math.max(2, (p.to - p.from) * scale);
    return html`<text x="0" y="${i * rowH + 15}">${p.label}</text><rect x="${x.toFixed(1)}" y="${i * rowH + 4}" width="${w.toFixed(1)}" height="14" fill="#748ffc"/><text x="${(x + w + 4).toFixed(1)}" y="${i * rowH + 15}">${(p.to - p.from).toFixed(1)} ms</text>`;
  });
  return html`<svg viewBox="0 0 ${width} ${phases.length * rowH + 6}" width="100%" role="img" aria-label="timeline">${rows}</svg>`;
}

export function formatNumber(n: number): string {
  if (n >= 1e9) return `${(n / 1e9).toFixed(1)}G`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
  if (n >= 1e4) return `${(n / 1e3).toFixed(1)}k`;
  return String(Math.round(n * 100) / 100);
}

export function formatTime(unixSeconds: number): string {
  return new Date(unixSeconds * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}
