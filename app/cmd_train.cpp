// `megatron train`: maps the option table onto ModelConfig and TrainConfig and runs the trainer.
#include <cstdio>
#include <string>
#include <vector>

#include "app/options.h"
#include "train/trainer.h"

namespace mt {

namespace {

ModelConfig model_config(const Options& o) {
  ModelConfig c;
  c.num_layers = o.integer("--num-layers");
  c.hidden_size = o.integer("--hidden-size");
  if (o.has("--ffn-hidden-size")) c.ffn_hidden_size = o.integer("--ffn-hidden-size");
  c.num_attention_heads = o.integer("--num-attention-heads");
  if (o.has("--num-query-groups")) {
    MT_CHECK(o.flag("--group-query-attention")) << "--num-query-groups needs --group-query-attention";
    c.num_query_groups = o.integer("--num-query-groups");
  } else {
    MT_CHECK(!o.flag("--group-query-attention")) << "--group-query-attention needs --num-query-groups";
  }
  if (o.has("--kv-channels")) c.kv_channels = o.integer("--kv-channels");
  c.seq_length = o.integer("--seq-length");
  if (o.has("--max-position-embeddings")) c.max_position_embeddings = o.integer("--max-position-embeddings");
  c.position_embedding_type =
      o.text("--position-embedding-type") == "rope" ? PositionEmbedding::rope : PositionEmbedding::learned_absolute;
  c.rotary_base = o.real("--rotary-base");
  c.normalization = o.text("--normalization") == "RMSNorm" ? Normalization::rmsnorm : Normalization::layernorm;
  c.norm_epsilon = static_cast<float>(o.real("--norm-epsilon"));
  MT_CHECK(!(o.flag("--swiglu") && o.flag("--openai-gelu"))) << "--swiglu and --openai-gelu exclude each other";
  c.activation = o.flag("--swiglu") ? Activation::swiglu : o.flag("--openai-gelu") ? Activation::gelu_tanh
                                                                                    : Activation::gelu;
  c.add_bias_linear = !o.flag("--disable-bias-linear");
  c.hidden_dropout = static_cast<float>(o.real("--hidden-dropout"));
  c.attention_dropout = static_cast<float>(o.real("--attention-dropout"));
  c.init_method_std = static_cast<float>(o.real("--init-method-std"));
  MT_CHECK(o.has("--vocab-size")) << "pass --vocab-size (synthetic data needs the vocabulary size)";
  c.vocab_size = o.integer("--vocab-size");
  c.make_vocab_size_divisible_by = o.integer("--make-vocab-size-divisible-by");
  c.untie_embeddings_and_output_weights = o.flag("--untie-embeddings-and-output-weights");
  c.attention_impl = o.text("--attention-backend") == "unfused" ? AttentionImpl::unfused : AttentionImpl::flash;
  return c;
}

TrainConfig train_config(const Options& o) {
  TrainConfig t;
  t.micro_batch_size = o.integer("--micro-batch-size");
  if (o.has("--global-batch-size")) t.global_batch_size = o.integer("--global-batch-size");
  t.train_iters = o.integer("--train-iters");
  t.log_interval = o.integer("--log-interval");
  t.seed = static_cast<uint64_t>(o.integer("--seed"));
  t.optimizer.lr = static_cast<float>(o.real("--lr"));
  t.optimizer.weight_decay = static_cast<float>(o.real("--weight-decay"));
  t.optimizer.adam_beta1 = static_cast<float>(o.real("--adam-beta1"));
  t.optimizer.adam_beta2 = static_cast<float>(o.real("--adam-beta2"));
  t.optimizer.adam_eps = static_cast<float>(o.real("--adam-eps"));
  t.optimizer.clip_grad = static_cast<float>(o.real("--clip-grad"));
  return t;
}

}  // namespace

int cmd_train(const std::vector<std::string>& args) {
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") {
      std::fputs(options_help("train").c_str(), stdout);
      return 0;
    }
  const Options options = parse_options("train", args);
  if (options.flag("--print-config")) {
    std::fputs(options.to_yaml().c_str(), stdout);
    return 0;
  }
  const ModelConfig model = model_config(options);
  const TrainConfig train = train_config(options);
  Trainer trainer(model, train);
  std::printf("model: %s\nparameters: %lld\n", trainer.model().config().summary().c_str(),
              static_cast<long long>(trainer.model().params().numel()));
  std::fflush(stdout);
  trainer.run([](const std::string& line) {
    std::puts(line.c_str());
    std::fflush(stdout);
  });
  return 0;
}

}  // namespace mt
