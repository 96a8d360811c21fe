#!/usr/bin/env bash
# Speculative decoding (n-gram prompt lookup, --speculative-config) against plain decoding, as JSON. Each case
# runs OFF and ON alternately (the order flips every round) for ROUNDS rounds; the JSON gives medians, the
# speedup ON / OFF, the acceptance rate and the mean acceptance length (tokens per verification step).
#   stories_grounded   stories260K, a "repeat this text" prompt, greedy, batch 1: decode tok/s
#   stories_free       stories260K, "Once upon a time", greedy, batch 1 (lookup has little to copy)
#   l1b_grounded       a random-weight Llama-3.2-1B-shaped Q8_0 model (kvik synth), the same prompt: random
#                      weights do not copy a prompt, only their own loops can be looked up
#   l1b_free           the same model, "Once upon a time"
#   stories_16         16 grounded prompts at once (generate --prompts): output tok/s = tokens / engine time
#   l1b_16             kvik bench on the 1B shape, 16 concurrent requests of random ids: output tok/s
#   l1b_draft          the 1B shape, grounded prompt, method draft_model with a small random model of the same
#                      vocabulary (d 256, 2 layers) drafting DRAFT_K tokens: random weights agree on little
#   l1bs_*            the same shape computing stories260K (synth --embed-from; its greedy text at the 1B's cost):
#                      grounded, free, 16 grounded prompts at once (l1bs_16), and draft_model with stories260K itself
#                      drafting 4 tokens on free generation (a draft of the same function: acceptance near 1)
#   l1bc_*            the same shape computing synth --induction, a hand-built model that copies what followed its last
#                      two tokens (an induction head): the copy task on a model that really copies, the "repeat this
#                      text" prompt (l1bc_grounded) and 16 such prompts at once (l1bc_16)
# Usage: bench/spec_decode.sh   Environment: KVIK (build/kvik), ROUNDS (3), G (128 tokens per request; l1b_16: G16, 64),
#   SPEC (the --speculative-config JSON), DRAFT_K (2), L1B, L1BS, L1BC (paths of the 1B-shaped models; written to a temp dir when unset),
#   THREADS (all cores).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KVIK="${KVIK:-$ROOT/build/kvik}"
ROUNDS="${ROUNDS:-3}" G="${G:-128}" G16="${G16:-64}" THREADS="${THREADS:-$(nproc)}"
SPEC="${SPEC:-{\"method\": \"ngram\", \"num_speculative_tokens\": 4, \"prompt_lookup_max\": 4, \"prompt_lookup_min\": 2\}}"
SHARED="${KVIK_SHARED_DIR:-$ROOT/../shared}"
STORIES="$SHARED/models/stories260K.gguf"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
L1B="${L1B:-$TMP/l1b.gguf}"
[ -f "$L1B" ] || "$KVIK" synth "$L1B" --dim 2048 --layers 16 --heads 32 --kv-heads 8 --ff 8192 --vocab 32000 \
  --type q8_0 --tokenizer-from "$STORIES" >/dev/null 2>&1
# The same shape computing stories260K (synth --embed-from): the 1B's cost per token with a real model's text,
# which copies a prompt it is asked to repeat.
L1BS="${L1BS:-$TMP/l1b_stories.gguf}"
[ -f "$L1BS" ] || "$KVIK" synth "$L1BS" --embed-from "$STORIES" --dim 2048 --layers 16 --heads 32 --kv-heads 8 --ff 8192 \
  --vocab 32000 --type q8_0 >/dev/null 2>&1
# The same shape computing the hand-built copying model (synth --induction, stories260K's tokenizer).
L1BC="${L1BC:-$TMP/l1b_copy.gguf}"
if [ ! -f "$L1BC" ]; then
  "$KVIK" synth "$TMP/induction.gguf" --induction --tokenizer-from "$STORIES" >/dev/null 2>&1
  "$KVIK" synth "$L1BC" --embed-from "$TMP/induction.gguf" --dim 2048 --layers 16 --heads 32 --kv-heads 8 --ff 8192 \
    --vocab 32000 --type q8_0 >/dev/null 2>&1
fi
STORIES_V="$TMP/stories_v32000.gguf"  # stories260K with the 1B shape's vocabulary (rows past 512 zero): its draft
"$KVIK" synth "$STORIES_V" --embed-from "$STORIES" --dim 64 --layers 5 --heads 8 --kv-heads 4 --ff 172 --vocab 32000 \
  >/dev/null 2>&1
DRAFT="$TMP/draft.gguf" DRAFT_K="${DRAFT_K:-2}"
"$KVIK" synth "$DRAFT" --dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 512 --vocab 32000 --type q8_0 \
  --tokenizer-from "$STORIES" >/dev/null 2>&1

TEXT="Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a \
big red ball under a tree. She ran to get it, but a big dog took the ball. Lily was sad."
GROUNDED="Repeat this text: $TEXT Repeat this text: $TEXT Repeat this text:"
FREE="Once upon a time"
SENT=("The sun was shining and the birds were singing." "Tom was a happy dog who liked to run." \
  "Ben and his friend built a tall tower of blocks." "The cat was sad because it lost its toy.")
for i in $(seq 0 15); do
  s="$TEXT ${SENT[$((i % 4))]} Tom said hello number $i."
  jq -cn --arg p "Repeat this text: $s Repeat this text: $s Repeat this text:" --argjson g "$G" \
    '{prompt: $p, max_tokens: $g, temperature: 0, ignore_eos: true}' >> "$TMP/16.jsonl"
