#include "model/quantize_model.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <span>

#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "model/hf_layout.h"
#include "model/quantize_input.h"
#include "tensor/quantize.h"

namespace kvik {
namespace {

constexpr uint32_t kQuantizationVersion = 2;      // GGML_QNT_VERSION
constexpr size_t kSlabFloats = size_t{16} << 20;  // 64 MiB of floats per slab
constexpr size_t kCopyPiece = size_t{64} << 20;

bool is_quantized(DType t) { return t != DType::F32 && t != DType::F16 && t != DType::BF16; }

void check_entry(const QuantizeInput& in, const QuantizePlanEntry& e) {
  const RecipeTensor& t = e.tensor;
  if (e.type.to == t.from) return;
  if (is_quantized(t.from))
    fail(
        "{}: tensor '{}' is already {}; kvik quantize reads F32, F16 and BF16 weights (requantizing compounds the "
        "error; llama-quantize refuses it too without --allow-requantize)",
        in.path(), t.name, dtype_name(t.from));
  if (!can_quantize(e.type.to))
    fail("{}: tensor '{}': kvik cannot write {} tensors", in.path(), t.name, dtype_name(e.type.to));
  if (!row_bytes(e.type.to, t.shape[0]))
    fail("{}: tensor '{}' has rows of {} elements, which {} blocks of {} do not divide", in.path(), t.name, t.shape[0],
         dtype_name(e.type.to), traits(e.type.to).block_size);
}

std::vector<QuantizePlanEntry> plan_for(const QuantizeInput& in, const QuantizeOptions& o) {
  std::vector<RecipeTensor> tensors;
  for (const auto& t : in.tensors()) tensors.push_back({t.name, t.dtype, t.shape});
  tensors = in_quantize_order(std::move(tensors));
  const auto types = quant_recipe(o.mix, in.model(), tensors, o.recipe);
  std::vector<QuantizePlanEntry> plan;
  for (size_t i = 0; i < tensors.size(); ++i) {
    plan.push_back({tensors[i], types[i]});
    check_entry(in, plan.back());
  }
  return plan;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return fmt::format("{:.1f} {}", b, units[u]);
}

size_t element_alignment(DType t) { return t == DType::F32 ? 4 : t == DType::F16 || t == DType::BF16 ? 2 : 1; }

struct Slabs {
  std::vector<uint8_t> gathered;  // permuted (or misaligned) input rows, in output order
  std::vector<float> f32;
  std::vector<uint8_t> out;
};

// Rows [r0, r0 + n) of `in` in output order: a pointer into the mapping when they lie there in order and aligned,
// else gathered into buf.gathered (llama q/k rows from a Hugging Face tensor, regrouped per head).
const uint8_t* rows_at(const QuantizeInputTensor& in, int64_t r0, int64_t n, size_t rb, Slabs& buf) {
  const uint8_t* src = in.data + static_cast<size_t>(r0) * rb;
  if (in.permute_head_dim == 0 && reinterpret_cast<uintptr_t>(src) % element_alignment(in.stored) == 0) return src;
  buf.gathered.resize(static_cast<size_t>(n) * rb);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t from = in.permute_head_dim ? hf_row_of_gguf_row(r0 + r, in.permute_head_dim) : r0 + r;
    std::memcpy(&buf.gathered[static_cast<size_t>(r) * rb], in.data + static_cast<size_t>(from) * rb, rb);
  }
  return buf.gathered.data();
}

// One tensor's bytes in the new type, a slab of rows at a time; the input pages behind the cursor are released.
void stream_tensor(const QuantizeInputTensor& in, DType to, const GgufWriter::Sink& sink, Slabs& buf) {
  if (to == in.stored && in.permute_head_dim == 0) {
    for (size_t off = 0; off < in.nbytes; off += kCopyPiece) {
      const size_t n = std::min(kCopyPiece, in.nbytes - off);
      sink({in.data + off, n});
      if (in.map) in.map->release(in.data + off, n);
    }
    return;
  }
  // A permuted vector (a llama q/k bias) moves element by element: rows of one.
  const int64_t cols = in.permute_head_dim && in.shape.size() == 1 ? 1 : in.shape[0];
  const size_t in_rb = *row_bytes(in.stored, cols), out_rb = *row_bytes(to, cols);
  const int64_t rows = static_cast<int64_t>(in.nbytes / in_rb);
  int64_t slab = std::max<int64_t>(1, static_cast<int64_t>(kSlabFloats) / cols);
  if (in.permute_head_dim)
    slab = (slab + in.permute_head_dim - 1) / in.permute_head_dim * in.permute_head_dim;  // whole heads
  for (int64_t r0 = 0; r0 < rows; r0 += slab) {
    const int64_t nr = std::min(slab, rows - r0);
    const uint8_t* src = rows_at(in, r0, nr, in_rb, buf);
    if (to == in.stored) {
      sink({src, static_cast<size_t>(nr) * in_rb});
    } else {
      const float* f = reinterpret_cast<const float*>(src);
      if (in.stored != DType::F32) {
        buf.f32.resize(static_cast<size_t>(nr * cols));
        dequantize_rows(in.stored, src, buf.f32.data(), nr, cols);
        f = buf.f32.data();
      }
      buf.out.resize(static_cast<size_t>(nr) * out_rb);
      quantize_rows(to, f, buf.out.data(), nr, cols);
      sink(buf.out);
    }
    if (in.map) in.map->release(in.data + static_cast<size_t>(r0) * in_rb, static_cast<size_t>(nr) * in_rb);
  }
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s;
  for (int64_t d : shape) s += (s.empty() ? "" : " x ") + std::to_string(d);
  return s;
}

}  // namespace

