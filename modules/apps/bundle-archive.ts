import { Transform, type TransformCallback } from "node:stream";

// A bundle's tar stream, read as it passes to the tar that unpacks it (behind the sandbox walls):
// every header is checked and counted before tar sees it, so a bundle over its bounds is refused
// at the first entry that would cross one, before tar writes a byte of that entry. Without this
// only the per-file size limit of the unpacking tar held: a 2 MB archive of a 2 GiB file cost a
// gigabyte of the host's disk before it was refused, and nothing bounded the file count.
//
// What passes is what tar reads, so this reading must agree with tar's: anything it cannot read
// the way tar would (a bad checksum, a type of entry bundles have no use for, data on a link) is
// refused rather than guessed at.

const BLOCK = 512;
/** Longest GNU long name or pax header accepted (a path is at most 4 KiB; tar holds these in memory). */
const MAX_META_BYTES = 64 * 1024;
/** Bytes after the end-of-archive blocks (tar pads its output to 10 KiB records): more is not a bundle. */
const MAX_TRAILING_BYTES = 1024 * 1024;

export interface BundleBounds {
  /** Bytes the bundle's files may hold together once unpacked. */
  maxBytes: number;
  /** Files, directories and links together. */
  maxEntries: number;
}

/** Why a bundle is refused: over a bound (bundle_too_large), or not an archive tar would read as we do (bundle_invalid). */
export class BundleRefused extends Error {
  constructor(
    readonly reason: "bundle_too_large" | "bundle_invalid",
    message: string,
  ) {
    super(message);
  }
}

const mib = (bytes: number) => `${Math.round((bytes / 1024 / 1024) * 10) / 10} MiB`;
const shownName = (name: string) => (name.length > 200 ? `${name.slice(0, 200)}…` : name);

/** A header's numeric field: octal digits (NUL or space ended), or GNU's base-256 for large values. */
function numberField(block: Buffer, start: number, length: number): number | undefined {
  if (block[start]! & 0x80) {
    if (block[start] === 0xff) return undefined; // negative
    let n = block[start]! & 0x7f;
    for (let i = start + 1; i < start + length; i++) n = n * 256 + block[i]!;
    return Number.isSafeInteger(n) ? n : undefined;
  }
  const text = block.toString("latin1", start, start + length).replace(/[\0 ]+$/, "").replace(/^ +/, "");
  if (!/^[0-7]*$/.test(text)) return undefined;
  return text === "" ? 0 : parseInt(text, 8);
}

/** Whether the header's checksum holds (the unsigned sum tar writes, or the signed one old tars wrote). */
function checksumHolds(block: Buffer): boolean {
  const stored = numberField(block, 148, 8);
  let unsigned = 0;
  let signed = 0;
  for (let i = 0; i < BLOCK; i++) {
    const b = i >= 148 && i < 156 ? 0x20 : block[i]!;
    unsigned += b;
    signed += b > 127 ? b - 256 : b;
  }
  return stored === unsigned || stored === signed;
}

const cString = (block: Buffer, start: number, length: number) => {
  const end = block.indexOf(0, start);
  return block.toString("utf8", start, end < 0 || end > start + length ? start + length : end);
};

/** The records of a pax extended header ("%d %s=%s\n", the length counting the whole record). */
function paxRecords(data: Buffer): Map<string, string> | undefined {
  const records = new Map<string, string>();
  let at = 0;
  while (at < data.length) {
    if (data[at] === 0) break; // padding
    const space = data.indexOf(0x20, at);
    const length = space < 0 ? NaN : Number(data.toString("latin1", at, space));
    if (!Number.isSafeInteger(length) || length <= space - at || at + length > data.length || data[at + length - 1] !== 0x0a) return undefined;
    const record = data.toString("utf8", space + 1, at + length - 1);
    const eq = record.indexOf("=");
    if (eq < 0) return undefined;
    records.set(record.slice(0, eq), record.slice(eq + 1));
    at += length;
  }
  return records;
}

/**
 * Passes a (decompressed) tar stream through unchanged, reading its headers: it fails with
 * BundleRefused at the first header that would take the files past `maxEntries` or their bytes
 * past `maxBytes` (that header is not passed on), or that it cannot read as tar would. After the
 * end-of-archive block it passes nothing more.
 */
export class BoundedTar extends Transform {
  /** Files, directories and links so far. */
  entries = 0;
  /** Bytes of regular files so far (what lands on disk, holes aside). */
  bytes = 0;
  private readonly header = Buffer.alloc(BLOCK);
  private headerFill = 0;
  /** Bytes of the current entry's data and padding still to pass. */
  private skip = 0;
  /** A GNU long name or pax header being read (its data is needed to read the next header). */
  private meta: { type: string; left: number; chunks: Buffer[] } | undefined;
  /** What the metadata before the next header says of it. */
  private next: { size?: number; name?: string } = {};
  private ended = false;
  private trailing = 0;

  constructor(private readonly bounds: BundleBounds) {
    super();
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    try {
      this.scan(chunk);
      done();
    } catch (err) {
      done(err as Error);
    }
  }

