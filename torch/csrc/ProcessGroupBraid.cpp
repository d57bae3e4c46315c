// ProcessGroupBraid: a c10d process group whose collectives run on Braid
// through its C API (braid.h): a c10d::ProcessGroup on PyTorch 1.13, a
// c10d::Backend (which 2.x's ProcessGroup holds, one per device type) on
// 2.x, chosen by TORCH_VERSION_MAJOR. The 1.13 build (Debian's, CPU only)
// is tested by scripts/torch-smoke.sh; the 2.x one, with CUDA tensors, is
// built and tested on a GPU machine by scripts/torch-gpu.sh.
//
// CUDA tensors (a build with BRAID_TORCH_CUDA, device.h) go through
// braid_device_* on the tensor's current CUDA stream, as NCCL's calls do:
// a call returns once queued, and its Work is complete for that stream.
// Point-to-point calls on CUDA tensors go through braid_device_send and
// braid_device_recv, whose send completes once the peer has posted the
// receive, as NCCL's do (a send and a receive between two ranks that both
// send first wait for each other); all-to-alls of uneven blocks through
// n-1 rounds of braid_device_sendrecv. The first call on CUDA tensors must
// be a collective, which sets up the GPU path on every rank.
//
// Every collective on CPU tensors is issued at once, from the caller's thread, so that
// all ranks issue in the caller's order: a small one runs there blocking,
// a larger one starts with one of Braid's non-blocking calls and runs in
// the background while the caller goes on. The thread that waits for it
// first completes it (braid_wait runs a call that has not begun yet on
// the waiting thread): Work::wait() on the caller's thread, or the group's
// completion thread for a call whose Future was asked for, which
// DistributedDataParallel's communication hooks wait on.
#include <torch/extension.h>

#include <pybind11/chrono.h>
#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "braid.h"
#include "device.h"

namespace braid_torch {

// Base is what a backend derives from: 2.x's ProcessGroup dispatches to a
// Backend per device type, 1.13's ProcessGroup is the backend itself.
#if TORCH_VERSION_MAJOR >= 2
using Base = c10d::Backend;
#else
using Base = c10d::ProcessGroup;
#endif

using c10d::OpType;
using c10d::ReduceOp;
using c10d::Work;

// error is the exception of the calling thread's last failed Braid call.
static std::runtime_error error() {
  const braid_error* e = braid_last_error();
  std::ostringstream s;
  s << e->message << " [braid " << braid_error_string(e->kind);
  if (e->peer >= 0) s << ", peer rank " << e->peer;
  s << "]";
  return std::runtime_error(s.str());
}

void check(int rc) {
  if (rc != BRAID_OK) throw error();
}

// BRAID_CALL runs Braid's collective name blocking, or non-blocking when
// r (the request to fill in) is not NULL.
#define BRAID_CALL(name, ...) (r ? braid_i##name(__VA_ARGS__, r) : braid_##name(__VA_ARGS__))

// eagerMax is the largest call, in bytes, that runs blocking on the
// caller's thread (ProcessGroupBraid::issue): BRAID_TORCH_EAGER_MAX, else
// 64 KiB. A larger call that its caller waits for at once costs about the
// same (it then runs on the caller's thread too: 1.17× the blocking call's
// time at 64 KiB, 1.03× at 256 KiB; docs/PERFORMANCE.md, issue 20) and may
// overlap the caller's work when it does not.
static size_t eagerMax() {
  const char* v = std::getenv("BRAID_TORCH_EAGER_MAX");
  if (!v || !*v) return 64 << 10;
  char* end;
  long long n = std::strtoll(v, &end, 10);
  TORCH_CHECK(*end == 0, "braid: BRAID_TORCH_EAGER_MAX=", v, " is not a number of bytes");
  return n < 0 ? 0 : size_t(n);
}

static braid_dtype dtypeOf(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return BRAID_FLOAT32;
    case at::kDouble: return BRAID_FLOAT64;
    case at::kHalf: return BRAID_FLOAT16;
    case at::kBFloat16: return BRAID_BFLOAT16;
    case at::kChar: return BRAID_INT8;
    case at::kByte: return BRAID_UINT8;
    case at::kBool: return BRAID_UINT8;
    case at::kInt: return BRAID_INT32;
    case at::kLong: return BRAID_INT64;
    default:
      TORCH_CHECK(false, "braid: tensors of ", t.scalar_type(),
                  " are not supported (float32, float64, float16, bfloat16, int8, uint8, bool, int32, int64 are)");
  }
}

