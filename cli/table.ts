// What list commands print for people: aligned columns under a header. Scripts use --json.

/** Rows as aligned columns, two spaces apart, the header first; whitespace inside a cell (a command's newlines) becomes one space. */
export function renderTable(header: readonly string[], rows: ReadonlyArray<ReadonlyArray<string>>): string {
  const cells = [header, ...rows].map((row) => header.map((_, i) => (row[i] ?? "").replace(/\s+/g, " ").trim()));
  const widths = header.map((_, i) => Math.max(...cells.map((row) => [...row[i]!].length)));
  return cells.map((row) => row.map((cell, i) => cell + " ".repeat(widths[i]! - [...cell].length)).join("  ").trimEnd()).join("\n") + "\n";
}

/** `text` cut to `max` characters, an ellipsis marking the cut. */
export function shorten(text: string, max: number): string {
  const chars = [...text];
  return chars.length <= max ? text : chars.slice(0, max - 1).join("") + "…";
}

/** Unix seconds as an ISO time to the second ("-" for none). */
export function formatTime(unixSeconds: number | null | undefined): string {
  return unixSeconds ? new Date(unixSeconds * 1000).toISOString().replace(/\.\d{3}Z$/, "Z") : "-";
}

/** What a command prints: the API's JSON (--json, for scripts), else the text for people. */
export function printResult(json: boolean, value: unknown, human: string): void {
  process.stdout.write(json ? JSON.stringify(value, null, 2) + "\n" : human);
}

/** An object of the API's JSON, as the commands read it. */
type ApiObject = any; // eslint-disable-line @typescript-eslint/no-explicit-any

/** One page of a list as a table, and a hint when the API has more. */
export function pageTable(page: { data: ApiObject[]; has_more?: boolean }, header: readonly string[], row: (item: ApiObject) => string[]): string {
  return renderTable(header, page.data.map(row)) + (page.has_more ? "(more: --limit, or the API's after=)\n" : "");
}
