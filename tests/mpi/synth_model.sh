# Sourced by the mpi tests: synth_model KVIK STORIES NAME DIR writes the random-weight model NAME into DIR and prints
# its path. NAME = synth-SHAPE[-TYPE]: SHAPE gqa (d 128, 4 layers, 8 query / 2 KV heads, d_ff 256), mixtral (the same
# with 8 experts of width 256, 2 used) or qwen3moe (q/k norm, 16 experts of width 128, 4 used); TYPE f32 (default),
# q8_0 or any other `kvik synth --type`. Vocabulary 512 with stories260K's tokenizer.
synth_model() {
  local kvik=$1 stories=$2 name=$3 dir=$4
  local shape=${name#synth-} type=f32 arch=()
  case $shape in *-*) type=${shape#*-} shape=${shape%%-*} ;; esac
  case $shape in
    gqa) ;;
    mixtral) arch=(--arch mixtral --experts 8 --experts-used 2) ;;
    qwen3moe) arch=(--arch qwen3moe --experts 16 --experts-used 4 --expert-ff 128) ;;
    *) echo "unknown model $name (synth-gqa, synth-mixtral, synth-qwen3moe, each with an optional -TYPE)" >&2 && return 1 ;;
  esac
  "$kvik" synth "${arch[@]}" --dim 128 --layers 4 --heads 8 --kv-heads 2 --ff 256 --vocab 512 --context 1024 --seed 7 \
    --type "$type" --tokenizer-from "$stories" "$dir/$shape-$type.gguf" >/dev/null
  echo "$dir/$shape-$type.gguf"
}
