// Server pieces without a socket: OpenAI schema validation, stop-string holdback, metrics text format,
// the fallback chat template.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/gguf.h"
#include "server/chat_prompt.h"
#include "server/metrics.h"
#include "server/openai_schema.h"
#include "server/stop_strings.h"
#include "synth_models.h"
#include "tokenizer/tokenizer.h"

using namespace kvik;
using namespace kvik::server;
using nlohmann::json;

namespace {

GenerateRequest parse_ok(const json& j, bool chat = false) {
  auto r = parse_generate_request(j, chat);
  if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << e->message;
  return std::get<GenerateRequest>(r);
}

ApiError parse_err(const json& j, bool chat = false) {
  auto r = parse_generate_request(j, chat);
  EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << j.dump();
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

}  // namespace

TEST(OpenAiSchema, CompletionFieldsReachSamplingParams) {
  const GenerateRequest r = parse_ok({{"model", "m"},
                                      {"prompt", "hi"},
                                      {"max_tokens", 7},
                                      {"temperature", 0.5},
                                      {"top_p", 0.9},
                                      {"top_k", 40},
                                      {"min_p", 0.1},
                                      {"seed", 3},
                                      {"n", 2},
                                      {"stop", {"a", "b"}},
                                      {"presence_penalty", 0.5},
                                      {"frequency_penalty", -0.5},
                                      {"repetition_penalty", 1.2},
                                      {"logprobs", 2},
                                      {"ignore_eos", true},
                                      {"stream", true},
                                      {"stream_options", {{"include_usage", true}}},
                                      {"some_unknown_field", {1, 2}}});
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(std::get<std::string>(r.prompts[0]), "hi");
  EXPECT_TRUE(r.max_tokens_given);
  EXPECT_EQ(r.params.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.params.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.params.top_p, 0.9f);
  EXPECT_EQ(r.params.top_k, 40);
  EXPECT_FLOAT_EQ(r.params.min_p, 0.1f);
  EXPECT_EQ(r.params.seed, 3u);
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_FLOAT_EQ(r.params.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.params.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r.params.repetition_penalty, 1.2f);
  EXPECT_EQ(r.params.logprobs, 2);
  EXPECT_TRUE(r.params.ignore_eos);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(OpenAiSchema, PromptForms) {
  EXPECT_EQ(std::get<std::vector<int32_t>>(parse_ok({{"prompt", {1, 2, 3}}}).prompts[0]),
            (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(parse_ok({{"prompt", {"a", "b"}}}).prompts.size(), 2u);
  EXPECT_EQ(parse_ok({{"prompt", {{1, 2}, {3}}}}).prompts.size(), 2u);
  EXPECT_FALSE(parse_ok({{"prompt", "x"}}).max_tokens_given);
}

TEST(OpenAiSchema, BadValuesAre400NamingTheField) {
  const json base = {{"prompt", "x"}};
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"max_tokens", -1}}, "max_tokens"},
      {{{"max_tokens", "5"}}, "max_tokens"},
      {{{"max_tokens", 2.5}}, "max_tokens"},
      {{{"max_tokens", 1e300}}, "max_tokens"},
      {{{"max_tokens", 99999999999LL}}, "max_tokens"},
      {{{"temperature", -0.1}}, "temperature"},
      {{{"temperature", "hot"}}, "temperature"},
      {{{"top_p", 0}}, "top_p"},
      {{{"top_p", 1.01}}, "top_p"},
      {{{"top_k", -2}}, "top_k"},
      {{{"min_p", 2}}, "min_p"},
      {{{"n", 0}}, "n"},
      {{{"n", 17}}, "n"},
      {{{"seed", "1"}}, "seed"},
      {{{"stop", 1}}, "stop"},
      {{{"stop", {"a", 2}}}, "stop"},
      {{{"stop", ""}}, "stop"},
      {{{"presence_penalty", 2.5}}, "presence_penalty"},
      {{{"frequency_penalty", true}}, "frequency_penalty"},
      {{{"repetition_penalty", 0}}, "repetition_penalty"},
      {{{"logprobs", 21}}, "logprobs"},
      {{{"logprobs", true}}, "logprobs"},
      {{{"ignore_eos", 1}}, "ignore_eos"},
      {{{"stream", "yes"}}, "stream"},
      {{{"stream_options", {{"include_usage", true}}}}, "stream_options"},
      {{{"model", 3}}, "model"},
      {{{"prompt", 3}}, "prompt"},
      {{{"prompt", json::array()}}, "prompt"},
      {{{"prompt", {1, -1}}}, "prompt"},
      {{{"echo", true}}, "echo"},
  };
  for (const auto& [patch, field] : cases) {
    json body = base;
    body.update(patch);
    const ApiError e = parse_err(body);
    EXPECT_EQ(e.status, 400) << body.dump();
    EXPECT_EQ(e.param, field) << body.dump() << ": " << e.message;
    EXPECT_NE(e.message.find(field), std::string::npos) << e.message;
    const json j = e.to_json();
    EXPECT_TRUE(j["error"].contains("message") && j["error"].contains("type") && j["error"].contains("param") &&
                j["error"].contains("code"));
  }
  EXPECT_EQ(parse_err(json::array()).status, 400);
  EXPECT_EQ(parse_err(json::object()).param, "prompt");
}

