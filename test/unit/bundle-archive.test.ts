import t from "tap";
import { execFileSync } from "node:child_process";
import { linkSync, mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { BoundedTar, BundleRefused, type BundleBounds } from "../../modules/apps/bundle-archive.js";

// A bundle's tar stream is read header by header on its way to tar: it passes unchanged, and at
// the first entry that would take the files past a bound (bytes, count) nothing more passes, so
// tar never writes a byte of it. What it cannot read as tar would is refused.

const MiB = 1024 * 1024;
const roomy: BundleBounds = { maxBytes: 64 * MiB, maxEntries: 1000 };

/** Streams `archive` through a BoundedTar in odd-sized pieces: what came out, and how it ended. */
async function through(archive: Buffer, bounds: BundleBounds) {
  const out: Buffer[] = [];
  const bounded = new BoundedTar(bounds);
  const pieces = (function* () {
    for (let at = 0; at < archive.length; at += 777) yield archive.subarray(at, at + 777);
  })();
  const error = await pipeline(Readable.from(pieces), bounded, new Writable({ write: (c, _e, done) => (out.push(c), done()) })).then(
    () => undefined,
    (err: Error) => err,
  );
  return { out: Buffer.concat(out), error, entries: bounded.entries, bytes: bounded.bytes };
}

/** A tar archive (GNU tar) of `dir`'s `names`, in that order. */
const tarOf = (dir: string, names: string[], format = "gnu") => execFileSync("tar", ["-cf", "-", `--format=${format}`, "-C", dir, "--no-recursion", ...names], { maxBuffer: 256 * MiB });

/** A header block as tar writes it (ustar), its checksum computed. */
function header(name: string, size: number, type: string): Buffer {
  const block = Buffer.alloc(512);
  block.write(name, 0, 100, "utf8");
  block.write("0000644\0", 100);
  block.write("0000000\0", 108);
  block.write("0000000\0", 116);
  block.write(size.toString(8).padStart(11, "0") + "\0", 124);
  block.write("00000000000\0", 136);
  block.write(type, 156);
  block.write("ustar\u000000", 257, "latin1");
  block.fill(0x20, 148, 156);
  let sum = 0;
  for (const b of block) sum += b;
  block.write(sum.toString(8).padStart(6, "0") + "\0 ", 148, "latin1");
  return block;
}
const padded = (data: Buffer) => Buffer.concat([data, Buffer.alloc((512 - (data.length % 512)) % 512)]);
const END = Buffer.alloc(1024);

t.test("a bundle within its bounds passes unchanged, up to its end; files, directories and links counted", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "bundle-"));
  const deep = join("app", "a".repeat(90), "b".repeat(90));
  mkdirSync(join(dir, deep), { recursive: true });
  writeFileSync(join(dir, deep, "module_with_a_long_name.py"), "x = 1\n".repeat(500));
  writeFileSync(join(dir, "app", "main.py"), "print('hi')\n");
  symlinkSync("main.py", join(dir, "app", "link.py"));
  linkSync(join(dir, "app", "main.py"), join(dir, "app", "hard.py"));
  const names = ["app", join("app", "a".repeat(90)), deep, join(deep, "module_with_a_long_name.py"), "app/main.py", "app/link.py", "app/hard.py"];
  for (const format of ["gnu", "posix"]) {
    const archive = tarOf(dir, names, format);
    const { out, error, entries, bytes } = await through(archive, roomy);
    t.equal(error, undefined, `${format}: passes`);
    t.equal(entries, 7, `${format}: 3 directories, 2 files, a symlink, a hard link`);
    t.equal(bytes, 3000 + 12, `${format}: the files' bytes`);
    t.ok(out.equals(archive.subarray(0, out.length)), `${format}: unchanged`);
    t.ok(out.subarray(-1024).equals(END), `${format}: ends with the end-of-archive blocks`);
  }
});