std::vector<QuantizePlanEntry> plan_quantize(const QuantizeOptions& o) {
  return plan_for(*QuantizeInput::open(o.input), o);
}

QuantizeStats quantize_model(const QuantizeOptions& o) {
  const auto input = QuantizeInput::open(o.input);
  const auto plan = plan_for(*input, o);
  GgufWriter w;
  input->write_metadata(w);
  w.set_u32("general.quantization_version", kQuantizationVersion);
  w.set_u32("general.file_type", o.mix.file_type);
  for (const auto& e : plan) {
    std::vector<int64_t> shape = e.tensor.shape;  // ggml writes n_dims without trailing 1s
    while (shape.size() > 1 && shape.back() == 1) shape.pop_back();
    w.add_tensor_info(e.tensor.name, e.type.to, shape);
  }
  if (o.progress)
    std::fprintf(stderr, "kvik quantize: %s -> %s as %s (general.file_type %u), %zu tensors, %d threads\n",
                 o.input.c_str(), o.output.c_str(), std::string(o.mix.name).c_str(), o.mix.file_type, plan.size(),
                 ThreadPool::global().num_threads());
  if (o.progress)
    for (const auto& e : plan)
      if (e.type.fallback)
        std::fprintf(stderr,
                     "warning: %-36s - %lld columns are not a multiple of %lld (required for %s): falling back to %s\n",
                     e.tensor.name.c_str(), static_cast<long long>(e.tensor.shape[0]),
                     static_cast<long long>(traits(e.type.wanted).block_size),
                     std::string(dtype_name(e.type.wanted)).c_str(), std::string(dtype_name(e.type.to)).c_str());
  std::map<std::string, const QuantizeInputTensor*, std::less<>> by_name;
  for (const auto& t : input->tensors()) by_name[t.name] = &t;
  QuantizeStats st;
  Slabs buf;
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  w.write_streaming(o.output, [&](size_t i, const GgufWriter::Sink& sink) {
    const QuantizeInputTensor& in = *by_name.at(plan[i].tensor.name);
    const DType to = plan[i].type.to;
    const auto t0 = Clock::now();
    size_t written = 0;
    stream_tensor(
        in, to, [&](std::span<const uint8_t> b) { written += b.size(), sink(b); }, buf);
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    st.tensors++, st.fallbacks += plan[i].type.fallback;
    st.bytes_in += in.nbytes, st.bytes_out += written;
    if (o.progress)
      std::fprintf(stderr, "[%4zu/%4zu] %-36s [%s] %s -> %s, %s -> %s, %.1f MB/s\n", i + 1, plan.size(),
                   in.name.c_str(), shape_string(in.shape).c_str(), std::string(dtype_name(in.stored)).c_str(),
                   std::string(dtype_name(to)).c_str(), human_bytes(static_cast<double>(in.nbytes)).c_str(),
                   human_bytes(static_cast<double>(written)).c_str(),
                   secs > 0 ? static_cast<double>(in.nbytes) / secs / 1e6 : 0.0);
  });
  st.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (o.progress) {
    std::fprintf(stderr, "kvik quantize: %s -> %s of tensor data in %.2f s (%.1f MB/s)\n",
                 human_bytes(static_cast<double>(st.bytes_in)).c_str(),
                 human_bytes(static_cast<double>(st.bytes_out)).c_str(), st.seconds,
                 st.seconds > 0 ? static_cast<double>(st.bytes_in) / st.seconds / 1e6 : 0.0);
    if (st.fallbacks > 0)
      std::fprintf(stderr, "kvik quantize: %lld of %lld tensors needed a fallback type (rows not a multiple of 256)\n",
                   static_cast<long long>(st.fallbacks), static_cast<long long>(st.tensors));
  }
  return st;
}

}  // namespace kvik
