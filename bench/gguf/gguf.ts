import { closeSync, openSync, readSync, writeSync } from "node:fs";

// A small GGUF (v3) reader and writer: enough to copy a model's metadata and write a model
// with generated tensor data. Format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
// (header, key/value metadata, tensor infos, padding to `general.alignment`, tensor data).

export const GGUF_MAGIC = 0x46554747; // "GGUF" read as a little-endian u32
export const GGUF_VERSION = 3;
export const DEFAULT_ALIGNMENT = 32;

export enum ValueType {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
}

/** ggml tensor types this writer produces (the numbers are ggml's). */
export enum TensorType {
  F32 = 0,
  F16 = 1,
  Q8_0 = 8,
}

/** Elements per block and bytes per block of each tensor type. */
export const TENSOR_LAYOUT: Record<TensorType, { block: number; bytes: number }> = {
  [TensorType.F32]: { block: 1, bytes: 4 },
  [TensorType.F16]: { block: 1, bytes: 2 },
  [TensorType.Q8_0]: { block: 32, bytes: 34 }, // an f16 scale and 32 int8 values
};

export type Scalar = number | bigint | boolean | string;
/** A metadata value with its GGUF type, so that reading and writing it again is exact. */
export type Value =
  | { type: Exclude<ValueType, ValueType.ARRAY>; value: Scalar }
  | { type: ValueType.ARRAY; itemType: Exclude<ValueType, ValueType.ARRAY>; items: Scalar[] };

export interface TensorInfo {
  name: string;
  /** ggml order: dims[0] is the innermost (contiguous) dimension. */
  dims: bigint[];
  type: number;
  /** Offset from the start of the tensor data section. */
  offset: bigint;
}

export interface GgufHeader {
  version: number;
  metadata: Map<string, Value>;
  tensors: TensorInfo[];
  /** Where the tensor data section begins in the file. */
  dataOffset: number;
}

// Bounds for reading files of unknown origin: a corrupt count must not allocate the machine away.
const MAX_STRING_BYTES = 1 << 20;
const MAX_COUNT = 1 << 24;

/** Reads through a file with a buffered window, growing it on demand. */
class FileCursor {
  private buffer = Buffer.alloc(1 << 20);
  private start = 0; // file offset of buffer[0]
  private end = 0; // file offset just past the valid bytes
  position = 0;

  constructor(private readonly fd: number) {}

  private ensure(n: number): void {
    if (this.position + n <= this.end) return;
    if (n > this.buffer.length) this.buffer = Buffer.alloc(n * 2);
    this.start = this.position;
    const read = readSync(this.fd, this.buffer, 0, this.buffer.length, this.start);
    this.end = this.start + read;
    if (this.position + n > this.end) throw new Error(`GGUF: unexpected end of file at byte ${this.position}`);
  }

  private view(n: number): number {
    this.ensure(n);
    const at = this.position - this.start;
    this.position += n;
    return at;
  }

  u8(): number { return this.buffer.readUInt8(this.view(1)); }
  i8(): number { return this.buffer.readInt8(this.view(1)); }
  u16(): number { return this.buffer.readUInt16LE(this.view(2)); }
  i16(): number { return this.buffer.readInt16LE(this.view(2)); }
  u32(): number { return this.buffer.readUInt32LE(this.view(4)); }
  i32(): number { return this.buffer.readInt32LE(this.view(4)); }
  f32(): number { return this.buffer.readFloatLE(this.view(4)); }
  f64(): number { return this.buffer.readDoubleLE(this.view(8)); }
  u64(): bigint { return this.buffer.readBigUInt64LE(this.view(8)); }
  i64(): bigint { return this.buffer.readBigInt64LE(this.view(8)); }

  count(what: string): number {
    const n = this.u64();
    if (n > BigInt(MAX_COUNT)) throw new Error(`GGUF: ${what} count ${n} is out of range`);
    return Number(n);
  }

  string(): string {
    const n = this.count("string length");
    if (n > MAX_STRING_BYTES) throw new Error(`GGUF: a string of ${n} bytes is out of range`);
    const at = this.view(n);
    return this.buffer.toString("utf8", at, at + n);
  }
}

