// JSON Schema → GBNF (the idea of llama.cpp's json-schema-to-grammar, written for this engine).
//
// Supported: type (object, array, string, number, integer, boolean, null, or a list of them), properties
// with required (properties come in the schema's order; optional ones may be left out), enum, const,
// items with minItems/maxItems, nested objects, anyOf/oneOf (as alternatives), allOf of one schema,
// local $ref (#/$defs/…, #/definitions/…, #), string minLength/maxLength, string pattern (regex_to_gbnf.h),
// integer/number minimum/maximum/exclusiveMinimum/exclusiveMaximum (integers: exactly the range as canonical
// decimals; numbers: the range's integers, and decimals k.ddd whose whole unit interval lies inside it, no exponent),
// additionalProperties: false unless a schema is given (then only for objects without properties).
// Annotations (title, description, default, examples, …) are ignored. Any other keyword is an error that
// names it and where it is, rather than a grammar that could emit JSON the schema rejects.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvik::structured {

// Throws kvik::Error ("json_schema: at /properties/age: unsupported keyword 'minimum'").
std::string json_schema_to_gbnf(std::string_view schema_text);

// One schema as rules of a larger grammar: `start` is the expression that matches it, `rules` its rules (names
// begin with `prefix`, which keeps several schemas apart), without the primitives (ws, json-*), which
// json_primitives_gbnf() adds once. Throws like json_schema_to_gbnf.
struct SchemaRules {
  std::string start;
  std::string rules;
};
SchemaRules json_schema_rules(std::string_view schema_text, const std::string& prefix);
// `compact`: ws is at most one space (tool calls as models write them, with no room to ramble in blanks).
std::string json_primitives_gbnf(bool compact = false);

// Any JSON object (response_format json_object).
std::string json_object_gbnf();

// Exactly one of the strings (guided_choice).
std::string choice_gbnf(const std::vector<std::string>& choices);

}  // namespace kvik::structured
