// Differential test: hoist's GGUF reader against @huggingface/gguf (pinned in package.json) on
// every GGUF file the tests have: the corpus and generated models of every ggml type the
// reference knows, single files and splits. Usage: node gguf_differential.mjs HOIST CORPUS_DIR
import { gguf, GGMLQuantizationType } from "@huggingface/gguf";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [hoist, corpus] = process.argv.slice(2);
let failures = 0;
let checks = 0;
const fail = (file, what) => {
  failures++;
  console.error(`FAIL ${file}: ${what}`);
};

// hoist's JSON with 64-bit integers kept exact: long integer literals become strings first.
function parseExact(text) {
  return JSON.parse(text.replace(/([:\[,]\s*)(-?\d{16,})(?=\s*[,\]}])/g, '$1"$2"'));
}

// The reference decodes strings with TextDecoder, which drops a leading byte-order mark
// (one llama vocabulary has the token U+FEFF); hoist keeps the file's bytes.
function sameValue(a, b) {
  if (typeof a === "string" && typeof b === "string") return a === b || a.replace(/^\uFEFF/, "") === b;
  if (typeof b === "bigint") return BigInt(a) === b;
  if (Array.isArray(b)) return Array.isArray(a) && a.length === b.length && b.every((v, i) => sameValue(a[i], v));
  if (typeof b === "number" && Number.isNaN(b)) return a === null;
  if (typeof b === "number" && typeof a === "string") return Number(a) === b;
  return a === b;
}

// Compares hoist's view of path (one file, or the first split of a set) with the reference's
// view of each of its files.
async function compare(path) {
  const mine = parseExact(execFileSync(hoist, ["inspect", "--json", path], { maxBuffer: 1 << 30 }).toString());
  const refs = [];
  for (const f of mine.files) refs.push(await gguf(f.path, { allowLocalFile: true }));
  checks++;
  const ref = refs[0];
  if (mine.version !== ref.metadata.version) fail(path, `version ${mine.version} vs ${ref.metadata.version}`);
  const refKeys = Object.keys(ref.metadata).filter((k) => !["version", "tensor_count", "kv_count"].includes(k));
  const myKeys = Object.keys(mine.metadata);
  if (myKeys.length !== refKeys.length) fail(path, `${myKeys.length} metadata keys vs ${refKeys.length}`);
  for (const k of refKeys) {
    if (!(k in mine.metadata)) { fail(path, `metadata key ${k} missing`); continue; }
    if (!sameValue(mine.metadata[k].value, ref.metadata[k])) fail(path, `metadata ${k} differs`);
  }
  const expected = refs.flatMap((r, file) => r.tensorInfos.map((t) => ({ ...t, file, base: r.tensorDataOffset })));
  if (mine.tensors.length !== expected.length) {
    fail(path, `${mine.tensors.length} tensors vs ${expected.length}`);
    return;
  }
  expected.forEach((t, i) => {
    const m = mine.tensors[i];
    const dtype = GGMLQuantizationType[t.dtype];
    if (m.name !== t.name) fail(path, `tensor ${i} name ${m.name} vs ${t.name}`);
    if (m.file !== t.file) fail(path, `${t.name} file ${m.file} vs ${t.file}`);
    if (m.dtype !== dtype) fail(path, `${t.name} dtype ${m.dtype} vs ${dtype}`);
    const shape = t.shape.map(String).reverse();
    if (JSON.stringify(m.shape.map(String)) !== JSON.stringify(shape)) fail(path, `${t.name} shape`);
    if (BigInt(m.offset) !== t.base + t.offset) fail(path, `${t.name} offset ${m.offset}`);
  });
}

const files = readdirSync(join(corpus, "gguf")).filter((f) => f.endsWith(".gguf")).map((f) => join(corpus, "gguf", f));
const scratch = mkdtempSync(join(tmpdir(), "hoist-diff-"));
try {
  const types = Object.keys(GGMLQuantizationType).filter((k) => isNaN(Number(k)));
  const sample = (name, args) => {
    execFileSync(hoist, ["make-sample", join(scratch, name), "--size", "2MiB", ...args]);
  };
  // Every ggml type the reference knows, a few per file so each file stays small.
  for (let i = 0; i < types.length; i += 4) {
    const dtypes = types.slice(i, i + 4).join(",");
    try {
      sample(`types-${i}.gguf`, ["--dtypes", dtypes]);
      files.push(join(scratch, `types-${i}.gguf`));
    } catch (e) {
      fail(`types ${dtypes}`, "hoist make-sample failed: " + e.stderr);
    }
  }
  sample("split.gguf", ["--shards", "3"]);
  files.push(join(scratch, "split-00001-of-00003.gguf"));
  for (const f of files) {
    try {
      await compare(f);
    } catch (e) {
      fail(f, String(e));
    }
  }
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
console.log(`${checks} models compared with @huggingface/gguf`);
console.log(failures === 0 ? `${checks} passed, 0 failed` : `0 passed, ${failures} failed`);
process.exit(failures === 0 ? 0 : 1);