// opOf maps a c10d ReduceOp on t's dtype to Braid's. Booleans are bytes of
// 0 and 1: their sum is "any" (max) and their product "all" (min), as
// PyTorch's NCCL backend treats them.
static braid_op opOf(const ReduceOp& op, const at::Tensor& t) {
  bool b = t.scalar_type() == at::kBool;
  switch (op.op_) {
    case ReduceOp::SUM: return b ? BRAID_MAX : BRAID_SUM;
    case ReduceOp::PRODUCT: return b ? BRAID_MIN : BRAID_PROD;
    case ReduceOp::MIN: return BRAID_MIN;
    case ReduceOp::MAX: return BRAID_MAX;
    case ReduceOp::AVG: return BRAID_AVG;
    case ReduceOp::BAND: return BRAID_BAND;
    case ReduceOp::BOR: return BRAID_BOR;
    case ReduceOp::BXOR: return BRAID_BXOR;
    default:
      TORCH_CHECK(false, "braid: reduce op ", int(op.op_), " (PREMUL_SUM) is not supported");
  }
}

// checkTensor makes sure t is a dense CPU tensor, or CUDA tensor where
// the build has CUDA, that Braid can read in place.
static void checkTensor(const at::Tensor& t) {
  if (kCuda) {
    TORCH_CHECK(t.device().is_cpu() || t.device().is_cuda(), "braid: only CPU and CUDA tensors are supported, got one on ",
                t.device());
  } else {
    TORCH_CHECK(t.device().is_cpu(), "braid: only CPU tensors are supported by this build (it has no CUDA support), got one on ",
                t.device());
  }
  TORCH_CHECK(t.layout() == c10::kStrided, "braid: only dense tensors are supported");
  TORCH_CHECK(t.is_contiguous(), "braid: the tensor must be contiguous");
  dtypeOf(t);
}

// sameDevice makes sure every tensor of a call is on t's device.
static void sameDevice(const at::Tensor& t, const std::vector<at::Tensor>& ts, const char* what) {
  for (auto& u : ts)
    TORCH_CHECK(u.device() == t.device(), "braid: ", what, "'s tensors are on ", t.device(), " and ", u.device());
}

static at::Tensor single(std::vector<at::Tensor>& ts, const char* what) {
  TORCH_CHECK(ts.size() == 1, "braid: ", what, " takes one tensor per rank, got ", ts.size());
  checkTensor(ts[0]);
  return ts[0];
}

// A Call is one issued Braid call: its requests, what must follow them
// (copying a gathered vector into the caller's list of tensors), and every
// tensor that Braid reads or writes meanwhile, which the Call keeps alive
// until the requests end (the caller may drop its own references, and its
// Work, at once). Whoever
// waits for it first completes it, on its own thread: a Braid request that
// has not begun yet then runs on that thread (braid_wait does that), so a
// call that its caller waits for costs what the blocking call costs.
class Call {
 public:
  Call(std::vector<braid_request> reqs, std::function<void()> post, std::vector<at::Tensor> tensors)
      : reqs_(std::move(reqs)), post_(std::move(post)), tensors_(std::move(tensors)) {}

  // finish waits for the requests and runs post, once; a concurrent caller
  // waits for the first. It returns the call's failure, if any.
  std::exception_ptr finish() {
    std::lock_guard<std::mutex> g(mu_);
    if (done_) return ex_;
    for (auto& r : reqs_) {
      if (r && braid_wait(r) != BRAID_OK && !ex_) ex_ = std::make_exception_ptr(error());
      r = 0;
    }
    return settle();
  }

  // poll completes the call if its requests have all ended, without
  // waiting, and reports whether it is complete.
  bool poll() {
    std::unique_lock<std::mutex> l(mu_, std::try_to_lock);
    if (!l.owns_lock()) return false;  // someone is finishing it
    if (done_) return true;
    for (auto& r : reqs_) {
      if (!r) continue;
      int ended = 0;
      int rc = braid_test(r, &ended);
      if (!ended) {
        if (rc != BRAID_OK && !ex_) ex_ = std::make_exception_ptr(error());  // a bad handle: a bug
        if (rc != BRAID_OK) r = 0;
        continue;
      }
      if (rc != BRAID_OK && !ex_) ex_ = std::make_exception_ptr(error());
      r = 0;
    }
    for (auto r : reqs_)
      if (r) return false;
    settle();
    return true;
  }

  bool done() {
    std::lock_guard<std::mutex> g(mu_);
    return done_;
  }

 private:
  // settle runs post after a successful call; mu_ is held and every
  // request has ended.
  std::exception_ptr settle() {
    if (!ex_ && post_) {
      try {
        post_();
      } catch (...) {
        ex_ = std::current_exception();
      }
    }
    post_ = nullptr;  // drop the tensors it holds
    tensors_.clear();
    done_ = true;
    return ex_;
  }

  std::mutex mu_;
  std::vector<braid_request> reqs_;  // 0 once ended
  std::function<void()> post_;
  std::vector<at::Tensor> tensors_;  // cleared once the requests ended
  bool done_ = false;
  std::exception_ptr ex_;
};

// A Completer is the process group's completion thread. It finishes the
// calls whose Future someone holds (DistributedDataParallel waits on
// futures, which need a thread to complete them) and the calls whose Work
// was dropped unfinished, in the order they reach it.
class Completer {
 public:
  Completer() : thread_([this] { loop(); }) {}

