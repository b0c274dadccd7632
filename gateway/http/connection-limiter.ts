import { errors, type DomainError } from "../../modules/errors/mod.js";

/**
 * Counts the requests in progress, per client address and in total. HTTP/1.1 carries one
 * request at a time per connection (uWS closes a connection that pipelines), so this is the
 * number of busy connections; idle keep-alive connections are not counted (uWS closes them
 * after 10 s). A request over either cap is refused before any work: it costs one answer.
 *
 * Behind a proxy every client shares the proxy's address: raise or disable the per-address
 * cap there (0), and let the proxy limit its clients.
 */
export class ConnectionLimiter {
  private total = 0;
  private readonly byAddress = new Map<string, number>();

  constructor(private readonly maxTotal: number, private readonly maxPerAddress: number) {}

  /** Counts a request in, or returns the error to refuse it with (it is then not counted). */
  acquire(address: string): DomainError | undefined {
    if (this.maxTotal > 0 && this.total >= this.maxTotal) return errors.tooManyConnections("server", this.maxTotal);
    const mine = this.byAddress.get(address) ?? 0;
    if (this.maxPerAddress > 0 && mine >= this.maxPerAddress) return errors.tooManyConnections("address", this.maxPerAddress);
    this.total++;
    this.byAddress.set(address, mine + 1);
    return undefined;
  }

  release(address: string): void {
    const mine = this.byAddress.get(address);
    if (mine === undefined) return;
    this.total--;
    if (mine <= 1) this.byAddress.delete(address);
    else this.byAddress.set(address, mine - 1);
  }

  get inProgress(): number {
    return this.total;
  }
}
