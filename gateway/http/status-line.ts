import { STATUS_CODES } from "node:http";

// Every status line the gateway writes (answers, streams, relayed responses, WebSocket refusals)
// comes from here: the code and its standard reason ("303 See Other").

const lines = new Map<number, string>();

/** "<code> <reason>", made once per code (codes come from the gateway or a relayed response, 100-599). */
export function statusLine(status: number): string {
  let line = lines.get(status);
  if (line === undefined) {
    line = `${status} ${STATUS_CODES[status] ?? "Status"}`;
    lines.set(status, line);
  }
  return line;
}
