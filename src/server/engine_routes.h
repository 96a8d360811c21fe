// kvik's extension endpoints for the web pages: GET /v1/engine/state (the dashboard's KV block map: every block's
// owner, ref count and prefix-cache hash, and every request's block table, from a snapshot the engine thread
// publishes between steps), GET /v1/engine/prefix_summary (the cached block hashes alone) and POST /v1/engine/trace
// (one prefill or decode step as a table of shapes, as `kvik trace` prints it).
#pragma once

#include <string>

#include "engine/engine_state.h"
#include "engine/step_trace.h"
#include "tokenizer/tokenizer.h"

namespace kvik::server {

// The snapshot as the endpoint's JSON: {"object": "engine.state", "sequence", "time", "num_steps", "block_size",
// "num_blocks", "num_free_blocks", "kv_usage", "num_preemptions", "prefix_cache": {"queries", "hits"},
// "spec_decode": {...} or null, "snapshot_us", "blocks": {"owner": [...], "ref_cnt": [...], "hash": [hex|null]},
// "requests": [{"id", "status", "num_prompt_tokens", "num_tokens", "num_computed_tokens", "lora", "block_table"}]}.
std::string engine_state_json(const EngineStateSnapshot& s, bool spec_decode_on);

// The prefix cache in brief, for data parallelism's router (server/dp_router.h): {"object": "engine.prefix_summary",
// "sequence", "block_size", "hashes": [the low 64 bits of every cached block's hash, 16 hex digits]}.
std::string prefix_summary_json(const EngineStateSnapshot& s);

// The trace as JSON: {"object": "engine.trace", "model", "step": "prefill"|"decode", "T", "ctx", "config": {"d",
// "L", "n_h", "n_kv", "d_h", "d_ff", "V", "rope_dim"}, "token_ids", "tokens", "slot_mapping", "stream_rms",
// "rows": [{"code", "shape", "dims", "note", "per_layer"}], "next_token": {"id", "text", "prob"}}.
std::string step_trace_json(const StepTrace& t, const ModelConfig& c, const Tokenizer& tok, const std::string& model);

}  // namespace kvik::server
