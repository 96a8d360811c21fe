// The JSON Schema compiler's state (internal to json_schema_to_gbnf.cpp, json_schema_converter.cpp and
// json_schema_objects.cpp): one schema document turned into GBNF rules.
//
// visit() returns a GBNF expression for the values a subschema allows, or "" when it allows none (the schema
// `false`, a contradictory allOf, an empty range): the caller leaves such a property or alternative out, and a
// required value that allows nothing makes its parent allow nothing.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/structured/json_schema_merge.h"
#include "engine/structured/json_schema_to_gbnf.h"

namespace kvik::structured {

class SchemaConverter {
 public:
  SchemaConverter(const SchemaJson& root, std::string prefix, const JsonSchemaLimits& limits);
  SchemaRules convert();

 private:
  using json = SchemaJson;

  // Infrastructure.
  [[noreturn]] static void error(const std::string& path, const std::string& what);
  void note(const std::string& path, const std::string& what);
  void charge(const std::string& path, size_t units = 1);
  std::string new_rule(const std::string& hint, const std::string& body);
  std::string reserve_rule(const std::string& hint);
  void define_rule(const std::string& name, const std::string& body);
  std::string use_format(const std::string& format);

  // Dispatch (json_schema_converter.cpp).
  std::string visit(const json& s, const std::string& path);
  std::string visit_object_schema(const json& s, const std::string& path);
  std::string ref(const json& s, const std::string& path);
  std::string ref_rule(const std::string& ref, const std::string& path);
  std::string all_of(const json& s, const std::string& path);
  std::string one_of(const json& s, const std::string& key, const std::string& path);
  bool provably_disjoint(const json& alternatives);
  std::string enumeration(const json& s, const std::string& path);
  std::string typed(const json& s, const std::string& path);
  std::vector<std::string> types_of(const json& s, const std::string& path);
  void note_unenforced(const json& s, const std::string& path);
  std::string string_schema(const json& s, const std::string& path);
  std::string number_schema(const json& s, const std::string& path, bool integer);
  std::string array_schema(const json& s, const std::string& path);
  int64_t count_keyword(const json& s, const char* key, const std::string& path, int64_t dflt, bool is_max);

  // Objects (json_schema_objects.cpp).
  struct ObjectPlan;
  std::string object_schema(const json& s, const std::string& path);
  ObjectPlan plan_object(const json& s, const std::string& path);
  void plan_declared(const json& s, const std::string& path, ObjectPlan& plan);
  void plan_extras(const json& s, const std::string& path, ObjectPlan& plan);
  void plan_dependencies(const json& s, const std::string& path, ObjectPlan& plan);
  std::string extra_key(const json& s, const std::string& path, const ObjectPlan& plan);
  std::string build_object(const ObjectPlan& plan, const std::string& path);
  std::string plain_object(const ObjectPlan& plan, const std::string& path);
  std::string object_state(const ObjectPlan& plan, const std::string& path, size_t i, int64_t count,
                           std::vector<int> pending, std::vector<int> forbidden,
                           std::map<std::string, std::string>& memo);
  std::string object_extras(const ObjectPlan& plan, const std::string& path, int64_t count);

  const json& root_;
  std::string prefix_;
  JsonSchemaLimits limits_;
  std::vector<std::string> rules_;
  size_t grammar_bytes_ = 0;
  size_t work_ = 0;
  int depth_ = 0;
  std::map<std::string, std::string> refs_;     // $ref → rule
  std::map<std::string, std::string> merged_;   // a schema with $ref and siblings (its text) → rule
  std::map<std::string, std::string> formats_;  // format → its start rule
  std::vector<std::string> not_enforced_;
};

}  // namespace kvik::structured
