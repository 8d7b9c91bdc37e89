#include "serve/http_server.h"

#include <httplib.h>

#include <sys/socket.h>

#include <atomic>
#include <csignal>
#include <chrono>
#include <random>

#include "base/error.h"
#include "serve/chat_prompt.h"
#include "serve/responses.h"

namespace mt {

// httplib listens with a backlog of 5, which drops connections under a burst of clients; Linux
// lets a listening socket's backlog be raised by calling listen again.
class Listener : public httplib::Server {
 public:
  void raise_backlog(int backlog) { ::listen(svr_sock_, backlog); }
};

namespace {

using json = nlohmann::json;

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_error(httplib::Response& res, int status, const std::string& field, const std::string& message) {
  send_json(res, status, error_json(status, field, message));
}

json parse_body(const httplib::Request& req) {
  try {
    return json::parse(req.body);
  } catch (const json::parse_error& e) {
    throw RequestError(400, "", std::string("malformed JSON: ") + e.what());
  }
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A request's prompts tokenized and handed to the service.
struct Admission {
  CompletionRequest request;
  std::vector<PromptRun> prompts;
  std::shared_ptr<Job> job;
};

Admission admit(GenerationService& service, CompletionRequest request) {
  Admission a;
  const std::string field = request.api == RequestApi::megatron ? "prompts" : request.api == RequestApi::chat ? "messages" : "prompt";
  // One seed per request; its prompts draw from their own streams (their indices), as generate's do.
  if (!request.seeded) request.sampling.seed = std::random_device{}() * 0x100000000ULL + std::random_device{}();
  std::vector<JobSequence> sequences;
  for (size_t i = 0; i < request.prompt_count(); ++i) {
    PromptRun p;
    if (request.prompt_ids.empty()) {
      p.text = request.prompt_texts[i];
      try {
        p.tokens = service.encode(p.text);
      } catch (const Error& e) {  // text the tokenizer cannot read (NullTokenizer: not ids)
        throw RequestError(400, field, "prompt " + std::to_string(i) + ": " + e.what());
      }
    } else {
      p.tokens = request.prompt_ids[i];
      for (const int32_t t : p.tokens)
        if (t >= service.tokenizer().vocab_size())
          throw RequestError(400, field, "token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                                             std::to_string(service.tokenizer().vocab_size()) + ")");
      p.text = service.decode(p.tokens);
    }
    if (request.add_bos) {
      const Tokenizer& t = service.tokenizer();
      p.tokens.insert(p.tokens.begin(), static_cast<int32_t>(t.bos().value_or(t.eod())));
    }
    if (p.tokens.empty()) throw RequestError(400, field, "prompt " + std::to_string(i) + " has no tokens");
    JobSequence s;
    s.request.prompt = p.tokens;
    s.request.tokens_to_generate = request.tokens_to_generate;
    s.request.sampling = request.sampling;
    s.request.log_probs = request.log_probs;
    s.request.top_n_log_probs = request.top_logprobs;
    s.request.stream = i;
    s.request.stop_token = request.stop_token;
    s.stop = request.stop;  // cut from the text the client gets (responses.h)
    s.stop.insert(s.stop.end(), request.stop_keep.begin(), request.stop_keep.end());  // kept in it
    sequences.push_back(std::move(s));
    a.prompts.push_back(std::move(p));
  }
  a.job = service.submit(std::move(sequences), field);
  a.request = std::move(request);
  return a;
}

// The job's results once it is done (a server failure is a 500).
std::vector<GenerationResult> wait_for(Job& job) {
  uint64_t seen = 0;
  while (!job.done()) seen = job.wait(seen);
  const auto lock = job.lock();
  if (!job.error().empty()) throw RequestError(500, "", job.error());
  return job.results();
}

// One streamed completion: what each choice has been sent so far.
struct Stream {
  Admission admission;
  std::string id, model;
  int64_t created = 0;
  uint64_t seen = 0;
  bool started = false;
  bool started_chat = false;  // a chat stream has sent its first delta (the role)
  std::vector<size_t> text_sent, tokens_sent;
  std::vector<bool> finished;
};

// One event of a stream: a completion's text, or a chat's delta (its first also names the role).
json chunk(const Stream& s, size_t index, const std::string& text, json logprobs, const std::string& finish_reason) {
  const bool chat = s.admission.request.api == RequestApi::chat;
  json choice = {{"index", index}};
  if (chat) {
    choice["delta"] = json::object();
    if (!s.started_chat) choice["delta"]["role"] = "assistant";
    if (!text.empty() || !s.started_chat) choice["delta"]["content"] = text;
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = finish_reason.empty() ? json(nullptr) : json(finish_reason);
  return {{"id", s.id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", s.created},
          {"model", s.model},
          {"choices", json::array({std::move(choice)})}};
}

bool write_event(httplib::DataSink& sink, const std::string& data) {
  const std::string event = "data: " + data + "\n\n";
  return sink.write(event.data(), event.size());
}

// Sends what the job has settled since the last call (blocking until it moves); false when the
// client has gone.
bool stream_more(GenerationService& service, Stream& s, httplib::DataSink& sink) {
  const CompletionRequest& request = s.admission.request;
  const std::vector<PromptRun>& prompts = s.admission.prompts;
  if (!s.started) {
    s.started = true;
    if (request.api == RequestApi::chat) {
      if (!write_event(sink, dump_json(chunk(s, 0, "", nullptr, "")))) return false;
      s.started_chat = true;
    }
    if (request.echo)
      for (size_t i = 0; i < prompts.size(); ++i)
        if (!write_event(sink, dump_json(chunk(s, i, prompts[i].text, nullptr, "")))) return false;
  }
  s.seen = s.admission.job->wait(s.seen);
  std::vector<GenerationResult> results;
  std::string error;
  {
    const auto lock = s.admission.job->lock();
    results = s.admission.job->results();
    error = s.admission.job->error();
  }
  if (!error.empty()) {  // the status is sent: the stream ends with an error event
    write_event(sink, dump_json(error_json(500, "", error)));
    sink.done();
    return true;
  }
  for (size_t i = 0; i < results.size(); ++i) {
    if (s.finished[i]) continue;
    const OpenAiChoice c = openai_choice(service, request, results[i]);
    const size_t settled = c.finish_reason.empty() ? settled_length(c.text, request.stop) : c.text.size();
    if (settled <= s.text_sent[i] && c.finish_reason.empty()) continue;
    const std::string delta = settled > s.text_sent[i] ? c.text.substr(s.text_sent[i], settled - s.text_sent[i]) : "";
    json logprobs = nullptr;
    if (request.log_probs && request.api == RequestApi::chat) {
      logprobs = chat_logprobs(service, request, results[i], s.tokens_sent[i], c.tokens.size());
      s.tokens_sent[i] = c.tokens.size();
    } else if (request.log_probs) {
      const size_t lead = request.echo ? prompts[i].text.size() : 0;
      logprobs = openai_logprobs(service, request, prompts[i], results[i], s.tokens_sent[i], c.tokens.size(),
                                 s.tokens_sent[i] == 0 ? 0 : lead + s.text_sent[i]);
      s.tokens_sent[i] = c.tokens.size();
    }
    s.text_sent[i] = settled;
    s.finished[i] = !c.finish_reason.empty();
    if (!write_event(sink, dump_json(chunk(s, i, delta, std::move(logprobs), c.finish_reason)))) return false;
  }
  if (std::all_of(s.finished.begin(), s.finished.end(), [](bool f) { return f; })) {
    if (request.include_usage) {  // a last chunk without choices carries the usage
      int64_t prompt_tokens = 0, completion_tokens = 0;
      for (size_t i = 0; i < prompts.size(); ++i) {
        prompt_tokens += static_cast<int64_t>(prompts[i].tokens.size());
        completion_tokens += static_cast<int64_t>(results[i].tokens.size());
      }
      json usage = chunk(s, 0, "", nullptr, "");
      usage["choices"] = json::array();
      usage["usage"] = usage_json(prompt_tokens, completion_tokens);
      if (!write_event(sink, dump_json(usage))) return false;
    }
    if (!write_event(sink, "[DONE]")) return false;
    sink.done();
  }
  return true;
}

}  // namespace

HttpServer::HttpServer(GenerationService& service, const ServerOptions& options)
    : service_(service),
      options_(options),
      server_(std::make_unique<Listener>()),
      chat_(std::make_unique<ChatPrompt>(service, options.chat_template)) {
  // A worker per admitted request and a few for the quick answers (health, refusals).
  const size_t threads = static_cast<size_t>(options_.max_concurrent) + 4;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_->set_payload_max_length(static_cast<size_t>(options_.max_body_bytes));
  route();
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::start() {
  int port = options_.port;
  if (port == 0) {
    port = server_->bind_to_any_port(options_.host);
    MT_CHECK(port > 0) << "cannot listen on " << options_.host << " (any port)";
  } else {
    MT_CHECK(server_->bind_to_port(options_.host, port))
        << "cannot listen on " << options_.host << ":" << port << " (in use, or not an address of this machine)";
  }
  static_cast<Listener&>(*server_).raise_backlog(SOMAXCONN);
  std::signal(SIGPIPE, SIG_IGN);  // a client that leaves mid-answer is an error on its socket, not our end
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return port;
}

void HttpServer::stop() {
  if (!thread_.joinable()) return;
  // httplib ends a stream between two of its writes once it is stopping: let the streams of
  // finished jobs write their last events first (a stream whose job still runs waits on it).
  for (int i = 0; i < 1000 && open_streams_ > 0 && service_.active_jobs() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  server_->stop();
  thread_.join();
}

void HttpServer::route() {
  httplib::Server& s = *server_;
  const auto guarded = [](std::function<void(const httplib::Request&, httplib::Response&)> body) {
    return [body](const httplib::Request& req, httplib::Response& res) {
      try {
        body(req, res);
      } catch (const RequestError& e) {
        send_error(res, e.status, e.field, e.what());
      } catch (const std::exception& e) {
        send_error(res, 500, "", std::string("internal error: ") + e.what());
      }
    };
  };

  const auto megatron_api = guarded([this](const httplib::Request& req, httplib::Response& res) {
    CompletionRequest request =
        parse_megatron_request(parse_body(req), options_.limits, service_.tokenizer().vocab_size());
    const Admission a = admit(service_, std::move(request));
    send_json(res, 200, megatron_response(service_, a.request, a.prompts, wait_for(*a.job)));
  });
  // OpenAI's completions and chat completions: answered whole, or streamed as server-sent events.
  const auto openai = [this](CompletionRequest request, httplib::Response& res) {
    const bool chat = request.api == RequestApi::chat;
    const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++);
    const std::string model = request.model.empty() ? options_.model_name : request.model;
    auto stream = std::make_shared<Stream>();
    stream->admission = admit(service_, std::move(request));
    if (!stream->admission.request.stream) {
      const Admission& a = stream->admission;
      const std::vector<GenerationResult> results = wait_for(*a.job);
      send_json(res, 200,
                chat ? chat_response(service_, a.request, a.prompts[0], results[0], id, unix_seconds(), model)
                     : openai_response(service_, a.request, a.prompts, results, id, unix_seconds(), model));
      return;
    }
    const size_t n = stream->admission.prompts.size();
    stream->id = id;
    stream->model = model;
    stream->created = unix_seconds();
    stream->text_sent.assign(n, 0);
    stream->tokens_sent.assign(n, 0);
    stream->finished.assign(n, false);
    res.set_header("Cache-Control", "no-cache");
    ++open_streams_;
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, stream](size_t, httplib::DataSink& sink) { return stream_more(service_, *stream, sink); },
        [this, stream](bool success) {
          if (!success) service_.cancel(stream->admission.job);  // the client left: free its slots
          --open_streams_;
        });
  };
  const auto completions = guarded([this, openai](const httplib::Request& req, httplib::Response& res) {
    openai(parse_openai_request(parse_body(req), options_.limits), res);
  });
  const auto chat = guarded([this, openai](const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req);
    // The messages again, in the client's key order (json sorts keys; a template may print them).
    const auto ordered = nlohmann::ordered_json::parse(req.body);
    const auto messages = ordered.is_object() && ordered.contains("messages") ? ordered["messages"] : nlohmann::ordered_json();
    CompletionRequest request = parse_chat_request(body, messages, options_.limits);
    request.prompt_ids = {chat_->tokens(request.messages)};
    openai(std::move(request), res);
  });
  const auto health = [this](const httplib::Request&, httplib::Response& res) {
    if (service_.draining())
      send_json(res, 503, {{"status", "draining"}});
    else
      send_json(res, 200, {{"status", "ok"},
                           {"active_requests", service_.active_jobs()},
                           {"cancelled_requests", service_.cancelled_jobs()}});
  };
  const int64_t started = unix_seconds();
  const json model_entry = {{"id", options_.model_name}, {"object", "model"}, {"created", started}, {"owned_by", "megatron.cpp"}};
  const auto models = [model_entry](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, {{"object", "list"}, {"data", json::array({model_entry})}});
  };
  const auto model = [this, model_entry](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.path.substr(std::string("/v1/models/").size());
    if (id == options_.model_name) return send_json(res, 200, model_entry);
    send_error(res, 404, "model", "no model '" + id + "'; this server serves '" + options_.model_name + "'");
  };

