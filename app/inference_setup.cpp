#include "app/inference_setup.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "app/tokenizer_flags.h"
#include "base/error.h"
#include "train/checkpoint_args.h"
#include "train/checkpoint_reader.h"

namespace mt {

InferenceSetup::InferenceSetup() = default;
InferenceSetup::~InferenceSetup() = default;

std::unique_ptr<InferenceSetup> open_for_inference(const Options& o, Communicator* world) {
  MT_CHECK(o.has("--load")) << "pass --load DIR: a checkpoint (megatron convert --loader hf makes one from a Hugging "
                            << "Face model)";
  std::optional<int64_t> step;
  if (o.has("--ckpt-step")) step = o.integer("--ckpt-step");
  auto s = std::make_unique<InferenceSetup>();
  s->device = select_device(o, world);
  if (!world || world->rank() == 0) std::fprintf(stderr, "%s\n", s->device.summary.c_str());
  s->checkpoint = std::make_unique<CheckpointReader>(o.text("--load"), step);
  const CheckpointReader& checkpoint = *s->checkpoint;
  ModelConfig& model = s->model;
  apply_model_record(checkpoint.manifest().model, checkpoint.dir() + "/manifest.json", model);
  // Settings that change the function but not the tensors: the command line's replace the record.
  if (o.given("--norm-epsilon")) model.norm_epsilon = static_cast<float>(o.real("--norm-epsilon"));
  if (o.given("--rotary-base")) model.rotary_base = o.real("--rotary-base");
  MT_CHECK(!(o.flag("--bf16") && o.flag("--fp16"))) << "pass one of --bf16 and --fp16";
  s->activation_dtype = o.flag("--bf16") ? DType::bf16 : o.flag("--fp16") ? DType::f16 : checkpoint.manifest().params_dtype;
  model.seq_length = model.max_position_embeddings;
  model.hidden_dropout = model.attention_dropout = 0.0f;
  model.tensor_model_parallel_size = world ? world->size() : 1;
  // Megatron's inference launchers pass the layout; here the ranks are the tensor-parallel group.
  MT_CHECK(!o.has("--tensor-model-parallel-size") || o.integer("--tensor-model-parallel-size") == model.tensor_model_parallel_size)
      << "--tensor-model-parallel-size " << o.integer("--tensor-model-parallel-size") << " with "
      << model.tensor_model_parallel_size << " ranks: inference splits each layer over all its ranks; launch "
      << o.integer("--tensor-model-parallel-size") << " ranks (mpirun -np " << o.integer("--tensor-model-parallel-size") << ")";
  MT_CHECK(o.integer("--pipeline-model-parallel-size") == 1)
      << "--pipeline-model-parallel-size " << o.integer("--pipeline-model-parallel-size")
      << ": pipeline-parallel inference is not implemented in megatron.cpp; use tensor parallelism (mpirun -np N)";
  if (model.moe.enabled()) {
    MoeConfig& m = model.moe;
    m.expert_model_parallel_size = o.integer("--expert-model-parallel-size");
    m.expert_tensor_parallel_size = o.has("--expert-tensor-parallel-size") ? o.integer("--expert-tensor-parallel-size") : 0;
    m.dispatcher = o.text("--moe-token-dispatcher-type") == "allgather" ? MoeDispatcher::allgather : MoeDispatcher::alltoall;
  } else {
    MT_CHECK(o.integer("--expert-model-parallel-size") == 1)
        << "--expert-model-parallel-size " << o.integer("--expert-model-parallel-size") << ": the checkpoint in "
        << checkpoint.dir() << " holds a model without experts";
  }
  model.finalize();
  // Records written before they named the expert bias: the saved biases say it.
  for (int64_t i = 0; i < model.num_layers && model.moe.enabled() && !model.moe.expert_bias; ++i)
    model.moe.expert_bias = s->checkpoint->has("buffer", expert_bias_name(i));

  MT_CHECK(has_tokenizer_flags(o) || !checkpoint.manifest().tokenizer.is_null())
      << "checkpoint " << checkpoint.dir() << " records no tokenizer; pass the tokenizer flags (--tokenizer-type ...)";
  const TokenizerOptions tokenizer_flags = has_tokenizer_flags(o) ? tokenizer_options(o)
      : tokenizer_options_from_record(checkpoint.manifest().tokenizer, checkpoint.dir() + "/manifest.json");
  s->tokenizer = make_tokenizer(tokenizer_flags);
  MT_CHECK(s->tokenizer->vocab_size() == model.vocab_size)
      << "the tokenizer has " << s->tokenizer->vocab_size() << " tokens but the model " << model.vocab_size;
  return s;
}

void InferenceSetup::load_engine(const Options& o, Communicator* world, int64_t slots, int64_t positions) {
  const int tp = world ? world->size() : 1;
  EngineOptions options;
  options.max_sequence_length = o.has("--inference-max-seq-length") ? o.integer("--inference-max-seq-length")
                                : positions > 0 ? std::min(positions, model.max_position_embeddings)
                                                : model.max_position_embeddings;
  options.slots = slots;
  if (o.has("--inference-dynamic-batching-buffer-size-gb")) {
    const double cap = o.real("--inference-dynamic-batching-buffer-size-gb") * (1ULL << 30);
    const int64_t per_slot = kv_cache_bytes_per_slot(model, options.max_sequence_length);
    const auto fit = static_cast<int64_t>(cap / static_cast<double>(per_slot));
    MT_CHECK(fit >= 1) << "--inference-dynamic-batching-buffer-size-gb " << o.real("--inference-dynamic-batching-buffer-size-gb")
                       << " holds no sequence: one of " << options.max_sequence_length << " positions takes "
                       << per_slot << " bytes of KV cache per rank";
    options.slots = std::min(slots, fit);
  }
  options.max_step_tokens = o.integer("--inference-max-step-tokens");
  options.activation_dtype = activation_dtype;
  options.tp_comm = tp > 1 ? device.world : nullptr;
  if (tp > 1 && model.moe.enabled()) {
    const MoeConfig& m = model.moe;
    groups = make_process_groups(*device.world, {.tp = tp,
                                                 .ep = static_cast<int>(m.expert_model_parallel_size),
                                                 .etp = static_cast<int>(m.expert_tensor_parallel_size)});
    options.experts = {groups->ep.get(), groups->etp.get(), groups->etp_ep.get()};
  }
  engine = std::make_unique<InferenceEngine>(model, *device.backend, &memory, options);
  checkpoint->read_weights(engine->params().params());
  checkpoint->read_buffers(engine->expert_biases());  // the routers' expert biases: route as training did
}

}  // namespace mt