  // post queues f for the thread, or runs it here once the thread has
  // stopped.
  void post(std::function<void()> f) {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (!stop_) {
        queue_.push_back(std::move(f));
        cv_.notify_one();
        return;
      }
    }
    f();
  }

  // stop runs what is queued and ends the thread.
  void stop() {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (stop_) return;
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  ~Completer() { stop(); }

 private:
  void loop() {
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        f = std::move(queue_.front());
        queue_.pop_front();
      }
      f();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

// BraidWork is a call's Work: wait() completes the call on the waiting
// thread; getFuture() hands it to the completion thread, which completes
// the Future; isCompleted() polls. A Work dropped unfinished hands its call
// to the completion thread, so that its requests end and post runs.
class BraidWork : public Work {
 public:
  BraidWork(int rank, OpType type, std::vector<at::Tensor> outputs, std::shared_ptr<Call> call,
            std::shared_ptr<Completer> completer)
      : Work(rank, type),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))),
        call_(std::move(call)),
        completer_(std::move(completer)) {}

  ~BraidWork() override {
    if (call_ && !call_->done()) {
      auto call = call_;
      completer_->post([call] { call->finish(); });
    }
  }

  // completeNow completes a call that has already run (the blocking path).
  void completeNow(std::exception_ptr ex) { settle(ex); }

  bool isCompleted() override {
    if (call_ && call_->poll()) settle(call_->finish());
    return Work::isCompleted();
  }

  bool wait(std::chrono::milliseconds timeout) override {
    if (timeout == kNoTimeout) {
      if (call_) settle(call_->finish());
    } else {
      handOff();  // Work::wait below waits until the thread completes it
    }
    return Work::wait(timeout);
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    handOff();
    return future_;
  }

  std::vector<at::Tensor> result() override { return outputs_; }

 private:
  // handOff queues the call for the completion thread, once.
  void handOff() {
    if (!call_ || handed_.exchange(true)) return;
    c10::intrusive_ptr<BraidWork> self = c10::intrusive_ptr<BraidWork>::reclaim_copy(this);
    completer_->post([self] { self->settle(self->call_->finish()); });
  }

  // settle completes the Work and its Future with the call's outcome,
  // once.
  void settle(std::exception_ptr ex) {
    if (settled_.exchange(true)) return;
    finish(ex);
    if (ex)
      future_->setError(ex);
    else
      future_->markCompleted(c10::IValue(outputs_));
  }

  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::shared_ptr<Call> call_;  // null for a call that ran blocking
  std::shared_ptr<Completer> completer_;
  std::atomic<bool> handed_{false}, settled_{false};
};

class ProcessGroupBraid : public Base {
 public:
  ProcessGroupBraid(braid_comm comm, int rank, int size)
      : Base(rank, size), comm_(comm), completer_(std::make_shared<Completer>()) {}

  // The destructor waits for the completion thread, which may need the
  // GIL (to drop the last reference to a tensor that Python made, or to
  // run a future's Python callback), and for the other ranks: it lets the
  // GIL go meanwhile where its thread holds it (destroy_process_group).
  ~ProcessGroupBraid() override {
    if (Py_IsInitialized() && PyGILState_Check()) {
      pybind11::gil_scoped_release nogil;
      shutdown();
    } else {
      shutdown();
    }
  }

  const std::string getBackendName() const override { return "braid"; }

  c10::intrusive_ptr<Work> broadcast(std::vector<at::Tensor>& ts, const c10d::BroadcastOptions& o) override {
    auto t = single(ts, "broadcast");
    if (t.is_cuda())
      return device(OpType::BROADCAST, {t}, t, [&](void* s) {
        return braid_device_bcast(comm_, t.data_ptr(), t.numel(), dtypeOf(t), o.rootRank, s);
      });
    return issue(OpType::BROADCAST, {t}, t.nbytes(), [&](braid_request* r) {
      return BRAID_CALL(bcast, comm_, t.data_ptr(), t.numel(), dtypeOf(t), o.rootRank);
    });
  }

  c10::intrusive_ptr<Work> allreduce(std::vector<at::Tensor>& ts, const c10d::AllreduceOptions& o) override {
    auto t = single(ts, "allreduce");
    if (t.is_cuda())
      return device(OpType::ALLREDUCE, {t}, t, [&](void* s) {
        return braid_device_allreduce(comm_, t.data_ptr(), t.data_ptr(), t.numel(), dtypeOf(t), opOf(o.reduceOp, t), s);
      });
    return issue(OpType::ALLREDUCE, {t}, t.nbytes(), [&](braid_request* r) {
      return BRAID_CALL(allreduce, comm_, t.data_ptr(), t.data_ptr(), t.numel(), dtypeOf(t), opOf(o.reduceOp, t));
    });
  }

