// Writes tests/fixtures/tokenize_stories260k.json: test strings and llama.cpp's token ids for them.
//
// The ids come from llama.cpp through node-llama-cpp (the reference peer): model.tokenize(text, false) is
// common_tokenize(vocab, text, add_special=false, parse_special=false), so they carry no BOS; the
// `special` cases use model.tokenize(text, true) (parse_special=true, still no BOS).
// ES modules resolve packages next to the script, so run a copy placed beside the peer:
//   cp tools/make_tokenizer_fixture.mjs "$KVIK_PEER_DIR/" && \
//   node "$KVIK_PEER_DIR/make_tokenizer_fixture.mjs" models/stories260K.gguf SEEDS_DIR \
//        tests/fixtures/tokenize_stories260k.json
// ($KVIK_PEER_DIR: the llama.cpp peer, tools/peer_lib.sh. SEEDS_DIR: a folder of .txt documents; the committed
// fixture was made from a Swedish course and a Hungarian book chapter on LLM inference, which are not part of the
// repository: the strings picked from them are stored in the fixture, so the test needs no seeds.)
import {getLlama} from "node-llama-cpp";
import fs from "node:fs";
import path from "node:path";

const [modelPath, seedsDir, outPath] = process.argv.slice(2);
if (!modelPath || !seedsDir || !outPath) {
  console.error("usage: node make_tokenizer_fixture.mjs MODEL.gguf SEEDS_DIR OUT.json");
  process.exit(2);
}

// Real lines from the seed documents, chosen deterministically: every k-th non-empty line of each file
// (Swedish course, Hungarian chapter), the longest lines, and the ASCII-only lines (English code and tables).
function seedLines() {
  const picked = [];
  const files = fs.readdirSync(seedsDir).filter(f => f.endsWith(".txt")).sort();
  for (const f of files) {
    const lines = fs.readFileSync(path.join(seedsDir, f), "utf8").split("\n").filter(l => l.trim() !== "");
    const step = Math.max(1, Math.floor(lines.length / 70));
    for (let i = 0; i < lines.length; i += step) picked.push(lines[i]);
    const longest = [...lines].sort((a, b) => b.length - a.length).slice(0, 4);
    picked.push(...longest);
    const ascii = lines.filter(l => /^[\x00-\x7f]*$/.test(l));
    const astep = Math.max(1, Math.floor(ascii.length / 15));
    for (let i = 0; i < ascii.length; i += astep) picked.push(ascii[i]);
    // Lines with quotes and punctuation.
    picked.push(...lines.filter(l => /["'„”«»()\[\]]/.test(l)).slice(0, 8));
  }
  return picked;
}

const handmade = [
  // English
  "Hello world", "Once upon a time, there was a little girl named Lily.", "The cat sat on the mat.",
  "She said, \"I don't know!\"", "It's a dog's life, isn't it?", "What's up? We'll see; they're here.",
  "HELLO WORLD", "hello", "Hello", " Hello", "Hello ", "a", "I", "the end.",
  // Swedish / Hungarian words with diacritics
  "Från prompt till token", "åäö ÅÄÖ", "Årets kräftskiva blev lyckad.", "Olcsóbb inferencia", "őű ŐŰ éáí",
  "Árvíztűrő tükörfúrógép", "flygande bäckasiner söka hwila på mjuka tuvor",
  // digits and numbers
  "0", "7", "42", "123", "2024", "3.14159", "1,000,000", "-17", "+1 555 0100", "1e-5", "0x1F", "2024-01-15",
  "12:30:45", "50%", "$9.99", "100 000 kr", "v1.2.3", "1/2 + 3/4 = 5/4", "9999999999",
  // punctuation
  ".", ",", "!", "?", "...", "!?", "\"", "'", "\"quoted\"", "'single'", "(parens)", "[brackets]", "{braces}",
  "<angle>", "a-b_c", "foo@bar.com", "https://example.com/path?q=1&r=2#frag", "#include <vector>", "x = y * 2;",
  "— – -", "«guillemets»", "„citat”", "“curly” ‘quotes’", "…", "©®™", "§ ¶ † ‡", "~`^|\\",
  // emoji (4-byte UTF-8) and other scripts
  "😀", "😀😀", "Hello 😀 world", "👍🏽", "👨‍👩‍👧", "🇸🇪🇭🇺", "🦙 llama", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𐍈",
  "你好，世界", "日本語のテキスト", "中文字符", "한국어", "Привет, мир", "Γειά σου", "مرحبا", "שלום", "हिन्दी",
  "e\u0301", "\u00e9", "ZWJ\u200dinside", "\ufeffBOM", "\u00a0nbsp\u00a0", "▁", "a▁b", "▁▁",
  // whitespace runs
  "", " ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", " \t \n ", "a b", "a  b",
  "a   b", "a\tb", "a\nb", "a\n\nb", "line one\nline two\nline three", "   leading spaces", "trailing spaces   ",
  "  both  ", "multiple    spaces    here", "\tindented with tab", "    indented code", "end with newline\n",
  "\nstart with newline", "mixed \t\n whitespace \n\t ",
  // special-token text taken literally (parse_special=false)
  "<s>", "</s>", "<unk>", "<s>hello</s>", "text with <s> inside and </s> at the end", " <s> ", "<s><s>",
  "<0x41>", "<0xE2>", "[EMPTY_0]",
];

const specialTexts = ["<s>", "</s>", "<s>hello</s>", "hello <s> world", "<s> leading", "a</s>b", "<unk>",
  "plain text", "", " <s>"];

const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath});

const seen = new Set();
const cases = [];
for (const text of [...seedLines(), ...handmade]) {
  if (seen.has(text)) continue;
  seen.add(text);
  cases.push({text, ids: Array.from(model.tokenize(text, false))});
}
const special = specialTexts.map(text => ({text, ids: Array.from(model.tokenize(text, true))}));

const out = {
  model: path.basename(modelPath),
  generator: "tools/make_tokenizer_fixture.mjs (llama.cpp via node-llama-cpp)",
  note: "ids are llama.cpp's, without BOS: cases use parse_special=false, special uses parse_special=true",
  bos: model.tokens.bos,
  cases,
  special,
};
fs.mkdirSync(path.dirname(outPath), {recursive: true});
fs.writeFileSync(outPath, JSON.stringify(out, null, 0).replace(/\},\{"text"/g, "},\n{\"text\"") + "\n");
console.log(`${cases.length} cases, ${special.length} special cases -> ${outPath}`);
process.exit(0);
