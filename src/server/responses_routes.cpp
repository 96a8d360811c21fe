// The Responses API's routes: POST /v1/responses, GET and DELETE /v1/responses/{id} (the Router's handlers; the
// request is responses_request.h, the reply responses_stream.h, the store response_store.h).
#include <fmt/format.h>

#include <ctime>

#include "server/generation_config.h"
#include "server/openai_responses.h"
#include "server/responses_request.h"
#include "server/responses_stream.h"
#include "server/routes.h"

namespace kvik::server {

using nlohmann::ordered_json;

namespace {

ApiError response_not_found(const std::string& id, const std::string& param = "") {
  return {404, fmt::format("Response with id '{}' not found.", id), param, "NotFoundError"};
}

}  // namespace

HttpReply Router::create_response(const HttpRequest& req, std::function<void()> on_engine_output) {
  auto body = parse_ordered_json_object(req.body);
  if (auto* e = std::get_if<ApiError>(&body)) return error(*e);
  ordered_json& fields = std::get<ordered_json>(body);
  apply_generation_defaults(fields, config_.generation_defaults, {"max_output_tokens"});
  const std::string key = api_key_of(req);
  const std::shared_ptr<ResponseStore> store = responses_;
  auto parsed = parse_responses_request(fields, [&](const std::string& id) { return store->item(key, id); });
  if (auto* e = std::get_if<ApiError>(&parsed)) return error(*e);
  ResponsesRequest& r = std::get<ResponsesRequest>(parsed);
  std::vector<ChatMessage> conversation;  // what a stored response continues from
  if (!r.previous_response_id.empty()) {
    auto previous = responses_->get(key, r.previous_response_id);
    if (!previous) return error(response_not_found(r.previous_response_id, "previous_response_id"));
    conversation = previous->conversation;
    continue_conversation(r, conversation);
  }
  conversation.insert(conversation.end(), r.input.begin(), r.input.end());
  GenerateRequest& g = r.generate;
  std::vector<std::vector<int32_t>> ids;
  ChatOutputOptions output;
  if (auto e = prepare(g, "input", ids, output)) return error(*e);
  auto job = std::make_shared<GenerationJob>(*ctx_.engine, *ctx_.tokenizer, std::move(ids), g.params, 1, g.stop,
                                             /*skip_special_tokens=*/output.tools != ToolCallFormat::kMistral);
  job->set_on_output(std::move(on_engine_output));
  if (auto e = admit(*job)) return error(*e);

  ResponsesStreamOptions o;
  o.head.id = "resp_" + next_request_id();
  o.head.created_at = static_cast<int64_t>(std::time(nullptr));
  o.head.model = g.params.lora ? g.model : config_.served_model_name;
  o.head.echo = std::move(r.echo);
  o.output = output;
  o.stream = g.stream;
  if (r.store) {
    o.store = responses_;
    o.store_key = key;
    o.conversation = std::move(conversation);
  }
  HttpReply reply;
  reply.stream = std::make_shared<ResponsesStream>(std::move(job), std::move(o));
  if (g.stream) {
    reply.content_type = "text/event-stream";
    reply.headers.emplace_back("Cache-Control", "no-cache");
  }
  return reply;
}

HttpReply Router::get_response(const HttpRequest& req, const std::string& id) {
  auto stored = responses_->get(api_key_of(req), id);
  if (!stored) return error(response_not_found(id));
  HttpReply reply;
  reply.body = dump_ordered(stored->response);
  return reply;
}

HttpReply Router::delete_response(const HttpRequest& req, const std::string& id) {
  if (!responses_->erase(api_key_of(req), id)) return error(response_not_found(id));
  HttpReply reply;
  reply.body = dump_ordered(ordered_json{{"id", id}, {"object", "response.deleted"}, {"deleted", true}});
  return reply;
}

}  // namespace kvik::server