t.test("bytes: refused at the first file that would cross the bound, before its header passes", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "bundle-"));
  for (const name of ["one.bin", "two.bin", "three.bin"]) writeFileSync(join(dir, name), Buffer.alloc(3 * MiB, 7));
  const archive = tarOf(dir, ["one.bin", "two.bin", "three.bin"]);
  const over = await through(archive, { maxBytes: 8 * MiB, maxEntries: 100 });
  t.ok(over.error instanceof BundleRefused);
  t.match(over.error, { reason: "bundle_too_large", message: "the bundle unpacks to more than 8 MiB (TRIBUTARY_APP_BUNDLE_MAX_BYTES): refused at three.bin" });
  t.equal(over.out.length, 2 * (512 + 3 * MiB), "two whole files passed, nothing of the third");
  t.equal(over.bytes, 6 * MiB);
  const exact = await through(archive, { maxBytes: 9 * MiB, maxEntries: 100 });
  t.equal(exact.error, undefined, "exactly at the bound passes");
  t.equal(exact.bytes, 9 * MiB);
});

t.test("files: refused at the first entry past the bound", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "bundle-"));
  const names = Array.from({ length: 101 }, (_, i) => `f${i}`);
  for (const name of names) writeFileSync(join(dir, name), "");
  const over = await through(tarOf(dir, names), { maxBytes: MiB, maxEntries: 100 });
  t.match(over.error, { reason: "bundle_too_large", message: "the bundle holds more than 100 files, directories and links (TRIBUTARY_APP_BUNDLE_MAX_FILES): refused at f100" });
  t.equal(over.out.length, 100 * 512, "a hundred headers passed, not the 101st");
  t.equal((await through(tarOf(dir, names.slice(0, 100)), { maxBytes: MiB, maxEntries: 100 })).error, undefined, "exactly at the bound passes");
});

t.test("a pax header's size is the entry's size, as tar reads it", async (t) => {
  const pax = Buffer.from("13 size=1000\n");
  const archive = Buffer.concat([header("PaxHeaders/big", pax.length, "x"), padded(pax), header("big", 0, "0"), padded(Buffer.alloc(1000, 1)), header("after", 5, "0"), padded(Buffer.from("hello")), END]);
  const { error, entries, bytes } = await through(archive, roomy);
  t.equal(error, undefined);
  t.equal(bytes, 1005, "1000 bytes by the pax header, then 5");
  t.equal(entries, 2, "the entry after it read where tar reads it");
  t.match((await through(archive, { maxBytes: 999, maxEntries: 10 })).error, { reason: "bundle_too_large", message: /refused at big$/ });
});

t.test("what tar would read otherwise is refused", async (t) => {
  const file = Buffer.concat([header("a.py", 3, "0"), padded(Buffer.from("x=1"))]);
  const broken = Buffer.from(file);
  broken[0] = 0x62; // the name changed, the checksum not
  t.match((await through(Buffer.concat([broken, END]), roomy)).error, { reason: "bundle_invalid", message: /checksum/ });
  t.match((await through(Buffer.concat([header("fifo", 0, "6"), END]), roomy)).error, { reason: "bundle_invalid", message: "the bundle holds fifo, an entry of tar type '6' (bundles hold files, directories and links)" });
  t.match((await through(Buffer.concat([header("sparse", 512, "S"), Buffer.alloc(512), END]), roomy)).error, { reason: "bundle_invalid" });
  t.match((await through(Buffer.concat([header("link", 512, "2"), Buffer.alloc(512), file, END]), roomy)).error, { reason: "bundle_invalid", message: /link or directory with data/ }, "a link with data");
  t.match((await through(Buffer.concat([header("dir/", 512, "0"), Buffer.alloc(512), END]), roomy)).error, { reason: "bundle_invalid" }, "an old-style directory with data");
  t.match((await through(Buffer.concat([header("././@LongLink", 1024 * 1024, "L"), END]), roomy)).error, { reason: "bundle_invalid", message: /long name or pax header of 1048576 bytes/ });
  const sparsePax = Buffer.from("22 GNU.sparse.major=1\n");
  t.match((await through(Buffer.concat([header("p", sparsePax.length, "x"), padded(sparsePax), file, END]), roomy)).error, { message: /sparse/ });
});

t.test("after the end of the archive nothing passes; much more after it is refused", async (t) => {
  const file = Buffer.concat([header("a.py", 3, "0"), padded(Buffer.from("x=1"))]);
  const smuggled = await through(Buffer.concat([file, END, file]), roomy);
  t.equal(smuggled.error, undefined);
  t.equal(smuggled.entries, 1, "an entry after the end is not read");
  t.ok(smuggled.out.equals(Buffer.concat([file, END])), "nor passed to tar");
  t.match((await through(Buffer.concat([file, END, Buffer.alloc(2 * MiB)]), roomy)).error, { reason: "bundle_invalid", message: /after the end/ });
});
