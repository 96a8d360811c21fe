// JSON Schema → GBNF (the idea of llama.cpp's json-schema-to-grammar, written for this engine).
//
// Every valid schema compiles. What a grammar can express is enforced: type (and type lists, OpenAPI `nullable`),
// const/enum of any JSON, properties in the schema's order with required, additionalProperties (bool or schema;
// absent = closed when properties or patternProperties are given, as llama.cpp and xgrammar do), patternProperties,
// propertyNames, minProperties/maxProperties, dependentRequired, prefixItems and draft-4 tuple items with
// additionalItems, items, minItems/maxItems, minLength/maxLength, pattern (ECMA-262 search semantics, intersected
// with the lengths where exact: json_schema_pattern.h), format (json_schema_formats.h), integer and number bounds of
// any size (json_schema_numbers.h), anyOf, oneOf (exact when its alternatives are provably disjoint, else as anyOf),
// allOf and keywords beside $ref / anyOf merged (json_schema_merge.h), $ref to any local JSON pointer, recursion
// included. The rest (multipleOf, uniqueItems, contains, not, if/then/else, dependentSchemas, contentEncoding,
// contentMediaType, unknown keywords, …) is accepted and not enforced: the grammar is looser there and still accepts
// every valid instance; each such place is reported in SchemaRules::not_enforced.
//
// Outputs are compact canonical JSON: properties in order, numbers without exponent when bounded, strings with the
// escapes JSON requires. A schema no value satisfies (false, contradictory allOf, an empty range) is an error only
// where a value is required; an optional property or an alternative that allows nothing is left out.
//
// Bounds, each named in its error with how far it was exceeded where that is known. Before the document is built:
// the schema text, values nested deeper than 256, objects of more than 1000 members (an ordered object costs n² to
// build). As the work goes (JsonSchemaLimits): the nesting of subschemas being compiled, the work (subschemas, merges,
// rules and object states: a deterministic stand-in for time: about 0.25 s of CPU to reach the limit on a 2.7 MB
// schema, parse included) and the grammar's size.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace kvik::structured {

struct JsonSchemaLimits {
  size_t max_schema_bytes = size_t{1} << 20;     // the schema's JSON text
  size_t max_grammar_bytes = size_t{256} << 10;  // the GBNF of one schema
  size_t max_work = 100000;                      // subschemas visited + merges + rules + object states
  int max_depth = 64;                            // subschemas being compiled inside one another
};

// Throws kvik::Error ("json_schema: at /properties/age: ...", or naming the bound that was exceeded and by how
// much: "json_schema: the grammar has 3727379 bytes, more than the limit of 262144 (14.2x)").
std::string json_schema_to_gbnf(std::string_view schema_text, const JsonSchemaLimits& limits = {});

// One schema as rules of a larger grammar: `start` is the expression that matches it, `rules` its rules (names
// begin with `prefix`, which keeps several schemas apart), without the primitives (ws, json-*), which
// json_primitives_gbnf() adds once. Throws like json_schema_to_gbnf.
struct SchemaRules {
  std::string start;
  std::string rules;
  std::vector<std::string> not_enforced;  // "at /properties/n: 'multipleOf' is not enforced", one per place
};
SchemaRules json_schema_rules(std::string_view schema_text, const std::string& prefix,
                              const JsonSchemaLimits& limits = {});
// `compact`: ws is at most one space (tool calls as models write them, with no room to ramble in blanks).
std::string json_primitives_gbnf(bool compact = false);

// Any JSON object (response_format json_object).
std::string json_object_gbnf();

// Exactly one of the strings (guided_choice).
std::string choice_gbnf(const std::vector<std::string>& choices);

}  // namespace kvik::structured