  // Each path answers its own method and 405 for the others.
  const auto not_allowed = [](const std::string& allow) {
    return [allow](const httplib::Request& req, httplib::Response& res) {
      res.set_header("Allow", allow);
      send_error(res, 405, "", req.method + " " + req.path + " is not allowed; use " + allow);
    };
  };
  struct Route {
    std::string path, method;
    httplib::Server::Handler handler;
  };
  const std::vector<Route> routes = {{"/api", "PUT", megatron_api},          {"/v1/completions", "POST", completions},
                                     {"/completions", "POST", completions}, {"/v1/chat/completions", "POST", chat},
                                     {"/chat/completions", "POST", chat},   {"/health", "GET", health},
                                     {"/v1/models", "GET", models}};
  s.Get(R"(/v1/models/(.+))", model);
  for (const Route& r : routes) {
    const auto handler = [&](const std::string& method) { return method == r.method ? r.handler : not_allowed(r.method); };
    s.Get(r.path, handler("GET"));
    s.Post(r.path, handler("POST"));
    s.Put(r.path, handler("PUT"));
    s.Patch(r.path, handler("PATCH"));
    s.Delete(r.path, handler("DELETE"));
  }
  // httplib's own refusals (no route, body too large, unreadable request) get a JSON body too.
  const int64_t max_body = options_.max_body_bytes;
  s.set_error_handler([max_body](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message = "the request could not be read (HTTP " + std::to_string(res.status) + ")";
    if (res.status == 404) message = "no endpoint " + req.method + " " + req.path;
    if (res.status == 413)
      message = req.get_header_value("Content-Type") == "application/x-www-form-urlencoded"
                    ? "a form-encoded body is limited to 8192 bytes: send JSON with Content-Type: application/json "
                      "(curl -d sends a form unless told -H 'Content-Type: application/json')"
                    : "the request body is larger than the server's " + std::to_string(max_body) +
                          " bytes (--max-request-bytes)";
    send_error(res, res.status, "", message);
  });
}

}  // namespace mt
