#include "server/engine_routes.h"

#include <fmt/format.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "server/openai_responses.h"
#include "server/routes.h"
#include "server/web_assets.h"

namespace kvik::server {

using nlohmann::json;

namespace {

// How stale a snapshot may be before a request asks the engine for a fresh one (the dashboard polls each second).
constexpr auto kStateMaxAge = std::chrono::milliseconds(200);

template <typename T>
void append_array(std::string& out, const std::vector<T>& v) {
  out += '[';
  for (size_t i = 0; i < v.size(); ++i) fmt::format_to(std::back_inserter(out), "{}{}", i ? "," : "", v[i]);
  out += ']';
}

}  // namespace

std::string engine_state_json(const EngineStateSnapshot& s, bool spec_decode_on) {
  // Written by hand: the block arrays are the bulk (tens of thousands of numbers on a large pool), and this runs
  // once per published snapshot, not per request.
  std::string out;
  const double time = std::chrono::duration<double>(s.taken.time_since_epoch()).count();
  fmt::format_to(std::back_inserter(out),
                 R"({{"object":"engine.state","sequence":{},"time":{:.3f},"num_steps":{},"block_size":{},)"
                 R"("num_blocks":{},"num_free_blocks":{},"kv_usage":{},"num_preemptions":{},)"
                 R"("prefix_cache":{{"queries":{},"hits":{}}},"snapshot_us":{:.1f},"spec_decode":)",
                 s.sequence, time, s.num_steps, s.block_size, s.num_blocks(), s.num_free_blocks, s.kv_usage,
                 s.num_preemptions, s.prefix_cache.queries, s.prefix_cache.hits, s.snapshot_seconds * 1e6);
  if (spec_decode_on)
    fmt::format_to(std::back_inserter(out), R"({{"num_drafts":{},"num_draft_tokens":{},"num_accepted_tokens":{}}})",
                   s.spec_decode.num_drafts, s.spec_decode.num_draft_tokens, s.spec_decode.num_accepted_tokens);
  else
    out += "null";
  out += R"(,"blocks":{"owner":)";
  append_array(out, s.owner);
  out += R"(,"ref_cnt":)";
  append_array(out, s.ref_cnt);
  out += R"(,"hash":[)";
  for (size_t i = 0; i < s.hash.size(); ++i) {
    if (i) out += ',';
    if (s.has_hash[i])
      fmt::format_to(std::back_inserter(out), "\"{:016x}\"", s.hash[i].lo);
    else
      out += "null";
  }
  out += R"(]},"requests":[)";
  for (size_t i = 0; i < s.requests.size(); ++i) {
    const auto& r = s.requests[i];
    fmt::format_to(std::back_inserter(out),
                   R"({}{{"id":{},"status":"{}","num_prompt_tokens":{},"num_tokens":{},"num_computed_tokens":{},)"
                   R"("lora":{},"block_table":)",
                   i ? "," : "", json(r.id).dump(-1, ' ', false, json::error_handler_t::replace),
                   r.running ? "running" : "waiting", r.num_prompt_tokens, r.num_tokens, r.num_computed_tokens,
                   r.lora.empty() ? "null" : json(r.lora).dump(-1, ' ', false, json::error_handler_t::replace));
    append_array(out, r.block_table);
    out += '}';
  }
  out += "]}";
  return out;
}

std::string step_trace_json(const StepTrace& t, const ModelConfig& c, const Tokenizer& tok, const std::string& model) {
  json rows = json::array();
  for (const StepTraceRow& r : t.rows)
    rows.push_back(
        {{"code", r.code}, {"shape", r.shape}, {"dims", r.dims}, {"note", r.note}, {"per_layer", r.per_layer}});
  json tokens = json::array();
  for (int32_t id : t.token_ids) tokens.push_back(tok.token_to_piece(id));
  return dump(
      {{"object", "engine.trace"},
       {"model", model},
       {"step", t.decode ? "decode" : "prefill"},
       {"T", t.T},
       {"ctx", t.ctx},
       {"config",
        {{"d", c.dim},
         {"L", c.n_layers},
         {"n_h", c.n_heads},
         {"n_kv", c.n_kv_heads},
         {"d_h", c.head_dim},
         {"d_ff", c.ff_dim},
         {"V", c.vocab_size},
         {"rope_dim", c.rope_dim}}},
       {"token_ids", t.token_ids},
       {"tokens", tokens},
       {"slot_mapping", t.slot_mapping},
       {"stream_rms", t.stream_rms},
       {"rows", rows},
       {"next_token", {{"id", t.next_token}, {"text", tok.token_to_piece(t.next_token)}, {"prob", t.next_prob}}}});
}

HttpReply Router::web_page(const std::string& path) const {
  HttpReply reply;
  const WebAsset* asset = find_web_asset(path, reply.content_type);
  if (!asset) return error({404, fmt::format("no route for GET {}", path), "", ""});
  reply.body = std::string(asset->body);
  reply.headers.emplace_back("Cache-Control", "no-cache");
  reply.headers.emplace_back("X-Content-Type-Options", "nosniff");
  // Everything the pages load comes from this server: no CDN, no inline script.
  reply.headers.emplace_back("Content-Security-Policy",
                             "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:");
  return reply;
}

HttpReply Router::engine_state() {
  std::shared_ptr<const EngineStateSnapshot> s = ctx_.engine->state_snapshot(kStateMaxAge);
  if (!s) return error({503, "the engine has not published its state yet", "", ""});
  HttpReply reply;
  std::lock_guard<std::mutex> lock(state_json_mu_);
  if (s->sequence != state_json_sequence_) {  // serialized once per snapshot, whatever the number of pollers
    state_json_ = engine_state_json(*s, ctx_.engine->core().config().speculative.enabled());
    state_json_sequence_ = s->sequence;
  }
  reply.body = state_json_;
  reply.headers.emplace_back("Cache-Control", "no-store");
  return reply;
}

std::string prefix_summary_json(const EngineStateSnapshot& s) {
  std::string out = fmt::format(R"({{"object":"engine.prefix_summary","sequence":{},"block_size":{},"hashes":[)",
                                s.sequence, s.block_size);
  bool first = true;
  for (size_t i = 0; i < s.hash.size(); ++i) {
    if (!s.has_hash[i]) continue;
    fmt::format_to(std::back_inserter(out), "{}\"{:016x}\"", first ? "" : ",", s.hash[i].lo);
    first = false;
  }
  return out + "]}";
}

HttpReply Router::prefix_summary() {
  std::shared_ptr<const EngineStateSnapshot> s = ctx_.engine->state_snapshot(kStateMaxAge);
  if (!s) return error({503, "the engine has not published its state yet", "", ""});
  HttpReply reply;
  reply.body = prefix_summary_json(*s);
  reply.headers.emplace_back("Cache-Control", "no-store");
  return reply;
}

HttpReply Router::engine_trace(const HttpRequest& req, std::function<void()> on_engine_output) {
  auto parsed = parse_json_object(req.body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return error(*e);
  json& body = std::get<json>(parsed);
  if (!body.contains("prompt") || !body["prompt"].is_string() || body["prompt"].get<std::string>().empty())
    return error(ApiError::bad_request("'prompt' is required and must be a non-empty string", "prompt"));
  if (body.contains("decode") && !body["decode"].is_boolean())
    return error(ApiError::bad_request("'decode' must be a boolean", "decode"));
  const bool decode = body.value("decode", false);
  const Tokenizer& tok = *ctx_.tokenizer;
  std::vector<int32_t> ids = tok.encode(body["prompt"].get<std::string>(), tok.add_bos(), false);
  if (decode && ids.size() < 2)
    return error(ApiError::bad_request("a decode trace needs a prompt of at least 2 tokens", "prompt"));
  if (static_cast<int64_t>(ids.size()) > ctx_.max_model_len)
    return error(ApiError::bad_request(
        fmt::format("the prompt has {} tokens, more than max_model_len {}", ids.size(), ctx_.max_model_len), "prompt"));
  auto deferred = std::make_shared<DeferredBody>();
  const std::string model = config_.served_model_name;
  const bool queued = ctx_.engine->run_between_steps(
      [deferred, ids = std::move(ids), decode, &tok, model, wake = std::move(on_engine_output)](EngineCore& core) {
        try {
          const StepTrace t = trace_step(core.model(), ids, decode);
          deferred->complete(200, step_trace_json(t, core.model().config(), tok, model));
        } catch (const std::exception& e) {
          deferred->complete(500, Router::error({500, std::string("trace: ") + e.what(), "", ""}).body);
        }
        wake();
      });
  if (!queued) return error({503, "the server is shutting down", "", ""});
  HttpReply reply;
  reply.stream = std::move(deferred);
  return reply;
}

}  // namespace kvik::server