  c10::intrusive_ptr<Work> allreduce_coalesced(std::vector<at::Tensor>& ts,
                                               const c10d::AllreduceCoalescedOptions& o) override {
    TORCH_CHECK(!ts.empty(), "braid: allreduce_coalesced of no tensors");
    for (auto& t : ts) {
      checkTensor(t);
      TORCH_CHECK(t.scalar_type() == ts[0].scalar_type(), "braid: allreduce_coalesced of mixed dtypes");
    }
    sameDevice(ts[0], ts, "allreduce_coalesced");
    std::vector<at::Tensor> flat_in;
    for (auto& t : ts) flat_in.push_back(t.reshape({-1}));
    auto flat = at::cat(flat_in);
    auto outs = ts;
    auto back = [flat, outs]() mutable {
      int64_t off = 0;
      for (auto& t : outs) {
        t.copy_(flat.narrow(0, off, t.numel()).view_as(t));
        off += t.numel();
      }
    };
    if (flat.is_cuda())
      return device(OpType::ALLREDUCE_COALESCED, ts, flat, [&](void* s) {
        return braid_device_allreduce(comm_, flat.data_ptr(), flat.data_ptr(), flat.numel(), dtypeOf(flat),
                                      opOf(o.reduceOp, flat), s);
      }, back);
    return issue(OpType::ALLREDUCE_COALESCED, ts, flat.nbytes(),
        [&](braid_request* r) {
          return BRAID_CALL(allreduce, comm_, flat.data_ptr(), flat.data_ptr(), flat.numel(), dtypeOf(flat),
                                  opOf(o.reduceOp, flat));
        },
        back, {flat});
  }

  c10::intrusive_ptr<Work> reduce(std::vector<at::Tensor>& ts, const c10d::ReduceOptions& o) override {
    auto t = single(ts, "reduce");
    bool root = o.rootRank == getRank();
    if (t.is_cuda()) {
      // The root's result lands beside its input, then is copied back.
      at::Tensor out = root ? at::empty_like(t, at::MemoryFormat::Contiguous) : at::Tensor();
      return device(OpType::REDUCE, {t}, t, [&](void* s) {
        return braid_device_reduce(comm_, t.data_ptr(), root ? out.data_ptr() : nullptr, t.numel(), dtypeOf(t),
                                   opOf(o.reduceOp, t), o.rootRank, s);
      }, [&]() { if (root) t.copy_(out); });
    }
    void* recv = root ? t.data_ptr() : nullptr;
    return issue(OpType::REDUCE, {t}, t.nbytes(), [&](braid_request* r) {
      return BRAID_CALL(reduce, comm_, t.data_ptr(), recv, t.numel(), dtypeOf(t), opOf(o.reduceOp, t), o.rootRank);
    });
  }

  c10::intrusive_ptr<Work> allgather(std::vector<std::vector<at::Tensor>>& outs, std::vector<at::Tensor>& ins,
                                     const c10d::AllgatherOptions&) override {
    auto in = single(ins, "allgather");
    TORCH_CHECK(outs.size() == 1 && int(outs[0].size()) == getSize(), "braid: allgather wants one list of ",
                getSize(), " output tensors");
    for (auto& t : outs[0]) {
      checkTensor(t);
      TORCH_CHECK(t.numel() == in.numel() && t.scalar_type() == in.scalar_type(),
                  "braid: allgather's outputs must match its input");
    }
    auto flat = at::empty({getSize() * in.numel()}, in.options());
    auto list = outs[0];
    auto back = [flat, list, n = in.numel()]() mutable {
      for (size_t i = 0; i < list.size(); i++) list[i].copy_(flat.narrow(0, i * n, n).view_as(list[i]));
    };
    if (in.is_cuda()) {
      sameDevice(in, list, "allgather");
      return device(OpType::ALLGATHER, list, in, [&](void* s) {
        return braid_device_allgather(comm_, in.data_ptr(), flat.data_ptr(), in.numel(), dtypeOf(in), s);
      }, back);
    }
    return issue(OpType::ALLGATHER, list, in.nbytes() * getSize(),
        [&](braid_request* r) {
          return BRAID_CALL(allgather, comm_, in.data_ptr(), flat.data_ptr(), in.numel(), dtypeOf(in));
        },
        back, {in, flat});
  }

  c10::intrusive_ptr<Work> _allgather_base(at::Tensor& out, at::Tensor& in, const c10d::AllgatherOptions&) override {
    checkTensor(out);
    checkTensor(in);
    TORCH_CHECK(out.numel() == getSize() * in.numel() && out.scalar_type() == in.scalar_type(),
                "braid: _allgather_base's output must hold size × the input");
    if (in.is_cuda()) {
      sameDevice(in, {out}, "_allgather_base");
      return device(OpType::_ALLGATHER_BASE, {out}, in, [&](void* s) {
        return braid_device_allgather(comm_, in.data_ptr(), out.data_ptr(), in.numel(), dtypeOf(in), s);
      });
    }
    return issue(OpType::_ALLGATHER_BASE, {out}, out.nbytes(), [&](braid_request* r) {
      return BRAID_CALL(allgather, comm_, in.data_ptr(), out.data_ptr(), in.numel(), dtypeOf(in));
    }, nullptr, {in});
  }

