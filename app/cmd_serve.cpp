// `megatron serve`: Megatron's text generation server (PUT /api) and OpenAI-style completions and
// chat completions over a checkpoint's model. Rank 0 listens and runs the generation loop; under mpirun the other
// ranks are its tensor-parallel group and follow its broadcasts. SIGTERM (or SIGINT) drains: new
// requests get 503, those admitted finish, then every rank exits 0. The work is in serve/.
#include <atomic>
#include <csignal>
#include <filesystem>
#include <cstdio>
#include <string>
#include <vector>

#include "app/commands.h"
#include "app/inference_setup.h"
#include "app/options.h"
#include "base/error.h"
#include "data/tokenizer_files.h"
#include "serve/http_server.h"

namespace mt {

namespace {

std::atomic<bool> stop_requested{false};

extern "C" void request_stop(int) { stop_requested = true; }

void install_signal_handlers() {
  struct sigaction action = {};
  action.sa_handler = request_stop;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

}  // namespace

int cmd_serve(const std::vector<std::string>& args, Communicator* world) {
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") {
      std::fputs(options_help("serve").c_str(), stdout);
      return 0;
    }
  const Options o = parse_options("serve", args);
  ServerOptions server_options;
  server_options.host = o.text("--host");
  server_options.port = static_cast<int>(o.integer("--port"));
  server_options.max_body_bytes = o.integer("--max-request-bytes");
  server_options.max_concurrent = o.integer("--max-concurrent-requests");
  server_options.limits.max_prompts = o.integer("--max-prompts-per-request");
  server_options.limits.max_top_logprobs = o.integer("--max-top-logprobs");
  server_options.model_name = o.text("--served-model-name");
  if (o.has("--chat-template")) {  // a file's text, or the template itself
    const std::string value = o.text("--chat-template");
    std::error_code ec;
    server_options.chat_template =
        std::filesystem::is_regular_file(value, ec) ? read_tokenizer_file(value, "--chat-template", "serve") : value;
    MT_CHECK(!server_options.chat_template.empty()) << "--chat-template is empty";
  }
  MT_CHECK(o.integer("--port") >= 0 && o.integer("--port") <= 65535) << "--port " << o.integer("--port") << " is not a port";
  for (const char* name : {"--max-request-bytes", "--max-prompts-per-request", "--max-concurrent-requests"})
    MT_CHECK(o.integer(name) >= 1) << name << " must be at least 1, got " << o.integer(name);
  MT_CHECK(o.integer("--max-top-logprobs") >= 0) << "--max-top-logprobs must be >= 0";

  const int rank = world ? world->rank() : 0;
  const std::unique_ptr<InferenceSetup> setup = open_for_inference(o, world);
  setup->load_engine(o, world, o.integer("--inference-max-requests"), 0);
  Generator generator(*setup->engine, setup->tokenizer->eod());
  GenerationService service(generator, *setup->tokenizer, world, server_options.max_concurrent);
  install_signal_handlers();
  if (rank != 0) {
    service.follow();
    return 0;
  }
  HttpServer server(service, server_options);
  const int port = server.start();
  std::fprintf(stderr,
               "serve: listening on http://%s:%d (PUT /api, POST /v1/completions, POST /v1/chat/completions, GET "
               "/health); %lld sequences of up "
               "to %lld tokens at once\n",
               server_options.host.c_str(), port, static_cast<long long>(setup->engine->options().slots),
               static_cast<long long>(setup->engine->max_sequence_length()));
  service.run(stop_requested);
  server.stop();
  std::fprintf(stderr, "serve: stopped\n");
  return 0;
}

}  // namespace mt
