import type { HttpExchange } from "./exchange.js";

/**
 * Sends a 200 whose body comes from `chunks`, honouring uWS backpressure: when the socket is
 * behind, the next chunk is not even read until it drained, so a slow client slows the source
 * (a JetStream read) instead of filling memory. A source failure after the headers went out
 * drops the connection, so the client sees a truncated transfer rather than a short file.
 */
export async function streamBody(ex: HttpExchange, contentType: string, chunks: AsyncIterable<Uint8Array>): Promise<void> {
  let started = false;
  let waiting: (() => void) | undefined;
  const wake = () => {
    const w = waiting;
    waiting = undefined;
    w?.();
  };
  ex.onAbort(wake);
  try {
    for await (const chunk of chunks) {
      if (!ex.live) return;
      let ok: boolean;
      if (!started) {
        ok = ex.beginStream(contentType, chunk);
        ex.onWritable(() => {
          wake();
          return true;
        });
        started = true;
      } else ok = ex.write(chunk);
      if (!ok && ex.live) await new Promise<void>((resolve) => (waiting = resolve));
    }
  } catch (err) {
    if (!started) throw err;
    ex.close();
    return;
  }
  if (!started) ex.send(200, "", contentType);
  else ex.endStream("");
}