  c10::intrusive_ptr<Work> reduce_scatter(std::vector<at::Tensor>& outs, std::vector<std::vector<at::Tensor>>& ins,
                                          const c10d::ReduceScatterOptions& o) override {
    auto out = single(outs, "reduce_scatter");
    TORCH_CHECK(ins.size() == 1 && int(ins[0].size()) == getSize(), "braid: reduce_scatter wants one list of ",
                getSize(), " input tensors");
    std::vector<at::Tensor> flat_in;
    for (auto& t : ins[0]) {
      checkTensor(t);
      TORCH_CHECK(t.numel() == out.numel() && t.scalar_type() == out.scalar_type(),
                  "braid: reduce_scatter's inputs must match its output");
      flat_in.push_back(t.reshape({-1}));
    }
    auto flat = at::cat(flat_in);
    if (out.is_cuda()) {
      sameDevice(out, {flat}, "reduce_scatter");
      return device(OpType::REDUCE_SCATTER, {out}, out, [&](void* s) {
        return braid_device_reduce_scatter(comm_, flat.data_ptr(), out.data_ptr(), out.numel(), dtypeOf(out),
                                           opOf(o.reduceOp, out), s);
      });
    }
    return issue(OpType::REDUCE_SCATTER, {out}, flat.nbytes(), [&](braid_request* r) {
      return BRAID_CALL(reduce_scatter, comm_, flat.data_ptr(), out.data_ptr(), out.numel(), dtypeOf(out),
                                   opOf(o.reduceOp, out));
    }, nullptr, {flat});
  }

