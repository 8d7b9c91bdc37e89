#include "pipeline/executor.h"

#include <map>
#include <memory>
#include <tuple>

#include "base/error.h"

namespace mt {

namespace {

// A tensor in transit: (direction, micro-batch, virtual stage that produced it).
using TensorKey = std::tuple<Direction, int, int>;

int tag(Direction d) { return d == Direction::activation ? kActivationTag : kGradientTag; }

class Executor {
 public:
  explicit Executor(const PipelineRun& run)
      : run_(run), pp_(run.pp->size()), rank_(run.pp->rank()), free_(run.receive_buffers) {}

  void exchange(const Action& a) {
    std::vector<std::unique_ptr<CommRequest>> requests;
    for (const Transfer& t : a.recvs) {
      MT_CHECK(!free_.empty()) << "pipeline: no receive buffer left for " << to_string(a)
                               << "; the executor needs max_buffered_receives() of them";
      const TensorView buffer = message_view(free_.back(), t.direction);
      free_.pop_back();
      received_[{t.direction, t.microbatch, t.stage}] = buffer;
      requests.push_back(run_.pp->recv_async(buffer, t.peer, tag(t.direction)));
    }
    for (const Transfer& t : a.sends) {
      const auto it = outbox_.find({t.direction, t.microbatch, t.stage});
      MT_CHECK(it != outbox_.end()) << "pipeline: " << to_string(a) << " sends a tensor this rank has not computed";
      requests.push_back(run_.pp->send_async(it->second, t.peer, tag(t.direction)));
      outbox_.erase(it);
    }
    for (const auto& r : requests) r->wait();
  }

  void compute(const Action& a) {
    MT_CHECK(a.chunk >= 0 && a.chunk < static_cast<int>(run_.chunks.size()))
        << "pipeline: " << to_string(a) << " names a chunk this rank does not hold";
    const int vs = virtual_stage(pp_, rank_, a.chunk);
    const int last = pp_ * static_cast<int>(run_.chunks.size()) - 1;
    PipelineChunk& chunk = *run_.chunks[static_cast<size_t>(a.chunk)];
    // The chunk's last output lives in its own buffers, which this compute overwrites.
    for (const auto& [key, tensor] : outbox_)
      MT_CHECK(std::get<2>(key) != vs) << "pipeline: " << to_string(a) << " would overwrite its chunk's unsent output";
    if (a.kind == Action::Kind::forward) {
      const TensorView input = vs > 0 ? take({Direction::activation, a.microbatch, vs - 1}, a) : TensorView();
      const TensorView out = chunk.forward(a.microbatch, input);
      release(input);
      if (vs < last) outbox_[{Direction::activation, a.microbatch, vs}] = out;
    } else {
      const TensorView grad = vs < last ? take({Direction::gradient, a.microbatch, vs + 1}, a) : TensorView();
      const TensorView dx = chunk.backward(a.microbatch, grad);
      release(grad);
      if (vs > 0) outbox_[{Direction::gradient, a.microbatch, vs}] = dx;
    }
  }

  void finish() const {
    MT_CHECK(received_.empty() && outbox_.empty())
        << "pipeline: the action list left " << received_.size() << " received and " << outbox_.size()
        << " unsent tensors";
  }

 private:
  TensorView message_view(const TensorView& buffer, Direction d) const {
    const DType dtype = d == Direction::activation ? run_.activation_dtype : DType::f32;
    MT_CHECK(buffer.bytes() >= static_cast<size_t>(run_.message.numel()) * dtype_size(dtype))
        << "pipeline: a receive buffer " << buffer.str() << " is smaller than a message";
    return TensorView(buffer.data, dtype, run_.message, buffer.device);
  }
  TensorView take(const TensorKey& key, const Action& a) {
    const auto it = received_.find(key);
    MT_CHECK(it != received_.end()) << "pipeline: " << to_string(a) << " runs before its input arrived";
    const TensorView t = it->second;
    received_.erase(it);
    return t;
  }
  void release(const TensorView& t) {
    if (!t.empty()) free_.push_back(TensorView(t.data, DType::f32, run_.message, t.device));
  }

  const PipelineRun& run_;
  int pp_, rank_;
  std::vector<TensorView> free_;
  std::map<TensorKey, TensorView> received_;
  std::map<TensorKey, TensorView> outbox_;
};

}  // namespace

void execute_pipeline(const std::vector<Action>& actions, const PipelineRun& run) {
  MT_CHECK(run.pp != nullptr && !run.chunks.empty()) << "pipeline: no pipeline group or no model chunks";
  Executor executor(run);
  for (const Action& a : actions) {
    if (a.kind == Action::Kind::exchange)
      executor.exchange(a);
    else
      executor.compute(a);
  }
  executor.finish();
}

}  // namespace mt
