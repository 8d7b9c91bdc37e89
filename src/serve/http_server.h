// Owns the HTTP side of `megatron serve` (cpp-httplib): the endpoints, their limits and their
// errors. PUT /api is Megatron's text generation API; POST /v1/completions (and /completions) and
// POST /v1/chat/completions (and /chat/completions) are OpenAI's, whole or streamed as server-sent
// events; GET /health, GET /v1/models and GET /v1/models/{id} describe the server. Each request is read, checked, tokenized and handed to the GenerationService; its
// thread then waits for the job. Every refusal is a 4xx with a JSON error naming the field.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "serve/requests.h"
#include "serve/service.h"

namespace httplib {
class Server;
}

namespace mt {

class ChatPrompt;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 5000;                    // 0: any free port
  int64_t max_body_bytes = 1 << 20;   // larger bodies get 413
  int64_t max_concurrent = 64;        // HTTP worker threads beyond the service's job limit
  RequestLimits limits;
  std::string model_name = "megatron";  // OpenAI's "model" in responses and /v1/models
  std::string chat_template;            // Jinja for chat requests; empty: the tokenizer's own
};

class HttpServer {
 public:
  HttpServer(GenerationService& service, const ServerOptions& options);
  ~HttpServer();  // stops

  // Binds (mt::Error when the address cannot be had) and serves on a thread of its own. Returns
  // the port (the one chosen, for port 0).
  int start();
  // Stops accepting, lets the requests in hand finish, and joins.
  void stop();

 private:
  void route();

  GenerationService& service_;
  ServerOptions options_;
  std::unique_ptr<httplib::Server> server_;
  std::unique_ptr<ChatPrompt> chat_;
  std::thread thread_;
  std::atomic<int> open_streams_{0};  // streamed answers not yet ended
  std::atomic<uint64_t> next_id_{0};  // of OpenAI completions ("cmpl-N")
};

}  // namespace mt
