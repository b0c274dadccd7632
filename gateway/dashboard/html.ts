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
header { display: flex; flex-wrap: wrap; align-items: center; gap: 8px 24px; padding: 10px 24px 0; background: #fff; border-bottom: 1px solid var(--line); }
header .brand { font-weight: 700; letter-spacing: .02em; }
header nav { order: 3; flex-basis: 100%; display: flex; flex-wrap: wrap; align-items: center; padding-bottom: 8px; }
header nav a { margin-right: 16px; color: var(--muted); text-decoration: none; white-space: nowrap; line-height: 2; }
header nav a.on { color: var(--fg); font-weight: 600; }
header nav .sep { width: 1px; height: 16px; background: var(--line); margin-right: 16px; }
header .who { margin-left: auto; color: var(--muted); display: flex; gap: 12px; align-items: center; min-width: 0; }
header .who > span { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
main { padding: 20px 24px; max-width: 1440px; }
h1 { font-size: 20px; margin: 0 0 16px; overflow-wrap: anywhere; }
h2 { font-size: 15px; margin: 24px 0 8px; }
table { border-collapse: collapse; width: 100%; background: #fff; border: 1px solid var(--line); }
th, td { text-align: left; padding: 6px 10px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { font-weight: 600; color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .03em; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.nowrap { white-space: nowrap; }
svg.chart-narrow { display: none; }
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
code.hash { font-size: 12px; overflow-wrap: anywhere; }
td.wrap { overflow-wrap: anywhere; min-width: 12em; }
/* A log's newest lines in view: a column laid out from the bottom scrolls to its end by itself. */
.log-box { display: flex; flex-direction: column-reverse; max-height: 60vh; overflow: auto; background: #fff; border: 1px solid var(--line); margin-bottom: 8px; }
.log-box pre.log { border: 0; margin: 0; max-height: none; overflow: visible; font-size: 12px; }
.stderr { color: var(--bad); }
.state { font-weight: 600; }
.state-running, .state-healthy, .state-succeeded, .state-ready { color: var(--ok); }
.state-failed { color: var(--bad); }
.state-queued, .state-starting, .state-pending, .state-stopping, .state-cancelling, .state-uploading { color: #e8590c; }
.state-stopped, .state-cancelled, .state-superseded { color: var(--muted); }
textarea { font: 13px ui-monospace, monospace; padding: 5px 8px; border: 1px solid var(--line); border-radius: 4px; width: 100%; min-height: 5em; }
form.stack { display: flex; flex-direction: column; gap: 10px; max-width: 640px; }
form.stack button { align-self: flex-start; }
.totals { display: grid; grid-template-columns: repeat(auto-fill, minmax(150px, 1fr)); gap: 12px; margin-bottom: 16px; }
.totals div { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 10px 12px; }
.totals dt { color: var(--muted); font-size: 12px; } .totals dd { margin: 2px 0 0; font-size: 18px; font-weight: 600; font-variant-numeric: tabular-nums; }
.totals dd small { font-size: 12px; font-weight: 400; color: var(--muted); }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); gap: 0 16px; }
.actions { display: flex; gap: 12px; align-items: center; flex-wrap: wrap; margin: 12px 0; }
/* A phone: the navigation scrolls sideways, and so do tables and plots wider than the screen. */
@media (max-width: 720px) {
  header { padding: 8px 12px 0; gap: 4px 12px; }
  header .who { margin-left: 0; flex: 1 1 100%; justify-content: space-between; }
  header nav { flex-wrap: nowrap; overflow-x: auto; }
  main { padding: 12px; }
  table:not(.cards) { display: block; overflow-x: auto; }
  table:not(.cards) th, table:not(.cards) td { white-space: nowrap; }
  table:not(.cards) td.wrap { white-space: normal; }
  table.cards thead { display: none; }
  table.cards, table.cards tbody, table.cards tr { display: block; }
  table.cards tr { border-bottom: 1px solid var(--line); padding: 6px 0; }
  table.cards td { display: flex; gap: 12px; border: 0; padding: 2px 10px; text-align: left; white-space: normal; overflow-wrap: anywhere; }
  table.cards td::before { content: attr(data-label); flex: 0 0 7.5em; color: var(--muted); font-size: 12px; padding-top: 2px; }
  table.cards td[data-label=""]::before { content: none; }
  svg.chart-wide { display: none; }
  svg.chart-narrow { display: block; }
  .charts { grid-template-columns: 1fr; }
  .grid { grid-template-columns: repeat(auto-fit, minmax(140px, 1fr)); }
}
`;

/** The navigation, in groups: what inference did, what the project runs, who and what has access. */
const NAVIGATION = [
  [["usage", "Usage"], ["traces", "Logs"], ["batches", "Batches"], ["files", "Files"], ["limits", "Rate limits"]],
  [["sandboxes", "Sandboxes"], ["jobs", "Jobs"], ["apps", "Apps"], ["artifacts", "Artifacts"], ["secrets", "Secrets"]],
  [["keys", "API keys"], ["projects", "Projects"], ["members", "Members"], ["invitations", "Invitations"]],
] as const;

export interface Layout {
  title: string;
  /** Navigation item that is active. */
  active?: (typeof NAVIGATION)[number][number][0];
  email?: string;
  csrf?: string;
  project?: string;
  /**
   * Load `to` again every `seconds`: a page that follows something running (no script). `to` is
   * the page's own address, so that a page shown after a form (a stop, a cancel) reloads as a page
   * and never posts again.
   */
  refresh?: { seconds: number; to: string };
}

export function page(layout: Layout, body: Html): string {
  const q = layout.project ? `?project=${encodeURIComponent(layout.project)}` : "";
  const nav = (key: NonNullable<Layout["active"]>, label: string) => html`<a href="/dashboard/${key}${new Html(esc(q))}" class="${layout.active === key ? "on" : ""}">${label}</a>`;
  const links = NAVIGATION.map((group, i) => html`${i > 0 ? html`<span class="sep"></span>` : ""}${group.map(([key, label]) => nav(key, label))}`);
  const header = layout.email
    ? html`<header><span class="brand">Tributary</span><nav>${links}</nav>
<span class="who"><span>${layout.email}</span><form method="post" action="/dashboard/sign-out"><input type="hidden" name="csrf" value="${layout.csrf}"><button class="quiet" type="submit">Sign out</button></form></span></header>`
    : html``;
  const refresh = layout.refresh ? `<meta http-equiv="refresh" content="${layout.refresh.seconds}; url=${esc(layout.refresh.to)}">` : "";
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">${refresh}
<title>${esc(layout.title)} · Tributary</title><link rel="stylesheet" href="/dashboard/static/app.css"></head>
<body>${header.value}<main>${body.value}</main></body></html>`;
}

/** A cell of a list table with a class of its own (num, wrap, nowrap). */
export class Cell {
  constructor(readonly content: unknown, readonly className: string) {}
}
export const cell = (content: unknown, className: string) => new Cell(content, className);

/**
 * A list's table: a row per item, each cell labelled with its column, so that on a phone each row
 * is shown as a card of labelled lines instead of a table wider than the screen.
 */
export function listTable(columns: readonly string[], rows: ReadonlyArray<readonly unknown[]>, id?: string): Html {
  const td = (c: unknown, i: number) =>
    c instanceof Cell ? html`<td class="${c.className}" data-label="${columns[i]}">${c.content}</td>` : html`<td data-label="${columns[i]}">${c}</td>`;
  return html`<table class="cards"${id ? new Html(` id="${esc(id)}"`) : ""}><thead><tr>${columns.map((c) => html`<th>${c}</th>`)}</tr></thead><tbody>
${rows.map((r) => html`<tr>${r.map(td)}</tr>
`)}</tbody></table>`;
}

/** A point of a plot over time: its label (in tooltips) and, when the x axis names it, its tick's lines. */
export interface ChartPoint {
  label: string;
  tick?: readonly string[];
}

const CHART = { left: 52, right: 36, top: 10, tickLine: 13 };
/**
 * Each plot is drawn twice, wide for a screen and narrow for a phone (CSS shows one): an SVG
 * scales as a whole, so a wide one shrunk to a phone's width has unreadable labels.
 */
const CHART_WIDTHS = { wide: 720, narrow: 400 } as const;

/** The plot's frame: its height, where its baseline is, and the axes (y: 0, half and the top; x: the ticks). */
function chartFrame(points: readonly ChartPoint[], width: number, height: number, max: number, x: (i: number) => number, unit: string) {
  const lines = Math.max(1, ...points.map((p) => p.tick?.length ?? 0));
  const total = height + lines * CHART.tickLine + 10;
  const plotH = height - CHART.top;
  const y = (v: number) => CHART.top + plotH - (v / max) * plotH;
  const grid = [max, max / 2].map((v) => html`<line x1="${CHART.left}" y1="${y(v).toFixed(1)}" x2="${width - CHART.right}" y2="${y(v).toFixed(1)}" stroke="#f1f3f5"/><text x="${CHART.left - 6}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end">${formatNumber(v)}${unit}</text>`);
  const ticks = points.map((p, i) => {
    if (!p.tick) return html``;
    const at = x(i).toFixed(1);
    return html`<text x="${at}" y="${height + CHART.tickLine + 2}" text-anchor="middle">${p.tick.map((line, n) => html`<tspan x="${at}" dy="${n === 0 ? 0 : CHART.tickLine}">${line}</tspan>`)}</text>`;
  });
  const axes = html`${grid}<line x1="${CHART.left}" y1="${CHART.top + plotH}" x2="${width - CHART.right}" y2="${CHART.top + plotH}" stroke="#ced4da"/><text x="${CHART.left - 6}" y="${CHART.top + plotH + 4}" text-anchor="end">0</text>${ticks}`;
  return { total, plotH, y, axes };
}

/** The top of a plot's y axis: the next of 1, 2, 2.5, 5 times a power of ten (round labels, at the top and half way). */
function axisTop(max: number): number {
  const power = 10 ** Math.floor(Math.log10(Math.max(max, 1e-9)));
  return ([1, 2, 2.5, 5, 10].find((m) => m * power >= max) ?? 10) * power;
}

/** Both drawings of a plot; `draw` makes one for a width. */
function chartSvgs(label: string, draw: (width: number) => { total: number; body: Html }): Html {
  return html`${(Object.keys(CHART_WIDTHS) as Array<keyof typeof CHART_WIDTHS>).map((kind) => {
    const width = CHART_WIDTHS[kind];
    const { total, body } = draw(width);
    return html`<svg class="chart-${kind}" viewBox="0 0 ${width} ${total}" width="100%" role="img" aria-label="${label}">${body}</svg>`;
  })}`;
}

/** Bar chart (inline SVG): one bar per bucket; values are numbers only. */
export function barChart(points: Array<ChartPoint & { value: number }>, options: { title: string; height?: number; color?: string; unit?: string }): Html {
  const height = options.height ?? 160;
  const max = axisTop(Math.max(1, ...points.map((p) => p.value)));
  const svgs = chartSvgs(options.title, (width) => {
    const bw = points.length > 0 ? (width - CHART.left - CHART.right) / points.length : 0;
    const frame = chartFrame(points, width, height, max, (i) => CHART.left + (i + 0.5) * bw, options.unit ?? "");
    const bars = points.map((p, i) => {
      const h = (p.value / max) * frame.plotH;
      return html`<rect x="${(CHART.left + i * bw + 1).toFixed(1)}" y="${(CHART.top + frame.plotH - h).toFixed(1)}" width="${Math.max(1, bw - 2).toFixed(1)}" height="${h.toFixed(1)}" fill="${options.color ?? "#3b5bdb"}"><title>${p.label}: ${formatNumber(p.value)}${options.unit ?? ""}</title></rect>`;
    });
    return { total: frame.total, body: html`${frame.axes}${bars}` };
  });
  return html`<figure class="card"><figcaption class="muted">${options.title}</figcaption>${svgs}</figure>`;
}

const SERIES_COLORS = ["#3b5bdb", "#e8590c", "#2b8a3e"];

/**
 * Line chart (inline SVG): one polyline per series over the buckets, a point per bucket that has a
 * value (a bucket with no requests has none: the line breaks there). Values are numbers only.
 */
export function lineChart(points: Array<ChartPoint & { values: Array<number | null> }>, options: { title: string; series: string[]; id: string; height?: number; unit?: string }): Html {
  const height = options.height ?? 160;
  const max = axisTop(Math.max(1, ...points.flatMap((p) => p.values.filter((v): v is number => v !== null))));
  const svgs = chartSvgs(options.title, (width) => {
    const step = points.length > 1 ? (width - CHART.left - CHART.right) / (points.length - 1) : 0;
    const x = (i: number) => CHART.left + i * step;
    const frame = chartFrame(points, width, height, max, x, options.unit ?? "");
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
        } else run.push([x(i), frame.y(v)]);
      });
      if (run.length) runs.push(run);
      const dots = points.map((p, i) => {
        const v = p.values[s];
        return v === null || v === undefined ? html`` : html`<circle class="series-${s}" cx="${x(i).toFixed(1)}" cy="${frame.y(v).toFixed(1)}" r="2.5" fill="${color}"><title>${p.label} ${name}: ${formatNumber(v)}${options.unit ?? ""}</title></circle>`;
      });
      return html`${runs.map((r) => html`<polyline fill="none" stroke="${color}" stroke-width="1.5" points="${r.map(([a, b]) => `${a.toFixed(1)},${b.toFixed(1)}`).join(" ")}"/>`)}${dots}`;
    });
    return { total: frame.total, body: html`${frame.axes}${lines}` };
  });
  const legend = options.series.map((name, s) => html`<span class="legend"><span class="swatch s${s}"></span>${name}</span>`);
  return html`<figure class="card" id="${options.id}"><figcaption class="muted">${options.title} ${legend}</figcaption>${svgs}</figure>`;
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

export function formatBytes(n: number): string {
  if (n >= 1 << 30) return `${(n / (1 << 30)).toFixed(1)} GiB`;
  if (n >= 1 << 20) return `${(n / (1 << 20)).toFixed(1)} MiB`;
  if (n >= 1 << 10) return `${(n / (1 << 10)).toFixed(1)} KiB`;
  return `${n} B`;
}

/** A duration in words a person reads at a glance: 45 s, 12 min, 3 h 20 min, 2 d 4 h. */
export function formatDuration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 120) return `${s} s`;
  if (s < 3600) return `${Math.round(s / 60)} min`;
  if (s < 86_400) return `${Math.floor(s / 3600)} h${s % 3600 >= 60 ? ` ${Math.floor((s % 3600) / 60)} min` : ""}`;
  return `${Math.floor(s / 86_400)} d${s % 86_400 >= 3600 ? ` ${Math.floor((s % 86_400) / 3600)} h` : ""}`;
}
