// Communicator over MPI (OpenMPI from Debian's libopenmpi-dev): the only file that includes mpi.h.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "dist/communicator.h"

namespace kvik::dist {

namespace {

// Messages above 1 GiB go in pieces: MPI counts are int.
constexpr int64_t kMaxChunk = int64_t{1} << 30;

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, bool owns) : comm_(comm), owns_(owns) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    wait_sends();
    if (owns_) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce_sum(float* x, int64_t n) override {
    for (int64_t i = 0; i < n; i += kMaxChunk / 4)
      MPI_Allreduce(MPI_IN_PLACE, x + i, static_cast<int>(std::min(n - i, kMaxChunk / 4)), MPI_FLOAT, MPI_SUM, comm_);
  }
  void all_reduce_min(int64_t* x, int64_t n) override {
    MPI_Allreduce(MPI_IN_PLACE, x, static_cast<int>(n), MPI_INT64_T, MPI_MIN, comm_);
  }
  void all_gather(const int64_t* in, int64_t n, int64_t* out) override {
    MPI_Allgather(in, static_cast<int>(n), MPI_INT64_T, out, static_cast<int>(n), MPI_INT64_T, comm_);
  }
  void gather(const float* in, int64_t n, float* out, int root) override {
    MPI_Gather(in, static_cast<int>(n), MPI_FLOAT, out, static_cast<int>(n), MPI_FLOAT, root, comm_);
  }
  void broadcast(void* data, int64_t bytes, int root) override {
    auto* p = static_cast<char*>(data);
    for (int64_t i = 0; i < bytes; i += kMaxChunk)
      MPI_Bcast(p + i, static_cast<int>(std::min(bytes - i, kMaxChunk)), MPI_BYTE, root, comm_);
  }
  void broadcast_idle(void* data, int64_t bytes, int root) override {
    MPI_Request r;
    MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_, &r);
    // Spin ~0.2 ms (a busy server's next step is that close), then sleep 20 µs more per poll, up to 1 ms.
    const auto start = std::chrono::steady_clock::now();
    auto nap = std::chrono::microseconds(0);
    for (int done = 0;;) {
      MPI_Test(&r, &done, MPI_STATUS_IGNORE);
      if (done) return;
      if (std::chrono::steady_clock::now() - start < std::chrono::microseconds(200)) continue;
      nap = std::min(nap + std::chrono::microseconds(20), std::chrono::microseconds(1000));
      std::this_thread::sleep_for(nap);
    }
  }
  void isend(const void* data, int64_t bytes, int peer, int tag) override {
    const auto* p = static_cast<const char*>(data);
    for (int64_t i = 0; i < bytes; i += kMaxChunk) {
      MPI_Request r;
      MPI_Isend(p + i, static_cast<int>(std::min(bytes - i, kMaxChunk)), MPI_BYTE, peer, tag, comm_, &r);
      pending_.push_back(r);
    }
  }
  void wait_sends() override {
    if (pending_.empty()) return;
    MPI_Waitall(static_cast<int>(pending_.size()), pending_.data(), MPI_STATUSES_IGNORE);
    pending_.clear();
  }
  void recv(void* data, int64_t bytes, int peer, int tag) override {
    auto* p = static_cast<char*>(data);
    for (int64_t i = 0; i < bytes; i += kMaxChunk)
      MPI_Recv(p + i, static_cast<int>(std::min(bytes - i, kMaxChunk)), MPI_BYTE, peer, tag, comm_, MPI_STATUS_IGNORE);
  }
  void barrier() override { MPI_Barrier(comm_); }
  [[noreturn]] void abort(const std::string& message) override {
    int world_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    std::fprintf(stderr, "kvik: rank %d: %s; ending every rank of the job\n", world_rank, message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm sub;
    MPI_Comm_split(comm_, color, key, &sub);
    return std::make_unique<MpiCommunicator>(sub, true);
  }

 private:
  MPI_Comm comm_;
  bool owns_;
  int rank_ = 0, size_ = 1;
  std::vector<MPI_Request> pending_;
};

// MPI_COMM_WORLD for the life of the process: MPI_Finalize when the last owner (the model, the worker) lets go.
class MpiWorld final {
 public:
  static std::shared_ptr<Communicator> get() {
    static std::mutex mu;
    static std::shared_ptr<Communicator> world;
    std::lock_guard<std::mutex> lock(mu);
    if (!world) {
      int provided = 0;
      // The engine thread (not main) steps the model under `kvik serve`: one MPI call at a time, from any thread.
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
      if (provided < MPI_THREAD_SERIALIZED) fail("MPI does not support MPI_THREAD_SERIALIZED (got level {})", provided);
      world = std::shared_ptr<Communicator>(new MpiCommunicator(MPI_COMM_WORLD, false), [](Communicator* c) {
        delete c;
        MPI_Finalize();
      });
    }
    return world;
  }
};

}  // namespace

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

std::shared_ptr<Communicator> world() {
  if (!launched_by_mpirun()) {
    static std::shared_ptr<Communicator> local = std::make_shared<LocalCommunicator>();
    return local;
  }
  return MpiWorld::get();
}

void LocalCommunicator::all_gather(const int64_t* in, int64_t n, int64_t* out) { std::copy_n(in, n, out); }

void LocalCommunicator::gather(const float* in, int64_t n, float* out, int) { std::copy_n(in, n, out); }

void LocalCommunicator::isend(const void*, int64_t, int peer, int) {
  fail("internal: send to rank {} in a one-process job", peer);
}

void LocalCommunicator::recv(void*, int64_t, int peer, int) {
  fail("internal: receive from rank {} in a one-process job", peer);
}

void LocalCommunicator::abort(const std::string& message) {
  std::fprintf(stderr, "kvik: %s\n", message.c_str());
  std::_Exit(1);
}

}  // namespace kvik::dist