  c10::intrusive_ptr<Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                const c10d::ReduceScatterOptions& o) override {
    checkTensor(out);
    checkTensor(in);
    TORCH_CHECK(in.numel() == getSize() * out.numel() && out.scalar_type() == in.scalar_type(),
                "braid: _reduce_scatter_base's input must hold size × the output");
    if (out.is_cuda()) {
      sameDevice(out, {in}, "_reduce_scatter_base");
      return device(OpType::_REDUCE_SCATTER_BASE, {out}, out, [&](void* s) {
        return braid_device_reduce_scatter(comm_, in.data_ptr(), out.data_ptr(), out.numel(), dtypeOf(out),
                                           opOf(o.reduceOp, out), s);
      });
    }
    return issue(OpType::_REDUCE_SCATTER_BASE, {out}, in.nbytes(), [&](braid_request* r) {
      return BRAID_CALL(reduce_scatter, comm_, in.data_ptr(), out.data_ptr(), out.numel(), dtypeOf(out),
                                   opOf(o.reduceOp, out));
    }, nullptr, {in});
  }

  c10::intrusive_ptr<Work> gather(std::vector<std::vector<at::Tensor>>& outs, std::vector<at::Tensor>& ins,
                                  const c10d::GatherOptions& o) override {
    auto in = single(ins, "gather");
    bool root = o.rootRank == getRank();
    std::vector<at::Tensor> list;
    at::Tensor flat;
    if (root) {
      TORCH_CHECK(outs.size() == 1 && int(outs[0].size()) == getSize(), "braid: gather wants one list of ",
                  getSize(), " output tensors at the root");
      for (auto& t : outs[0]) {
        checkTensor(t);
        TORCH_CHECK(t.numel() == in.numel() && t.scalar_type() == in.scalar_type(),
                    "braid: gather's outputs must match its input");
      }
      list = outs[0];
      flat = at::empty({getSize() * in.numel()}, in.options());
    } else {
      TORCH_CHECK(outs.empty() || outs[0].empty(), "braid: gather's outputs are for the root only");
    }
    auto back = [flat, list, n = in.numel()]() mutable {
      for (size_t i = 0; i < list.size(); i++) list[i].copy_(flat.narrow(0, i * n, n).view_as(list[i]));
    };
    if (in.is_cuda()) {
      sameDevice(in, list, "gather");
      return device(OpType::GATHER, list, in, [&](void* s) {
        return braid_device_gather(comm_, in.data_ptr(), root ? flat.data_ptr() : nullptr, in.numel(), dtypeOf(in),
                                   o.rootRank, s);
      }, back);
    }
    return issue(OpType::GATHER, list, in.nbytes() * getSize(),
        [&](braid_request* r) {
          return BRAID_CALL(gather, comm_, in.data_ptr(), root ? flat.data_ptr() : nullptr, in.numel(), dtypeOf(in),
                               o.rootRank);
        },
        back, {in, flat});
  }

  c10::intrusive_ptr<Work> scatter(std::vector<at::Tensor>& outs, std::vector<std::vector<at::Tensor>>& ins,
                                   const c10d::ScatterOptions& o) override {
    auto out = single(outs, "scatter");
    bool root = o.rootRank == getRank();
    at::Tensor flat;
    if (root) {
      TORCH_CHECK(ins.size() == 1 && int(ins[0].size()) == getSize(), "braid: scatter wants one list of ",
                  getSize(), " input tensors at the root");
      std::vector<at::Tensor> flat_in;
      for (auto& t : ins[0]) {
        checkTensor(t);
        TORCH_CHECK(t.numel() == out.numel() && t.scalar_type() == out.scalar_type(),
                    "braid: scatter's inputs must match its output");
        flat_in.push_back(t.reshape({-1}));
      }
      flat = at::cat(flat_in);
    } else {
      TORCH_CHECK(ins.empty() || ins[0].empty(), "braid: scatter's inputs are for the root only");
    }
    if (out.is_cuda()) {
      if (root) sameDevice(out, {flat}, "scatter");
      return device(OpType::SCATTER, {out}, out, [&](void* s) {
        return braid_device_scatter(comm_, root ? flat.data_ptr() : nullptr, out.data_ptr(), out.numel(), dtypeOf(out),
                                    o.rootRank, s);
      });
    }
    return issue(OpType::SCATTER, {out}, out.nbytes() * getSize(), [&](braid_request* r) {
      return BRAID_CALL(scatter, comm_, root ? flat.data_ptr() : nullptr, out.data_ptr(), out.numel(), dtypeOf(out),
                            o.rootRank);
    }, nullptr, {flat});
  }

  c10::intrusive_ptr<Work> alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& outSplits,
                                         std::vector<int64_t>& inSplits, const c10d::AllToAllOptions&) override {
    checkTensor(out);
    checkTensor(in);
    TORCH_CHECK(out.scalar_type() == in.scalar_type(), "braid: alltoall_base of mixed dtypes");
    int n = getSize();
    if (outSplits.empty() && inSplits.empty()) {
      TORCH_CHECK(in.numel() == out.numel() && in.size(0) % n == 0,
                  "braid: alltoall_base wants input and output of the same size, a multiple of ", n, " rows");
      if (in.is_cuda()) {
        sameDevice(in, {out}, "alltoall_base");
        return device(OpType::ALLTOALL_BASE, {out}, in, [&](void* s) {
          return braid_device_alltoall(comm_, in.data_ptr(), out.data_ptr(), in.numel() / n, dtypeOf(in), s);
        });
      }
      return issue(OpType::ALLTOALL_BASE, {out}, in.nbytes(), [&](braid_request* r) {
        return BRAID_CALL(alltoall, comm_, in.data_ptr(), out.data_ptr(), in.numel() / n, dtypeOf(in));
      }, nullptr, {in});
    }
    // Uneven splits: one send and one receive per peer.
    auto rows = [&](std::vector<int64_t>& splits, const at::Tensor& t) {
      if (splits.empty()) splits.assign(n, t.size(0) / n);
      TORCH_CHECK(int(splits.size()) == n, "braid: alltoall_base wants ", n, " split sizes");
      std::vector<int64_t> off(n + 1, 0);
      for (int i = 0; i < n; i++) off[i + 1] = off[i] + splits[i];
      TORCH_CHECK(off[n] == t.size(0), "braid: alltoall_base's split sizes do not add up to the tensor's rows");
      return off;
    };
    auto inOff = rows(inSplits, in), outOff = rows(outSplits, out);
    auto slices = [&](int peer) {
      return std::make_pair(in.narrow(0, inOff[peer], inOff[peer + 1] - inOff[peer]),
                            out.narrow(0, outOff[peer], outOff[peer + 1] - outOff[peer]));
    };
    if (in.is_cuda()) {
      sameDevice(in, {out}, "alltoall_base");
      return deviceAlltoall(OpType::ALLTOALL_BASE, {out}, in, slices);
    }
    return alltoallP2P(OpType::ALLTOALL_BASE, {out}, slices);
  }

  c10::intrusive_ptr<Work> alltoall(std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
                                    const c10d::AllToAllOptions&) override {
    int n = getSize();
    TORCH_CHECK(int(outs.size()) == n && int(ins.size()) == n, "braid: alltoall wants ", n, " inputs and outputs");
    for (int i = 0; i < n; i++) {
      checkTensor(outs[i]);
      checkTensor(ins[i]);
      TORCH_CHECK(outs[i].scalar_type() == ins[0].scalar_type() && ins[i].scalar_type() == ins[0].scalar_type(),
                  "braid: alltoall of mixed dtypes");
    }
    if (n > 0 && ins[0].is_cuda()) {
      // Blocks of one size: one all-to-all of their concatenation; of
      // different sizes: a send and a receive per peer.
      sameDevice(ins[0], ins, "alltoall");
      sameDevice(ins[0], outs, "alltoall");
      bool even = true;
      for (int i = 0; i < n; i++) even = even && ins[i].numel() == ins[0].numel() && outs[i].numel() == ins[0].numel();
      if (!even)
        return deviceAlltoall(OpType::ALLTOALL, outs, ins[0], [&](int peer) { return std::make_pair(ins[peer], outs[peer]); });
      std::vector<at::Tensor> flat_in;
      for (auto& t : ins) flat_in.push_back(t.reshape({-1}));
      auto fin = at::cat(flat_in);
      auto fout = at::empty_like(fin);
      int64_t m = ins[0].numel();
      return device(OpType::ALLTOALL, outs, fin, [&](void* s) {
        return braid_device_alltoall(comm_, fin.data_ptr(), fout.data_ptr(), m, dtypeOf(fin), s);
      }, [&]() {
        for (int i = 0; i < n; i++) outs[i].copy_(fout.narrow(0, i * m, m).view_as(outs[i]));
      });
    }
    return alltoallP2P(OpType::ALLTOALL, outs, [&](int peer) { return std::make_pair(ins[peer], outs[peer]); });
  }

  c10::intrusive_ptr<Work> barrier(const c10d::BarrierOptions&) override {
    return issue(OpType::BARRIER, {}, 0, [&](braid_request* r) { return r ? braid_ibarrier(comm_, r) : braid_barrier(comm_); });
  }

  c10::intrusive_ptr<Work> send(std::vector<at::Tensor>& ts, int dst, int tag) override {
    auto t = single(ts, "send");
    if (t.is_cuda()) {
      return device(OpType::SEND, {t}, t, [&](void* s) {
        return braid_device_send(comm_, t.data_ptr(), t.numel(), dtypeOf(t), dst, tag, s);
      });
    }
    return issue(OpType::SEND, {t}, kNeverEager, [&](braid_request* r) {
      return braid_isend(comm_, t.data_ptr(), t.numel(), dtypeOf(t), dst, tag, r);  // never eager: r is set
    });
  }

  c10::intrusive_ptr<Work> recv(std::vector<at::Tensor>& ts, int src, int tag) override {
    auto t = single(ts, "recv");
    if (t.is_cuda()) {
      return device(OpType::RECV, {t}, t, [&](void* s) {
        return braid_device_recv(comm_, t.data_ptr(), t.numel(), dtypeOf(t), src, tag, s);
      });
    }
    return issue(OpType::RECV, {t}, kNeverEager, [&](braid_request* r) {
      return braid_irecv(comm_, t.data_ptr(), t.numel(), dtypeOf(t), src, tag, r);
    });
  }

 private:
  // device runs a call on CUDA tensors: call(stream) on the current stream
  // of t's device, then post there (onDevice, device.h).
  c10::intrusive_ptr<Work> device(OpType type, std::vector<at::Tensor> outputs, const at::Tensor& t,
                                  const std::function<int(void*)>& call, const std::function<void()>& post = nullptr) {
    return onDevice(getRank(), type, std::move(outputs), t.device(), call, post);
  }

  // issue runs one Braid call. start(r) starts it non-blocking, filling
  // in *r, or with r NULL runs it blocking. A call of at most eagerMax_
  // bytes runs blocking here, on the caller's thread, and returns its Work
  // completed. A larger one starts non-blocking, so that it runs in the
  // background (a DistributedDataParallel bucket during the rest of the
  // backward pass), and its Work completes it, with post after it
  // succeeds, on the thread that waits for it first (BraidWork). buffers
  // are the tensors besides outputs that the call reads or writes (inputs,
  // scratch), which its Call keeps alive while it runs. A call that Braid
  // refuses at once throws here.
  static constexpr size_t kNeverEager = SIZE_MAX;
  c10::intrusive_ptr<Work> issue(OpType type, std::vector<at::Tensor> outputs, size_t bytes,
                                 const std::function<int(braid_request*)>& start,
                                 std::function<void()> post = nullptr, std::vector<at::Tensor> buffers = {}) {
    if (bytes != kNeverEager && bytes <= eagerMax_) {
      check(start(nullptr));
      std::exception_ptr ex;
      if (post) {
        try {
          post();
        } catch (...) {
          ex = std::current_exception();
        }
      }
      auto work = c10::make_intrusive<BraidWork>(getRank(), type, std::move(outputs), nullptr, completer_);
      work->completeNow(ex);
      return work;
    }
    braid_request req = 0;
    check(start(&req));
    buffers.insert(buffers.end(), outputs.begin(), outputs.end());
    auto call = std::make_shared<Call>(std::vector<braid_request>{req}, std::move(post), std::move(buffers));
    return c10::make_intrusive<BraidWork>(getRank(), type, std::move(outputs), std::move(call), completer_);
  }

  // deviceAlltoall runs an all-to-all of blocks of any sizes on CUDA
  // tensors, on the current stream: its own block is a copy, and the
  // others go in n-1 rounds of braid_device_sendrecv, round k to rank
  // me+k and from rank me-k, so that the two ends of every message are in
  // the same round on their ranks (a send completes only once its
  // receiver has posted). slices(peer) gives the block for peer and the
  // one from it, contiguous (narrowed along the rows of a contiguous
  // tensor, or checked), of one dtype (checked by the callers).
  c10::intrusive_ptr<Work> deviceAlltoall(OpType type, std::vector<at::Tensor> outputs, const at::Tensor& any,
                                          const std::function<std::pair<at::Tensor, at::Tensor>(int)>& slices) {
    int n = getSize(), me = getRank();
    auto own = slices(me);
    TORCH_CHECK(own.first.numel() == own.second.numel(), "braid: alltoall's own block differs in size");
    return device(type, std::move(outputs), any, [&](void* s) {
      own.second.copy_(own.first.view_as(own.second));
      for (int k = 1; k < n; k++) {
        int to = (me + k) % n, from = (me + n - k) % n;
        at::Tensor sb = slices(to).first, rb = slices(from).second;
        int rc = braid_device_sendrecv(comm_, sb.data_ptr(), sb.numel(), to, rb.data_ptr(), rb.numel(), from,
                                       dtypeOf(sb), alltoallTag, s);
        if (rc != BRAID_OK) return rc;
      }
      return int(BRAID_OK);
    });
  }

  // alltoallP2P runs an alltoall of blocks of any sizes as a receive and a
  // send per peer (its own block is a copy): slices(peer) gives the block
  // for peer and the one from it. The messages carry tag alltoallTag.
  static constexpr int alltoallTag = 0x7a11;
  c10::intrusive_ptr<Work> alltoallP2P(OpType type, std::vector<at::Tensor> outputs,
                                       const std::function<std::pair<at::Tensor, at::Tensor>(int)>& slices) {
    int n = getSize(), me = getRank();
    std::vector<braid_request> reqs;
    std::vector<at::Tensor> keep;  // contiguous copies the calls read or write
    std::vector<std::pair<at::Tensor, at::Tensor>> back;  // (destination, buffer) to copy after
    auto fail = [&]() {
      auto ex = std::make_exception_ptr(error());
      for (auto r : reqs) braid_wait(r);
      std::rethrow_exception(ex);
    };
    for (int k = 0; k < n; k++) {
      int peer = (me + k) % n;
      auto blocks = slices(peer);
      at::Tensor src = blocks.first, dst = blocks.second;
      TORCH_CHECK(peer != me || src.numel() == dst.numel(), "braid: alltoall's own block differs in size");
      if (peer == me) {
        dst.copy_(src.view_as(dst));
        continue;
      }
      auto sbuf = src.contiguous();
      auto rbuf = dst.is_contiguous() ? dst : at::empty_like(dst, at::MemoryFormat::Contiguous);
      if (!rbuf.is_same(dst)) back.emplace_back(dst, rbuf);
      keep.push_back(sbuf);
      keep.push_back(rbuf);
      braid_request r = 0;
      if (braid_irecv(comm_, rbuf.data_ptr(), rbuf.numel(), dtypeOf(rbuf), peer, alltoallTag, &r) != BRAID_OK) fail();
      reqs.push_back(r);
      if (braid_isend(comm_, sbuf.data_ptr(), sbuf.numel(), dtypeOf(sbuf), peer, alltoallTag, &r) != BRAID_OK) fail();
      reqs.push_back(r);
    }
    auto call = std::make_shared<Call>(std::move(reqs), [back]() mutable {
      for (auto& db : back) db.first.copy_(db.second);
    }, std::move(keep));
    return c10::make_intrusive<BraidWork>(me, type, std::move(outputs), std::move(call), completer_);
  }

  void shutdown() {
    completer_->stop();         // finishes the calls handed to it
    braid_comm_destroy(comm_);  // collective; its failure has nowhere to go
  }

  braid_comm comm_;
  size_t eagerMax_ = eagerMax();
  std::shared_ptr<Completer> completer_;
};