  private scan(chunk: Buffer): void {
    let at = 0;
    while (at < chunk.length) {
      if (this.ended) {
        this.trailing += chunk.length - at;
        if (this.trailing > MAX_TRAILING_BYTES) throw new BundleRefused("bundle_invalid", "the bundle holds more than 1 MiB after the end of its tar archive");
        return;
      }
      if (this.skip > 0) {
        const n = Math.min(this.skip, chunk.length - at);
        const piece = chunk.subarray(at, at + n);
        if (this.meta && this.meta.left > 0) {
          const data = piece.subarray(0, Math.min(piece.length, this.meta.left));
          this.meta.chunks.push(Buffer.from(data));
          this.meta.left -= data.length;
        }
        this.push(piece);
        at += n;
        this.skip -= n;
        if (this.skip === 0 && this.meta) this.metaRead();
        continue;
      }
      const n = Math.min(BLOCK - this.headerFill, chunk.length - at);
      chunk.copy(this.header, this.headerFill, at, at + n);
      this.headerFill += n;
      at += n;
      if (this.headerFill < BLOCK) return;
      this.headerFill = 0;
      this.onHeader(Buffer.from(this.header));
    }
  }

  private onHeader(block: Buffer): void {
    if (block.every((b) => b === 0)) {
      // The end of the archive: tar stops reading here, so nothing after it is passed on.
      this.push(block);
      this.push(Buffer.alloc(BLOCK));
      this.ended = true;
      return;
    }
    if (!checksumHolds(block)) throw new BundleRefused("bundle_invalid", "the bundle is not a valid tar archive (a header's checksum does not hold)");
    const type = String.fromCharCode(block[156]!);
    const headerSize = numberField(block, 124, 12);
    if (headerSize === undefined) throw new BundleRefused("bundle_invalid", "the bundle is not a valid tar archive (a header's size does not read)");
    const ustar = block.toString("latin1", 257, 262) === "ustar" && block[262] === 0;
    const name = this.next.name ?? (ustar && block[345] !== 0 ? `${cString(block, 345, 155)}/${cString(block, 0, 100)}` : cString(block, 0, 100));

    if (type === "x" || type === "g" || type === "L" || type === "K") {
      if (headerSize > MAX_META_BYTES) throw new BundleRefused("bundle_invalid", `the bundle holds a long name or pax header of ${headerSize} bytes (at most ${MAX_META_BYTES})`);
      this.meta = { type, left: headerSize, chunks: [] };
      this.pass(block, headerSize);
      if (headerSize === 0) this.metaRead();
      return;
    }

    const size = this.next.size ?? headerSize;
    this.next = {};
    if (type === "0" || type === "\0" || type === "7") {
      // Old tars mark a directory as a file whose name ends in "/": as a directory, no data.
      if (name.endsWith("/") && size !== 0) throw new BundleRefused("bundle_invalid", `the bundle's ${shownName(name)} is a link or directory with data`);
      this.count(name);
      if (this.bytes + size > this.bounds.maxBytes)
        throw new BundleRefused("bundle_too_large", `the bundle unpacks to more than ${mib(this.bounds.maxBytes)} (TRIBUTARY_APP_BUNDLE_MAX_BYTES): refused at ${shownName(name)}`);
      this.bytes += size;
      this.pass(block, size);
      return;
    }
    if (type === "1" || type === "2" || type === "5") {
      // Links and directories carry no data: tar would read none either way, so none may follow.
      if (size !== 0) throw new BundleRefused("bundle_invalid", `the bundle's ${shownName(name)} is a link or directory with data`);
      this.count(name);
      this.pass(block, 0);
      return;
    }
    throw new BundleRefused("bundle_invalid", `the bundle holds ${shownName(name)}, an entry of tar type '${type.replace(/\0/, "\\0")}' (bundles hold files, directories and links)`);
  }

  private count(name: string): void {
    if (this.entries + 1 > this.bounds.maxEntries)
      throw new BundleRefused("bundle_too_large", `the bundle holds more than ${this.bounds.maxEntries} files, directories and links (TRIBUTARY_APP_BUNDLE_MAX_FILES): refused at ${shownName(name)}`);
    this.entries++;
  }

  /** Passes a header on, and then its data and padding. */
  private pass(block: Buffer, size: number): void {
    this.push(block);
    this.skip = Math.ceil(size / BLOCK) * BLOCK;
  }

  private metaRead(): void {
    const { type, chunks } = this.meta!;
    this.meta = undefined;
    const data = Buffer.concat(chunks);
    if (type === "L") {
      this.next.name = cString(data, 0, data.length);
      return;
    }
    if (type === "K") return;
    const records = paxRecords(data);
    if (!records) throw new BundleRefused("bundle_invalid", "the bundle is not a valid tar archive (a pax header does not read)");
    for (const key of records.keys()) if (key.startsWith("GNU.sparse.")) throw new BundleRefused("bundle_invalid", "the bundle holds a sparse file (bundles hold files, directories and links)");
    const size = records.get("size");
    if (size !== undefined && type === "g") throw new BundleRefused("bundle_invalid", "the bundle's global pax header sets a size");
    if (type === "x") {
      if (size !== undefined) {
        if (!/^\d+$/.test(size) || !Number.isSafeInteger(Number(size))) throw new BundleRefused("bundle_invalid", "the bundle is not a valid tar archive (a pax size does not read)");
        this.next.size = Number(size);
      }
      const path = records.get("path");
      if (path !== undefined) this.next.name = path;
    }
  }
}