TEST(OpenAiSchema, ChatMessagesAndLogprobs) {
  const GenerateRequest r = parse_ok({{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                      {"logprobs", true},
                                      {"top_logprobs", 3},
                                      {"max_completion_tokens", 9}},
                                     true);
  EXPECT_EQ(r.params.logprobs, 3);
  EXPECT_EQ(r.params.max_tokens, 9);
  EXPECT_EQ(parse_ok({{"messages", {{{"role", "user"}, {"content", "hi"}}}}}, true).params.logprobs, -1);
  EXPECT_EQ(parse_err({{"messages", "hi"}}, true).param, "messages");
  EXPECT_EQ(parse_err({{"messages", {{{"content", "hi"}}}}}, true).param, "messages[0].role");
  EXPECT_EQ(parse_err({{"messages", {{{"role", "user"}, {"content", 5}}}}}, true).param, "messages[0].content");
  EXPECT_EQ(parse_err({{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"top_logprobs", 2}}, true).param,
            "top_logprobs");
}

TEST(OpenAiSchema, TokenizeAndDetokenize) {
  EXPECT_TRUE(std::holds_alternative<TokenizeRequest>(parse_tokenize_request({{"prompt", "x"}})));
  EXPECT_TRUE(std::holds_alternative<ApiError>(parse_tokenize_request({{"prompt", 1}})));
  EXPECT_EQ(std::get<std::vector<int32_t>>(parse_detokenize_request({{"tokens", {5, 6}}})),
            (std::vector<int32_t>{5, 6}));
  EXPECT_TRUE(std::holds_alternative<ApiError>(parse_detokenize_request({{"tokens", {-1}}})));
  EXPECT_TRUE(std::holds_alternative<ApiError>(parse_detokenize_request({{"tokens", "x"}})));
}

TEST(StopStrings, HoldsBackTheLongestPartialMatch) {
  EXPECT_EQ(partial_stop_suffix("hello wor", {"world"}), 3u);
  EXPECT_EQ(partial_stop_suffix("hello", {"world"}), 0u);
  EXPECT_EQ(partial_stop_suffix("abcab", {"abd", "cabx"}), 3u);
  StopStringMatcher m({"STOP"});
  EXPECT_EQ(m.push("one S"), "one ");
  EXPECT_EQ(m.push("T"), "");
  EXPECT_EQ(m.push("x"), "STx");  // diverged: the held text is released
  EXPECT_EQ(m.push(" two ST"), " two ");
  EXPECT_EQ(m.push("OP three"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("more"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopStrings, EarliestStopWinsAndFlushReleasesTheTail) {
  StopStringMatcher m({"cd", "b"});
  EXPECT_EQ(m.push("abcd"), "a");
  EXPECT_TRUE(m.stopped());
  StopStringMatcher n({"xyz"});
  EXPECT_EQ(n.push("abcxy"), "abc");
  EXPECT_FALSE(n.stopped());
  EXPECT_EQ(n.flush(), "xy");
  StopStringMatcher none({});
  EXPECT_EQ(none.push("abc"), "abc");
}

TEST(StopStrings, ConcatenationEqualsTextBeforeTheStopForEverySplit) {
  const std::string text = "the cat sat on the mat. The end.";
  const std::vector<std::string> stops = {"on the m", "zz"};
  const std::string want = text.substr(0, text.find("on the m"));
  for (size_t a = 0; a <= text.size(); ++a)
    for (size_t b = a; b <= text.size(); b += 3) {
      StopStringMatcher m(stops);
      std::string got = m.push(text.substr(0, a));
      got += m.push(text.substr(a, b - a));
      got += m.push(text.substr(b));
      got += m.flush();
      EXPECT_EQ(got, want) << a << " " << b;
    }
}

TEST(Metrics, HistogramBucketsAreCumulative) {
  Histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.1);
  h.observe(0.5);
  h.observe(5);
  std::string out;
  h.render(out, "x", "a=\"b\"");
  EXPECT_NE(out.find("x_bucket{a=\"b\",le=\"0.1\"} 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_bucket{a=\"b\",le=\"1\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_bucket{a=\"b\",le=\"+Inf\"} 4\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_count{a=\"b\"} 4\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_sum{a=\"b\"} 5.65\n"), std::string::npos) << out;
}

TEST(Metrics, EveryServingMetricHasHelpAndType) {
  ServerMetrics m("my \"model\"");
  const std::string text = m.render();
  const std::vector<std::pair<std::string, std::string>> names = {{"time_to_first_token_seconds", "histogram"},
                                                                  {"inter_token_latency_seconds", "histogram"},
                                                                  {"request_queue_time_seconds", "histogram"},
                                                                  {"request_prefill_time_seconds", "histogram"},
                                                                  {"request_decode_time_seconds", "histogram"},
                                                                  {"num_requests_running", "gauge"},
                                                                  {"num_requests_waiting", "gauge"},
                                                                  {"kv_cache_usage_perc", "gauge"},
                                                                  {"prefix_cache_queries_total", "counter"},
                                                                  {"prefix_cache_hits_total", "counter"},
                                                                  {"num_preemptions_total", "counter"},
                                                                  {"iteration_tokens_total", "counter"},
                                                                  {"prompt_tokens_total", "counter"},
                                                                  {"generation_tokens_total", "counter"},
                                                                  {"request_success_total", "counter"}};
  for (const auto& [name, type] : names) {
    EXPECT_NE(text.find("# HELP kvik:" + name + " "), std::string::npos) << name;
    EXPECT_NE(text.find("# TYPE kvik:" + name + " " + type + "\n"), std::string::npos) << name;
  }
  EXPECT_NE(text.find("kvik:request_success_total{model_name=\"my \\\"model\\\"\",finished_reason=\"length\"} 0"),
            std::string::npos)
      << text;
  EXPECT_EQ(escape_label_value("a\\b\nc"), "a\\\\b\\nc");
}

TEST(ChatTemplate, FallbackRendersRolesAndGenerationPrompt) {
  const json messages = {{{"role", "system"}, {"content", "Be brief."}},
                         {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Hi"}}}}}};
  auto tok = test_models::stories_tokenizer("");
  EXPECT_EQ(render_chat(chat_format(*tok), messages, true).text, "system: Be brief.\nuser: Hi\nassistant:");
  EXPECT_EQ(render_chat(chat_format(*tok), messages, false).text, "system: Be brief.\nuser: Hi\n");
  EXPECT_EQ(chat_prompt_ids(*tok, messages, true), tok->encode("system: Be brief.\nuser: Hi\nassistant:", true, false));
}

TEST(ChatTemplate, ModelTemplateIsUsedWithBosAndSpecialTokensParsed) {
  const std::string tmpl =
      "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{{ eos_token }}{% endfor %}"
      "{% if add_generation_prompt %}[assistant]{% endif %}";
  auto tok = test_models::stories_tokenizer(tmpl);
  const json messages = {{{"role", "user"}, {"content", "Hi"}}};
  EXPECT_EQ(render_chat(chat_format(*tok), messages, true).text, "<s>[user] Hi</s>[assistant]");
  const auto ids = chat_prompt_ids(*tok, messages, true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], tok->bos_id());  // once, from the template
  EXPECT_NE(ids[1], tok->bos_id());
  EXPECT_NE(std::find(ids.begin(), ids.end(), tok->eos_id()), ids.end());  // "</s>" became the EOS id
  auto broken = test_models::stories_tokenizer("{% for m in messages %}{{ m.role }");
  EXPECT_THROW(render_chat(chat_format(*broken), messages, true), Error);
}
