#include "server/dp_metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <utility>
#include <vector>

namespace kvik::server {

namespace {

// `name{labels} value` or `name value` with replica="i" as the first label.
std::string with_replica_label(const std::string& sample, const std::string& replica) {
  const size_t brace = sample.find('{'), space = std::min(sample.find(' '), sample.size());
  const std::string label = fmt::format("replica=\"{}\"", replica);
  if (brace != std::string::npos && brace < space) {
    const bool empty = brace + 1 < sample.size() && sample[brace + 1] == '}';
    return sample.substr(0, brace + 1) + label + (empty ? "" : ",") + sample.substr(brace + 1);
  }
  return sample.substr(0, space) + "{" + label + "}" + sample.substr(space);
}

// Whether a sample named `name` belongs to the family `family` (a histogram's _bucket, _sum and _count do).
bool in_family(const std::string& name, const std::string& family) {
  if (family.empty() || name.rfind(family, 0) != 0) return false;
  const std::string suffix = name.substr(family.size());
  return suffix.empty() || suffix == "_bucket" || suffix == "_sum" || suffix == "_count";
}

std::string word_after(const std::string& line, size_t at) { return line.substr(at, line.find(' ', at) - at); }

// The totals of one family over the replicas: per sample key (name and labels, without the replica), the sum of the
// replicas' values, or their mean for a gauge that is a fraction (a usage, a ratio); none for an info gauge, whose
// value is only a marker.
struct Totals {
  enum class Kind { kSum, kMean, kNone };
  Kind kind = Kind::kSum;
  std::vector<std::string> keys;  // first-seen order
  std::map<std::string, std::pair<double, int>> values;

  static Kind kind_of(const std::string& family, const std::string& type_line) {
    if (family.ends_with("_info")) return Kind::kNone;
    const bool gauge = type_line.find(" gauge") != std::string::npos;
    for (const char* frac : {"perc", "ratio", "fraction", "usage"})
      if (gauge && family.find(frac) != std::string::npos) return Kind::kMean;
    return Kind::kSum;
  }
  void add(const std::string& sample) {
    const size_t space = sample.rfind(' ');
    if (space == std::string::npos) return;
    char* end = nullptr;
    const double v = std::strtod(sample.c_str() + space + 1, &end);
    if (end == sample.c_str() + space + 1) return;  // no number: nothing to add
    const std::string key = sample.substr(0, space);
    auto [it, added] = values.try_emplace(key, 0.0, 0);
    if (added) keys.push_back(key);
    it->second.first += v, it->second.second += 1;
  }
  // `name{labels}` as `name{replica="all",labels}`, with the total.
  std::string text() const {
    std::string out;
    if (kind == Kind::kNone) return out;
    for (const std::string& key : keys) {
      const auto& [sum, n] = values.at(key);
      out += with_replica_label(key + " " + fmt::format("{}", kind == Kind::kMean ? sum / n : sum), "all") + "\n";
    }
    return out;
  }
};

}  // namespace

std::string merge_replica_metrics(const std::vector<std::string>& texts) {
  struct Family {
    std::string help, type, samples;
    Totals totals;
  };
  std::vector<std::string> order;
  std::map<std::string, Family> families;
  auto family = [&](const std::string& name) -> Family& {
    auto [it, added] = families.try_emplace(name);
    if (added) order.push_back(name);
    return it->second;
  };
  for (size_t i = 0; i < texts.size(); ++i) {
    std::string current;
    size_t start = 0;
    while (start < texts[i].size()) {
      size_t end = texts[i].find('\n', start);
      if (end == std::string::npos) end = texts[i].size();
      const std::string line = texts[i].substr(start, end - start);
      start = end + 1;
      if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
        current = word_after(line, 7);
        Family& f = family(current);
        (line[2] == 'H' ? f.help : f.type) = line + "\n";
      } else if (!line.empty() && line[0] != '#') {
        const std::string name = line.substr(0, line.find_first_of("{ "));
        Family& f = family(in_family(name, current) ? current : name);
        f.samples += with_replica_label(line, std::to_string(i)) + "\n";
        f.totals.add(line);
      }
    }
  }
  std::string out;
  for (const std::string& name : order) {
    Family& f = families[name];
    f.totals.kind = Totals::kind_of(name, f.type);
    out += f.help + f.type + f.samples + f.totals.text();
  }
  return out;
}

}  // namespace kvik::server
