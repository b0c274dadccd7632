/**
 * FIFO queue with two priority classes: interactive work always goes first, batch work takes
 * whatever is left. Removal of cancelled entries is lazy (O(1) cancel, skipped on dequeue).
 */
export interface Queued {
  readonly cancelled: boolean;
}

export class PriorityFifo<T extends Queued> {
  private readonly lanes: [T[], T[]] = [[], []];
  private readonly heads: [number, number] = [0, 0];

  push(item: T, lane: 0 | 1): void {
    this.lanes[lane].push(item);
  }

  /** Puts an item back at the front of its lane (a preempted choice resumes before newer work). */
  unshift(item: T, lane: 0 | 1): void {
    if (this.heads[lane] > 0) this.lanes[lane][--this.heads[lane]] = item;
    else this.lanes[lane].unshift(item);
  }

  /** Live (not cancelled) items waiting in `lane`. */
  live(lane: 0 | 1): number {
    const items = this.lanes[lane];
    let n = 0;
    for (let i = this.heads[lane]; i < items.length; i++) if (!items[i]!.cancelled) n++;
    return n;
  }

  shift(): T | undefined {
    for (const lane of [0, 1] as const) {
      const items = this.lanes[lane];
      while (this.heads[lane] < items.length) {
        const item = items[this.heads[lane]++]!;
        this.compact(lane);
        if (!item.cancelled) return item;
      }
    }
    return undefined;
  }

  private compact(lane: 0 | 1): void {
    const items = this.lanes[lane];
    if (this.heads[lane] === items.length) {
      items.length = 0;
      this.heads[lane] = 0;
    } else if (this.heads[lane] > 1024 && this.heads[lane] * 2 > items.length) {
      items.splice(0, this.heads[lane]);
      this.heads[lane] = 0;
    }
  }
}
