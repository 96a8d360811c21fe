#include "formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/json_file.h"

namespace kvik {

namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the reference implementation's limit

bool dtype_from_name(const std::string& s, DType* t, size_t* elem) {
  if (s == "F32") return *t = DType::F32, *elem = 4, true;
  if (s == "F16") return *t = DType::F16, *elem = 2, true;
  if (s == "BF16") return *t = DType::BF16, *elem = 2, true;
  return false;
}

// A header value for an error message: scalars and flat arrays as JSON (cut at 80 bytes), anything nested by
// its type only. nlohmann's dump() recurses once per level, and a hostile header nests millions deep.
std::string brief(const nlohmann::json& j) {
  const bool flat =
      !j.is_structured() ||
      (j.is_array() && std::none_of(j.begin(), j.end(), [](const nlohmann::json& e) { return e.is_structured(); }));
  if (!flat) return j.is_array() ? fmt::format("(a nested array of {} elements)", j.size()) : "(an object)";
  std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

const char* dtype_to_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    default: fail("safetensors: dtype {} cannot be written", dtype_name(t));
  }
}

}  // namespace

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto file = std::make_unique<MmapFile>(path);
  auto st = parse(file->bytes(), path);
  for (auto& [name, t] : st->tensors_) t.map = file.get();
  st->file_ = std::move(file);
  return st;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::parse(std::span<const uint8_t> bytes, const std::string& name) {
  std::unique_ptr<SafetensorsFile> st(new SafetensorsFile());
  st->path_ = name;
  if (bytes.size() < 8)
    fail("{}: {} bytes is too short for a safetensors file (8-byte header size)", name, bytes.size());
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);  // little-endian hosts only, as everywhere in kvik
  if (n > kMaxHeaderBytes || n > bytes.size() - 8)
    fail("{}: header size {} exceeds the file ({} bytes) or the {}-byte limit", name, n, bytes.size(), kMaxHeaderBytes);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<ptrdiff_t>(n));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: header is not valid JSON: {}", name, e.what());
  }
  if (!header.is_object()) fail("{}: header is not a JSON object", name);
  const uint8_t* data = bytes.data() + 8 + n;
  const size_t data_size = bytes.size() - 8 - n;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const std::string& tn = it.key();
    const nlohmann::json& e = it.value();
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      fail("{}: tensor '{}': header entry needs dtype, shape and data_offsets", name, tn);
    SafetensorsTensor t;
    t.name = tn;
    t.file = name;
    size_t elem = 0;
    if (!e["dtype"].is_string() || !dtype_from_name(e["dtype"].get<std::string>(), &t.dtype, &elem))
      fail("{}: tensor '{}': dtype {} is not supported (kvik reads F32, F16, BF16)", name, tn, brief(e["dtype"]));
    if (!e["shape"].is_array() || e["shape"].size() > 8)
      fail("{}: tensor '{}': bad shape {}", name, tn, brief(e["shape"]));
    uint64_t numel = 1;
    for (const auto& d : e["shape"]) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
        fail("{}: tensor '{}': bad dimension {}", name, tn, brief(d));
      const uint64_t v = d.get<uint64_t>();
      if (v != 0 && numel > (UINT64_MAX / 8) / v)
        fail("{}: tensor '{}': shape {} overflows", name, tn, brief(e["shape"]));
      numel *= v;
      t.shape.push_back(static_cast<int64_t>(v));
    }
    const auto& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail("{}: tensor '{}': data_offsets must be two non-negative integers", name, tn);
    const uint64_t b = off[0].get<uint64_t>(), en = off[1].get<uint64_t>();
    if (b > en || en > data_size)
      fail("{}: tensor '{}': data_offsets [{}, {}] fall outside the {} data bytes", name, tn, b, en, data_size);
    if (en - b != numel * elem)
      fail("{}: tensor '{}': {} data bytes, but shape {} of {} needs {}", name, tn, en - b, brief(e["shape"]),
           e["dtype"].get<std::string>(), numel * elem);
    t.data = data + b;
    t.nbytes = static_cast<size_t>(en - b);
    st->tensors_.emplace(tn, std::move(t));
  }
  return st;
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::unique_ptr<SafetensorsModel> SafetensorsModel::open_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::unique_ptr<SafetensorsModel> m(new SafetensorsModel());
  m->dir_ = dir;
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::vector<std::string> shards;
  if (fs::exists(index)) {
    const nlohmann::json j = read_json_file(index);
    if (!j.contains("weight_map") || !j["weight_map"].is_object()) fail("{}: no \"weight_map\" object", index.string());
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) fail("{}: weight_map['{}'] is not a file name", index.string(), it.key());
      const std::string f = it.value().get<std::string>();
      if (f.find('/') != std::string::npos || f.find("..") != std::string::npos)
        fail("{}: weight_map['{}'] = '{}' is not a file in the directory", index.string(), it.key(), f);
      if (std::find(shards.begin(), shards.end(), f) == shards.end()) shards.push_back(f);
    }
    for (const std::string& f : shards) {
      if (!fs::exists(fs::path(dir) / f))
        fail("{}: shard '{}' listed in {} is missing", dir, f, index.filename().string());
      m->files_.push_back(SafetensorsFile::open((fs::path(dir) / f).string()));
    }
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      const std::string f = it.value().get<std::string>();
      const size_t k = std::find(shards.begin(), shards.end(), f) - shards.begin();
      const SafetensorsTensor* t = m->files_[k]->find(it.key());
      if (!t)
        fail("{}: tensor '{}' is listed in {} but not in shard '{}'", dir, it.key(), index.filename().string(), f);
      m->index_[it.key()] = t;
    }
  } else if (fs::exists(single)) {
    m->files_.push_back(SafetensorsFile::open(single.string()));
    for (const auto& [name, t] : m->files_[0]->tensors()) m->index_[name] = &t;
  } else {
    fail("{}: neither model.safetensors nor model.safetensors.index.json is in this directory", dir);
  }
  return m;
}

const SafetensorsTensor* SafetensorsModel::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

std::vector<const SafetensorsTensor*> SafetensorsModel::all() const {
  std::vector<const SafetensorsTensor*> v;
  for (const auto& [n, t] : index_) v.push_back(t);
  return v;
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsWriteTensor>& tensors) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    header[t.name] = {
        {"dtype", dtype_to_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h += ' ';  // data starts 8-aligned
  std::ofstream out(path, std::ios::binary);
  if (!out) fail("{}: cannot create", path);
  const uint64_t n = h.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const auto& t : tensors)
    out.write(reinterpret_cast<const char*>(t.data.data()), static_cast<std::streamsize>(t.data.size()));
  if (!out) fail("{}: write failed", path);
}

}  // namespace kvik
