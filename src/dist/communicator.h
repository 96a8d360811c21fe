// The collective and point-to-point operations tensor and pipeline parallelism need (vLLM's
// distributed/communication_op.py over a GroupCoordinator): the model's layers call all_reduce_sum() after their
// row-parallel matmuls and send()/recv() between pipeline stages through this interface only. MPI now
// (mpi_communicator.cpp, the only file that includes mpi.h), NCCL later.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace kvik::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // x [n] ← Σ over the group's ranks of x [n] (every rank gets the same sum).
  virtual void all_reduce_sum(float* x, int64_t n) = 0;
  // x [n] ← the element-wise minimum over the group (start-up agreement on the KV block count).
  virtual void all_reduce_min(int64_t* x, int64_t n) = 0;
  // out [size · n] ← every rank's in [n], in rank order (the start-up memory table).
  virtual void all_gather(const int64_t* in, int64_t n, int64_t* out) = 0;
  // out [size · n] on `root` ← every rank's in [n], in rank order (the vocab-parallel LM head's logits).
  virtual void gather(const float* in, int64_t n, float* out, int root) = 0;
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;
  // A broadcast that may be long in coming (an idle server's next step): polls, sleeping between polls, where
  // broadcast() would spin a core at 100% (MPI's busy wait) for as long as the job is idle.
  virtual void broadcast_idle(void* data, int64_t bytes, int root) { broadcast(data, bytes, root); }
  // Point to point. isend() returns at once; `data` must stay valid until wait_sends().
  virtual void isend(const void* data, int64_t bytes, int peer, int tag) = 0;
  virtual void wait_sends() = 0;
  virtual void recv(void* data, int64_t bytes, int peer, int tag) = 0;
  virtual void barrier() = 0;
  // Ends every rank of the job with `message` (a fault the job cannot go on after); does not return.
  [[noreturn]] virtual void abort(const std::string& message) = 0;
  // The sub-group of the ranks passing the same `color`, ordered by `key` (MPI_Comm_split).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
};

// One process: every collective is the identity.
class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(float*, int64_t) override {}
  void all_reduce_min(int64_t*, int64_t) override {}
  void all_gather(const int64_t* in, int64_t n, int64_t* out) override;
  void gather(const float* in, int64_t n, float* out, int) override;
  void broadcast(void*, int64_t, int) override {}
  void isend(const void*, int64_t, int peer, int) override;
  void wait_sends() override {}
  void recv(void*, int64_t, int peer, int) override;
  void barrier() override {}
  [[noreturn]] void abort(const std::string& message) override;
  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<LocalCommunicator>(); }
};

// True when this process was started by mpirun (OpenMPI's or PMIx's environment is set).
bool launched_by_mpirun();
// The job's world: MPI's COMM_WORLD (MPI_Init_thread on the first call) when launched_by_mpirun(), else a
// LocalCommunicator. The same object on every call; MPI_Finalize runs when the last owner lets go.
std::shared_ptr<Communicator> world();

}  // namespace kvik::dist