function readScalar(c: FileCursor, type: ValueType): Scalar {
  switch (type) {
    case ValueType.U8: return c.u8();
    case ValueType.I8: return c.i8();
    case ValueType.U16: return c.u16();
    case ValueType.I16: return c.i16();
    case ValueType.U32: return c.u32();
    case ValueType.I32: return c.i32();
    case ValueType.F32: return c.f32();
    case ValueType.BOOL: return c.u8() !== 0;
    case ValueType.STRING: return c.string();
    case ValueType.U64: return c.u64();
    case ValueType.I64: return c.i64();
    case ValueType.F64: return c.f64();
    default: throw new Error(`GGUF: unknown value type ${type}`);
  }
}

/** Reads a GGUF file's header, metadata and tensor infos (not the tensor data). */
export function readGgufHeader(path: string): GgufHeader {
  const fd = openSync(path, "r");
  try {
    const c = new FileCursor(fd);
    if (c.u32() !== GGUF_MAGIC) throw new Error(`GGUF: ${path} is not a GGUF file`);
    const version = c.u32();
    if (version !== 2 && version !== 3) throw new Error(`GGUF: version ${version} is not supported`);
    const tensorCount = c.count("tensor");
    const kvCount = c.count("metadata");
    const metadata = new Map<string, Value>();
    for (let i = 0; i < kvCount; i++) {
      const key = c.string();
      const type = c.u32() as ValueType;
      if (type === ValueType.ARRAY) {
        const itemType = c.u32() as Exclude<ValueType, ValueType.ARRAY>;
        if (itemType === (ValueType.ARRAY as number)) throw new Error(`GGUF: nested arrays (${key}) are not supported`);
        const n = c.count("array item");
        const items: Scalar[] = new Array(n);
        for (let j = 0; j < n; j++) items[j] = readScalar(c, itemType);
        metadata.set(key, { type, itemType, items });
      } else {
        metadata.set(key, { type, value: readScalar(c, type) } as Value);
      }
    }
    const tensors: TensorInfo[] = [];
    for (let i = 0; i < tensorCount; i++) {
      const name = c.string();
      const nDims = c.u32();
      if (nDims > 4) throw new Error(`GGUF: tensor ${name} has ${nDims} dimensions`);
      const dims = Array.from({ length: nDims }, () => c.u64());
      tensors.push({ name, dims, type: c.u32(), offset: c.u64() });
    }
    const alignment = Number(scalarOf(metadata, "general.alignment") ?? DEFAULT_ALIGNMENT);
    return { version, metadata, tensors, dataOffset: alignUp(c.position, alignment) };
  } finally {
    closeSync(fd);
  }
}

/** A metadata value as a plain scalar, or undefined when missing or an array. */
export function scalarOf(metadata: Map<string, Value>, key: string): Scalar | undefined {
  const v = metadata.get(key);
  return v && v.type !== ValueType.ARRAY ? v.value : undefined;
}

export function alignUp(n: number, alignment: number): number {
  return Math.ceil(n / alignment) * alignment;
}

/** Bytes of a tensor's data. */
export function tensorBytes(dims: readonly bigint[], type: TensorType): number {
  const { block, bytes } = TENSOR_LAYOUT[type];
  const elements = dims.reduce((a, b) => a * b, 1n);
  if (elements % BigInt(block) !== 0n) throw new Error(`GGUF: ${elements} elements do not fill whole blocks of ${block}`);
  return Number((elements / BigInt(block)) * BigInt(bytes));
}

/** Serialises into a growing buffer. */
class Out {
  private buffer = Buffer.alloc(1 << 16);
  length = 0;

  private room(n: number): number {
    if (this.length + n > this.buffer.length) {
      const bigger = Buffer.alloc(Math.max(this.buffer.length * 2, this.length + n));
      this.buffer.copy(bigger, 0, 0, this.length);
      this.buffer = bigger;
    }
    const at = this.length;
    this.length += n;
    return at;
  }

