// The CUDA side of ProcessGroupBraid (included by ProcessGroupBraid.cpp):
// collectives on CUDA tensors run through braid_device_* on the tensor's
// current CUDA stream, as NCCL's backend's calls are ordered on theirs, and
// their Work is complete as far as that stream is concerned. Built where
// BRAID_TORCH_CUDA is defined (PyTorch with CUDA and the CUDA runtime's
// headers: setup.py and scripts/torch-gpu.sh decide); elsewhere a CUDA
// tensor is refused with a message saying so.
#pragma once

#include <torch/extension.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <functional>
#include <vector>

#include "braid.h"

#if defined(BRAID_TORCH_CUDA)
#include <c10/core/Event.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace braid_torch {

// check throws the calling thread's last Braid error where rc is not
// BRAID_OK (ProcessGroupBraid.cpp).
void check(int rc);

#if defined(BRAID_TORCH_CUDA)
constexpr bool kCuda = true;

// streamOf returns the handle that braid_device_* takes for s: the
// legacy default stream, PyTorch's default, is handle 0, which means "no
// stream" (blocking) there, so it goes as BRAID_STREAM_LEGACY.
inline void* streamOf(const c10::cuda::CUDAStream& s) {
  cudaStream_t h = s.stream();
  return h ? static_cast<void*>(h) : BRAID_STREAM_LEGACY;
}

// DeviceWork is the Work of a call on CUDA tensors, issued on the
// current stream of their device. Like NCCL's backend's, it is complete
// for work queued on that stream after it; wait() and synchronize() make
// the stream current at the time wait for the call (which matters only
// where it is another stream), isCompleted() asks whether the GPU has run
// it, and the Future is CUDA-aware (completed at once, with the call's
// stream recorded, so that its callbacks and waiters follow the call). A
// failure of the call (a peer lost, a timeout) is returned by a later
// call of the group, as braid_device_* return them; the Work does not
// see it.
class DeviceWork : public c10d::Work {
 public:
  DeviceWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, const c10::cuda::CUDAStream& stream)
      : Work(rank, type), outputs_(std::move(outputs)), device_(stream.device()), end_(c10::DeviceType::CUDA) {
    end_.record(stream);
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                       std::vector<c10::Device>{device_});
    future_->markCompleted(c10::IValue(outputs_));  // records on the current stream: the call's
  }

  bool isCompleted() override { return end_.query(); }
  bool isSuccess() const override { return true; }

  bool wait(std::chrono::milliseconds) override {
    synchronize();
    return true;
  }

  void synchronize() override { end_.block(c10::cuda::getCurrentCUDAStream(device_.index())); }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  std::vector<at::Tensor> result() override { return outputs_; }

 private:
  std::vector<at::Tensor> outputs_;
  c10::Device device_;
  c10::Event end_;  // recorded behind the call on its stream
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// onDevice issues call(stream) on the current CUDA stream of dev, then
// post (copies out of a scratch tensor, queued on the same stream), and
// returns the call's Work. Scratch tensors may be dropped once it
// returns: the caching allocator hands their memory out again only to
// work on the same stream, which follows the call.
inline c10::intrusive_ptr<c10d::Work> onDevice(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
                                               const at::Device& dev, const std::function<int(void*)>& call,
                                               const std::function<void()>& post) {
  auto stream = c10::cuda::getCurrentCUDAStream(dev.index());
  check(call(streamOf(stream)));
  if (post) post();
  return c10::make_intrusive<DeviceWork>(rank, type, std::move(outputs), stream);
}
#else
constexpr bool kCuda = false;

inline c10::intrusive_ptr<c10d::Work> onDevice(int, c10d::OpType, std::vector<at::Tensor>, const at::Device& dev,
                                               const std::function<int(void*)>&, const std::function<void()>&) {
  TORCH_CHECK(false, "braid: this build of the backend has no CUDA support (built without PyTorch's CUDA or the "
              "CUDA runtime's headers), and the tensor is on ", dev);
}
#endif

}  // namespace braid_torch
