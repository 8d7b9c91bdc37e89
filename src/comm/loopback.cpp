#include "comm/loopback.h"

#include "comm/host_access.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <list>
#include <string>
#include <vector>

namespace mt {

namespace {

struct QueuedMessage {
  int tag;
  std::vector<unsigned char> bytes;
};

struct PostedRecv {
  TensorView t;
  int rank, tag;
  std::string op;
  bool filled = false;
};

void fill(const TensorView& t, const void* bytes, size_t n, int rank, int tag, const char* op) {
  check_message_bytes(n, t, rank, tag, op);
  const HostAccess open{t};
  if (n > 0) std::memcpy(t.data, bytes, n);
}

}  // namespace

struct LoopbackState {
  std::deque<QueuedMessage> queued;                // sent, not yet received, in send order
  std::list<std::shared_ptr<PostedRecv>> posted;   // recv_async not yet filled, in posting order
};

namespace {

class LoopbackRecvRequest final : public CommRequest {
 public:
  LoopbackRecvRequest(std::shared_ptr<LoopbackState> state, std::shared_ptr<PostedRecv> recv)
      : state_(std::move(state)), recv_(std::move(recv)) {}
  ~LoopbackRecvRequest() override { state_->posted.remove(recv_); }  // cancel: no send may write into it later
  void wait() override {
    if (recv_->filled) return;
    state_->posted.remove(recv_);
    MT_FAIL() << recv_->op << " from self (rank " << recv_->rank << ") tag " << recv_->tag << " into "
              << recv_->t.str() << ": no matching send to self came before wait(); a loopback receive "
              << "cannot block, so send to self before waiting";
  }

 private:
  std::shared_ptr<LoopbackState> state_;
  std::shared_ptr<PostedRecv> recv_;
};

struct DoneRecv final : CommRequest {
  void wait() override {}
};

}  // namespace

Loopback::Loopback() : state_(std::make_shared<LoopbackState>()) {}
Loopback::~Loopback() = default;

void Loopback::send(const TensorView& t, int rank, int tag) {
  // A receive posted earlier takes the message first (posting order), as MPI matches.
  auto& posted = state_->posted;
  auto it = std::find_if(posted.begin(), posted.end(), [&](const auto& r) { return r->tag == tag; });
  if (it != posted.end()) {
    PostedRecv& r = **it;
    const HostAccess open{t};
    fill(r.t, t.data, t.bytes(), rank, tag, r.op.c_str());
    r.filled = true;
    posted.erase(it);
    return;
  }
  const HostAccess open{t};
  const auto* bytes = static_cast<const unsigned char*>(t.data);
  state_->queued.push_back({tag, std::vector<unsigned char>(bytes, bytes + t.bytes())});
}

void Loopback::recv(const TensorView& t, int rank, int tag, const char* op) {
  auto& queued = state_->queued;
  auto it = std::find_if(queued.begin(), queued.end(), [&](const QueuedMessage& m) { return m.tag == tag; });
  MT_CHECK(it != queued.end()) << op << " from self (rank " << rank << ") tag " << tag << " into " << t.str()
                               << ": no message with this tag was sent to self; a loopback receive cannot "
                               << "block, so send to self before receiving";
  fill(t, it->bytes.data(), it->bytes.size(), rank, tag, op);
  queued.erase(it);
}

std::unique_ptr<CommRequest> Loopback::recv_async(const TensorView& t, int rank, int tag, const char* op) {
  const bool queued = std::any_of(state_->queued.begin(), state_->queued.end(),
                                  [&](const QueuedMessage& m) { return m.tag == tag; });
  if (queued) {
    recv(t, rank, tag, op);
    return std::make_unique<DoneRecv>();
  }
  auto posted = std::make_shared<PostedRecv>(PostedRecv{t, rank, tag, op});
  state_->posted.push_back(posted);
  return std::make_unique<LoopbackRecvRequest>(state_, std::move(posted));
}

}  // namespace mt
