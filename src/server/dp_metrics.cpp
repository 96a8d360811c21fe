#include "server/dp_metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace kvik::server {

namespace {

// `name{labels} value` or `name value` with replica="i" as the first label.
std::string with_replica_label(const std::string& sample, size_t replica) {
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

}  // namespace

std::string merge_replica_metrics(const std::vector<std::string>& texts) {
  struct Family {
    std::string help, type, samples;
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
        family(in_family(name, current) ? current : name).samples += with_replica_label(line, i) + "\n";
      }
    }
  }
  std::string out;
  for (const std::string& name : order) {
    const Family& f = families[name];
    out += f.help + f.type + f.samples;
  }
  return out;
}

}  // namespace kvik::server
