// allOf for the JSON Schema compiler: two schemas merged into one whose grammar accepts every instance valid
// against both (exactly, where the rules below say so; otherwise a looser schema, with a note saying what is not
// enforced). Local $ref: JSON pointers into the root document.
//
// Merge rules (left operand a, right b):
//   type: the intersection of the two lists ("integer" within "number"); empty → the schema `false`.
//   enum / const: the values in both; none → `false`.
//   properties: a's in order, then b's new ones (llguidance's order); a property in both gets allOf [pa, pb].
//   required: the union. additionalProperties, propertyNames, items (a schema), additionalItems: allOf of the two.
//     Loosened: a's additionalProperties is not applied to properties only b declares (and the other way round),
//     so two closed objects merge into the closed object with both sets of properties (what zod's intersections
//     mean), where the exact conjunction would allow neither set.
//   prefixItems / tuple items: position by position allOf; the longer tuple's tail as it is.
//   minimum, minLength, minItems, minProperties, exclusiveMinimum: the larger; the maxima: the smaller.
//   pattern, format, multipleOf: a's when both differ (b's noted as not enforced).
//   anyOf / oneOf in both: the pairwise allOf of their alternatives (at most 64, else a's with a note).
//   allOf in both: concatenated. dependentRequired: the union per property. Anything else: a's.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvik::structured {

using SchemaJson = nlohmann::ordered_json;

// Keywords that only annotate (or hold definitions): never constraints, never noted as unenforced.
bool is_annotation_keyword(std::string_view key);

// The schema s without its annotations; true when nothing else is left.
bool only_annotations(const SchemaJson& s);

// a ∧ b as one schema; `notes` receives what is loosened ("pattern of the second allOf member").
SchemaJson merge_schemas(const SchemaJson& a, const SchemaJson& b, std::vector<std::string>& notes);

// The value a local JSON pointer reference ("#", "#/$defs/x", "#/properties/a~1b/items", percent-encoded or not,
// also "BASE#/..." where BASE is the root's $id, and "#name" for an $anchor) points to in `root`; nullptr when it
// points nowhere or is not local.
const SchemaJson* resolve_json_pointer(const SchemaJson& root, const std::string& ref);

}  // namespace kvik::structured
