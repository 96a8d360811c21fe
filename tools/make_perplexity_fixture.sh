#!/usr/bin/env bash
# Re-creates tests/fixtures/perplexity_llamacpp.json, the numbers tests/test_perplexity.cpp holds kvik
# perplexity to: llama.cpp's own llama-perplexity (the native build of ../shared/peer/build-native.sh, CPU) on
# tests/data/stories.txt with -c 128 for
#   stories260K.gguf                 (F32)          PPL and its +/- as llama-perplexity prints them
#   a `kvik synth` model (F32)        seed 21        PPL
#   the same synth model as Q8_0      vs the F32    --kl-divergence: PPL, mean KLD, RMS dp, same top p
# Usage (repository root, after building kvik): tools/make_perplexity_fixture.sh [KVIK_BINARY]
# Environment: KVIK_PEER_DIR (default /tmp/kvik-peer), KVIK_SHARED_DIR (default ../shared).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KVIK="${1:-$ROOT/build/kvik}"
PEER="${KVIK_PEER_DIR:-/tmp/kvik-peer}"
SHARED="${KVIK_SHARED_DIR:-$ROOT/../shared}"
PPL="$PEER/llama.cpp/build/bin/llama-perplexity"
STORIES="$SHARED/models/stories260K.gguf"
TEXT="$ROOT/tests/data/stories.txt"
CTX=128
[[ -x "$PPL" ]] || { echo "needs $PPL: run $SHARED/peer/build-native.sh llama-perplexity" >&2; exit 1; }
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
SYNTH=(--dim 128 --layers 2 --heads 4 --kv-heads 2 --ff 256 --vocab 512 --seed 21 --output-scale 4
       --tokenizer-from "$STORIES")
"$KVIK" synth "$TMP/synth_f32.gguf" "${SYNTH[@]}" --type f32 2>/dev/null
"$KVIK" synth "$TMP/synth_q8_0.gguf" "${SYNTH[@]}" --type q8_0 2>/dev/null
run() { nice "$PPL" -m "$1" -f "$TEXT" -c $CTX -b 512 -t 2 --no-warmup "${@:2}" 2>&1; }
final() { sed -n 's/.*Final estimate: PPL = \([0-9.]*\) +\/- \([0-9.]*\).*/\1 \2/p' | tail -1; }
read -r s_ppl s_err < <(run "$STORIES" | final)
read -r f_ppl f_err < <(run "$TMP/synth_f32.gguf" | final)
run "$TMP/synth_f32.gguf" --kl-divergence-base "$TMP/base.kld" >/dev/null
KL="$(run "$TMP/synth_q8_0.gguf" --kl-divergence-base "$TMP/base.kld" --kl-divergence)"
val() { echo "$KL" | sed -n "s/^$1 *: *\([-0-9.e]*\).*/\1/p" | head -1; }
q_ppl="$(echo "$KL" | sed -n 's/^Mean PPL(Q) *: *\([0-9.]*\).*/\1/p')"
kld="$(val 'Mean    KLD')"; rms="$(echo "$KL" | sed -n 's/^RMS Δp *: *\([0-9.]*\).*/\1/p')"
same="$(echo "$KL" | sed -n 's/^Same top p *: *\([0-9.]*\).*/\1/p')"
sha() { sha256sum "$1" | cut -d' ' -f1; }
cat > "$ROOT/tests/fixtures/perplexity_llamacpp.json" <<JSON
{"generator": "tools/make_perplexity_fixture.sh: llama.cpp's llama-perplexity (native CPU build of the peer's pinned source), -c $CTX -b 512 -t 2, text tests/data/stories.txt, f16 KV cache",
 "ctx": $CTX,
 "stories260k": {"ppl": $s_ppl, "ppl_stderr": $s_err},
 "synth": {"options": {"dim": 128, "layers": 2, "heads": 4, "kv_heads": 2, "ff": 256, "vocab": 512, "seed": 21, "output_scale": 4},
           "sha256_f32": "$(sha "$TMP/synth_f32.gguf")", "sha256_q8_0": "$(sha "$TMP/synth_q8_0.gguf")",
           "ppl": $f_ppl, "ppl_stderr": $f_err,
           "q8_0_vs_f32": {"ppl": $q_ppl, "kld_mean": $kld, "delta_p_rms_percent": $rms, "same_top_percent": $same}}}
JSON
cat "$ROOT/tests/fixtures/perplexity_llamacpp.json"