// create is the backend's creator, as torch.distributed calls it: rank 0
// makes a unique id and hands it to the others through the group's store;
// every rank then joins the Braid job it names. The group's timeout is
// Braid's timeout unless BRAID_TIMEOUT is set.
c10::intrusive_ptr<Base> create(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                              const std::chrono::duration<float>& timeout) {
  braid_unique_id id;
  const std::string key = "braid/unique_id";
  if (rank == 0) {
    check(braid_get_unique_id(&id));
    store->set(key, std::vector<uint8_t>(id.internal, id.internal + sizeof id.internal));
  } else {
    auto v = store->get(key);
    TORCH_CHECK(v.size() == sizeof id.internal, "braid: the store holds a unique id of ", v.size(), " bytes");
    std::copy(v.begin(), v.end(), id.internal);
  }
  braid_config cfg{};
  if (!std::getenv("BRAID_TIMEOUT")) cfg.timeout_seconds = timeout.count();
  braid_comm comm = 0;
  {
    pybind11::gil_scoped_release nogil;  // the other ranks' threads may need Python meanwhile
    check(braid_init_rank_config(&comm, size, &id, rank, &cfg));
  }
  return c10::make_intrusive<ProcessGroupBraid>(comm, rank, size);
}

}  // namespace braid_torch

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Braid's c10d backend; import braid_torch to register it as \"braid\"";
  m.attr("cuda") = pybind11::bool_(braid_torch::kCuda);
  m.def("create", &braid_torch::create, "Makes a Braid process group (torch.distributed's backend creator)",
        pybind11::arg("store"), pybind11::arg("rank"), pybind11::arg("size"), pybind11::arg("timeout"));
}