done

# One batch-1 run: {tok_s, drafts, draft_tokens, accepted}.
gen1() {  # MODEL PROMPT ON [SPEC]
  local extra=()
  [ "$3" = on ] && extra=(--speculative-config "${4:-$SPEC}")
  nice "$KVIK" generate -m "$1" -p "$2" -n "$G" --temperature 0 --ignore-eos --threads "$THREADS" --json "${extra[@]}" \
    2>/dev/null | jq -c '{tok_s: .timings.decode_tok_s} + .spec_decode'
}
gen16() {  # ON [MODEL]: 16 grounded prompts at once (stories260K unless MODEL)
  local extra=()
  [ "$1" = on ] && extra=(--speculative-config "$SPEC")
  nice "$KVIK" generate -m "${2:-$STORIES}" --prompts "$TMP/16.jsonl" --threads "$THREADS" --json "${extra[@]}" 2>/dev/null |
    jq -sc '{tok_s: ((map(.token_ids | length) | add) / (map(.timings.prefill_ms + .timings.decode_ms) | max) * 1000),
             drafts: (map(.spec_decode.drafts) | add), draft_tokens: (map(.spec_decode.draft_tokens) | add),
             accepted_tokens: (map(.spec_decode.accepted_tokens) | add)}'
}
bench16() {  # ON: 16 concurrent requests on the 1B shape
  local extra=()
  [ "$1" = on ] && extra=(--speculative-config "$SPEC")
  nice "$KVIK" bench -m "$L1B" --no-bandwidth --threads "$THREADS" --num-prompts 16 --concurrency 16 --input-len 32 \
    --output-len "$G16" --json "${extra[@]}" 2>/dev/null | tail -n 1 |
    jq -c '{tok_s: .output_tok_s, drafts: .spec_num_drafts, acceptance_rate: .spec_acceptance_rate,
            mean_accepted_len: .spec_mean_accepted_len}'
}
run_case() {  # CASE ON
  case "$1" in
    stories_grounded) gen1 "$STORIES" "$GROUNDED" "$2" ;;
    stories_free) gen1 "$STORIES" "$FREE" "$2" ;;
    l1b_grounded) gen1 "$L1B" "$GROUNDED" "$2" ;;
    l1b_free) gen1 "$L1B" "$FREE" "$2" ;;
    stories_16) gen16 "$2" ;;
    l1b_16) bench16 "$2" ;;
    l1b_draft) gen1 "$L1B" "$GROUNDED" "$2" "{\"method\": \"draft_model\", \"model\": \"$DRAFT\", \"num_speculative_tokens\": $DRAFT_K}" ;;
    l1bs_grounded) gen1 "$L1BS" "$GROUNDED" "$2" ;;
    l1bs_free) gen1 "$L1BS" "$FREE" "$2" ;;
    l1bs_16) gen16 "$2" "$L1BS" ;;
    l1bc_grounded) gen1 "$L1BC" "$GROUNDED" "$2" ;;
    l1bc_16) gen16 "$2" "$L1BC" ;;
    l1bs_draft) gen1 "$L1BS" "$FREE" "$2" "{\"method\": \"draft_model\", \"model\": \"$STORIES_V\", \"num_speculative_tokens\": 4}" ;;
  esac
}

CASES="${CASES:-stories_grounded stories_free stories_16 l1b_grounded l1b_free l1b_16 l1b_draft l1bs_grounded l1bs_free l1bs_16 l1bs_draft l1bc_grounded l1bc_16}"
echo "cases: $CASES; $ROUNDS rounds, $G tokens, $THREADS threads; load: $(uptime | sed 's/.*load average: //')" >&2
for r in $(seq 1 "$ROUNDS"); do
  for c in $CASES; do
    if ((r % 2)); then order="off on"; else order="on off"; fi
    for mode in $order; do jq -c --arg c "$c" --arg m "$mode" '{case: $c, mode: $m} + .' <<< "$(run_case "$c" "$mode")" >> "$TMP/runs"; done
  done
  echo "round $r/$ROUNDS done" >&2
done
CPU="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
jq -s --arg cpu "$CPU" --argjson threads "$THREADS" --argjson g "$G" --argjson g16 "$G16" --arg spec "$SPEC" '
  def median: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def r3: . * 1000 | round / 1000;
  (group_by(.case) | map({key: .[0].case, value: (
      (map(select(.mode == "off") | .tok_s) | median) as $off |
      (map(select(.mode == "on") | .tok_s) | median) as $on |
      (map(select(.mode == "on")) | .[0]) as $one |
      {off_tok_s: ($off | r3), on_tok_s: ($on | r3), speedup: ($on / $off | r3),
       acceptance_rate: (if $one.acceptance_rate != null then $one.acceptance_rate
                         elif ($one.draft_tokens // 0) > 0 then $one.accepted_tokens / $one.draft_tokens else 0 end | r3),
       mean_accepted_len: (if $one.mean_accepted_len != null then $one.mean_accepted_len
                           elif ($one.drafts // 0) > 0 then 1 + $one.accepted_tokens / $one.drafts else 0 end | r3),
       runs: map({mode, tok_s: (.tok_s | r3)})})}) | from_entries) as $cases |
  {cpu: $cpu, threads: $threads, tokens_per_request: $g, tokens_per_request_l1b_16: $g16, speculative_config: $spec,
   cases: $cases}' "$TMP/runs"