  // Each write reserves its room first: room() may replace the buffer, so `this.buffer` is read after it.
  u32(v: number): void { const at = this.room(4); this.buffer.writeUInt32LE(v, at); }
  u64(v: bigint | number): void { const at = this.room(8); this.buffer.writeBigUInt64LE(BigInt(v), at); }
  string(s: string): void {
    const bytes = Buffer.from(s, "utf8");
    this.u64(bytes.length);
    const at = this.room(bytes.length);
    bytes.copy(this.buffer, at);
  }
  scalar(type: ValueType, v: Scalar): void {
    switch (type) {
      case ValueType.U8: { const at = this.room(1); this.buffer.writeUInt8(Number(v), at); break; }
      case ValueType.I8: { const at = this.room(1); this.buffer.writeInt8(Number(v), at); break; }
      case ValueType.U16: { const at = this.room(2); this.buffer.writeUInt16LE(Number(v), at); break; }
      case ValueType.I16: { const at = this.room(2); this.buffer.writeInt16LE(Number(v), at); break; }
      case ValueType.U32: this.u32(Number(v)); break;
      case ValueType.I32: { const at = this.room(4); this.buffer.writeInt32LE(Number(v), at); break; }
      case ValueType.F32: { const at = this.room(4); this.buffer.writeFloatLE(Number(v), at); break; }
      case ValueType.BOOL: { const at = this.room(1); this.buffer.writeUInt8(v ? 1 : 0, at); break; }
      case ValueType.STRING: this.string(String(v)); break;
      case ValueType.U64: this.u64(BigInt(v)); break;
      case ValueType.I64: { const at = this.room(8); this.buffer.writeBigInt64LE(BigInt(v), at); break; }
      case ValueType.F64: { const at = this.room(8); this.buffer.writeDoubleLE(Number(v), at); break; }
      default: throw new Error(`GGUF: unknown value type ${type}`);
    }
  }
  pad(alignment: number): void {
    this.room(alignUp(this.length, alignment) - this.length);
  }
  bytes(): Buffer {
    return this.buffer.subarray(0, this.length);
  }
}

export interface TensorToWrite {
  name: string;
  dims: bigint[];
  type: TensorType;
  /** Fills `chunk` with the tensor's bytes from byte `at` of its data (called in order; chunks hold whole blocks). */
  fill: (chunk: Buffer, at: number) => void;
}

const CHUNK_BYTES = 4 << 20;

/** Writes a GGUF v3 file: metadata, then each tensor's data produced by its `fill` in chunks. */
export function writeGguf(path: string, metadata: Map<string, Value>, tensors: readonly TensorToWrite[]): void {
  const alignment = Number(scalarOf(metadata, "general.alignment") ?? DEFAULT_ALIGNMENT);
  const out = new Out();
  out.u32(GGUF_MAGIC);
  out.u32(GGUF_VERSION);
  out.u64(tensors.length);
  out.u64(metadata.size);
  for (const [key, v] of metadata) {
    out.string(key);
    out.u32(v.type);
    if (v.type === ValueType.ARRAY) {
      out.u32(v.itemType);
      out.u64(v.items.length);
      for (const item of v.items) out.scalar(v.itemType, item);
    } else {
      out.scalar(v.type, v.value);
    }
  }
  const sizes = tensors.map((t) => tensorBytes(t.dims, t.type));
  let offset = 0;
  tensors.forEach((t, i) => {
    out.string(t.name);
    out.u32(t.dims.length);
    for (const d of t.dims) out.u64(d);
    out.u32(t.type);
    out.u64(offset);
    offset = alignUp(offset + sizes[i]!, alignment);
  });
  out.pad(alignment);

  const fd = openSync(path, "w");
  try {
    writeSync(fd, out.bytes());
    const chunk = Buffer.alloc(CHUNK_BYTES);
    tensors.forEach((t, i) => {
      const size = sizes[i]!;
      const step = CHUNK_BYTES - (CHUNK_BYTES % TENSOR_LAYOUT[t.type].bytes);
      for (let at = 0; at < size; at += step) {
        const piece = chunk.subarray(0, Math.min(step, size - at));
        t.fill(piece, at);
        writeSync(fd, piece);
      }
      const padding = alignUp(size, alignment) - size;
      if (padding > 0) writeSync(fd, Buffer.alloc(padding));
    });
  } finally {
    closeSync(fd);
  }
}
