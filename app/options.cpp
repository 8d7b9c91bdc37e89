#include "app/options.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "app/megatron_flags.h"
#include "base/error.h"

namespace mt {

namespace {
using T = OptionType;
// Flag names and defaults are Megatron-LM's (reference/megatron.md §1).
const std::vector<OptionSpec> kTable = {
    // Model shape.
    {"--num-layers", T::integer, "2", "number of transformer layers", "", "train"},
    {"--hidden-size", T::integer, "128", "transformer hidden size", "", "train"},
    {"--ffn-hidden-size", T::integer, "", "MLP hidden size (default 4h; SwiGLU: 2/3 of that, rounded down to 64)", "", "train"},
    {"--num-attention-heads", T::integer, "4", "number of query heads", "", "train"},
    {"--group-query-attention", T::flag, "", "use grouped-query attention (with --num-query-groups)", "", "train"},
    {"--num-query-groups", T::integer, "", "key/value heads under --group-query-attention", "", "train"},
    {"--kv-channels", T::integer, "", "head dimension (default hidden / heads)", "", "train"},
    {"--seq-length", T::integer, "128", "sequence length", "", "train"},
    {"--max-position-embeddings", T::integer, "", "rows of the learned position table (default seq length)", "", "train"},
    {"--position-embedding-type", T::choice, "learned_absolute", "position embedding (none: neither a table nor RoPE)", "learned_absolute|rope|none", "train"},
    {"--no-position-embedding", T::flag, "", "no learned position table: what --position-embedding-type rope does anyway (without rope: refused)", "", "train"},
    {"--rotary-base", T::real, "10000", "RoPE base (generate, serve: replaces the checkpoint's)", "", "train,generate,serve"},
    {"--rotary-percent", T::real, "1.0", "fraction of each query and key head RoPE rotates: the first int(head dim x this) elements, the rest pass through unrotated", "", "train"},
    {"--rotary-interleaved", T::flag, "", "RoPE rotates the pairs (2i, 2i+1) of a head (RoFormer, GPT-J) instead of (i, i + r/2)", "", "train"},
    {"--use-rotary-position-embeddings", T::flag, "", "the old spelling of --position-embedding-type rope", "", "train"},
    {"--normalization", T::choice, "LayerNorm", "normalization layer", "LayerNorm|RMSNorm", "train"},
    {"--qk-layernorm", T::flag, "", "normalise every query and key head (the model's norm over the head dim, one weight per layer) before RoPE, as Qwen3", "", "train"},
    {"--apply-layernorm-1p", T::flag, "", "zero-centred norm weights: every norm scales by 1 + weight, and the weights start at 0", "", "train"},
    {"--norm-epsilon", T::real, "1e-5", "epsilon of the norms (generate, serve: replaces the checkpoint's)", "", "train,generate,serve"},
    {"--swiglu", T::flag, "", "SwiGLU MLP activation", "", "train"},
    {"--openai-gelu", T::flag, "", "GeLU in its tanh approximation (GPT-2)", "", "train"},
    {"--squared-relu", T::flag, "", "squared ReLU MLP activation, max(x, 0)² (Primer, Nemotron)", "", "train"},
    {"--disable-bias-linear", T::flag, "", "no biases in linear layers", "", "train"},
    {"--hidden-dropout", T::real, "0.1", "dropout after attention and MLP outputs and the embedding", "", "train"},
    {"--attention-dropout", T::real, "0.1", "dropout on attention probabilities", "", "train"},
    {"--init-method-std", T::real, "0.02", "std of the normal weight init", "", "train"},
    {"--vocab-size", T::integer, "", "vocabulary size of the NullTokenizer (ids 0..V-1, EOD = V-1; mock data)", "", "train,preprocess,generate,serve"},
    {"--make-vocab-size-divisible-by", T::integer, "128", "pad the vocabulary to a multiple of this", "", "train"},
    {"--untie-embeddings-and-output-weights", T::flag, "", "separate output layer weights", "", "train"},
    {"--device", T::choice, "auto", "where to run: cuda (NVIDIA GPU, one per rank), cpu, or auto (cuda when built with CUDA and a GPU is visible)", "auto|cpu|cuda", "train,generate,serve"},
    {"--attention-backend", T::choice, "auto", "flash, fused and auto: online softmax (no probabilities stored); unfused and local: stores the probabilities", "flash|fused|auto|unfused|local", "train"},
    // Mixture of experts (moe_config: --num-experts and the --moe-* flags).
    {"--num-experts", T::integer, "", "routed experts per MoE layer (unset: a dense model)", "", "train"},
    {"--moe-layer-freq", T::text, "1", "which layers are MoE: N (every N-th, from layer 0) or a list [1,0,1,...] with one 0/1 per layer", "", "train"},
    {"--moe-ffn-hidden-size", T::integer, "", "each expert's MLP hidden size (default --ffn-hidden-size)", "", "train"},
    {"--moe-shared-expert-intermediate-size", T::integer, "", "hidden size of the shared expert every token also goes through (unset: none)", "", "train"},
    {"--moe-shared-expert-overlap", T::flag, "", "accepted for compatibility; a no-op on CPU (the shared expert runs after the routed ones)", "", "train"},
    {"--moe-router-topk", T::integer, "2", "experts each token is routed to", "", "train"},
    {"--moe-router-score-function", T::choice, "softmax", "the router's score function", "softmax|sigmoid", "train"},
    {"--moe-router-pre-softmax", T::flag, "", "softmax over all experts before the top-k (default: over the chosen k)", "", "train"},
    {"--moe-router-topk-scaling-factor", T::real, "", "multiply the routing weights by this", "", "train"},
    {"--moe-router-num-groups", T::integer, "", "group-limited routing: experts in this many groups (device-limited routing)", "", "train"},
    {"--moe-router-group-topk", T::integer, "", "group-limited routing: groups each token may use", "", "train"},
    {"--moe-router-enable-expert-bias", T::flag, "", "aux-loss-free balancing: a per-expert bias steers the top-k, updated after each step", "", "train"},
    {"--moe-router-bias-update-rate", T::real, "1e-3", "step of the expert-bias update", "", "train"},
    {"--moe-router-dtype", T::choice, "", "keep the router's logits in fp32 under --bf16/--fp16", "fp32|fp64", "train"},
    {"--moe-router-load-balancing-type", T::choice, "aux_loss", "the load-balancing loss, or Sinkhorn-balanced routing", "aux_loss|seq_aux_loss|global_aux_loss|sinkhorn|none", "train"},
    {"--moe-aux-loss-coeff", T::real, "0", "weight of the load-balancing loss (0: none)", "", "train"},
    {"--moe-z-loss-coeff", T::real, "", "weight of the router z-loss (unset: none)", "", "train"},
    {"--moe-expert-capacity-factor", T::real, "", "each expert takes at most this factor times its even share of tokens; the rest are dropped (unset: dropless)", "", "train"},
    {"--moe-pad-expert-input-to-capacity", T::flag, "", "pad every expert's tokens to its capacity (needs --moe-expert-capacity-factor)", "", "train"},
    {"--moe-token-drop-policy", T::choice, "probs", "which tokens an expert over capacity keeps: the highest weights or the earliest positions", "probs|position", "train"},
    {"--moe-token-dispatcher-type", T::choice, "allgather", "how tokens reach the experts' ranks (flex: Megatron's alltoall through DeepEP/HybridEP kernels, run as alltoall)", "allgather|alltoall|flex", "train,generate,serve"},
    {"--moe-grouped-gemm", T::flag, "", "run all local experts in one grouped kernel instead of one GEMM sequence per expert", "", "train"},
    {"--expert-model-parallel-size", T::integer, "1", "ranks the experts are split over (generate, serve: inside the tensor-parallel group)", "", "train,generate,serve"},
    {"--expert-tensor-parallel-size", T::integer, "", "ranks each expert is split over (default --tensor-model-parallel-size; generate, serve: the ranks)", "", "train,generate,serve"},
    // Training (training_config.py: TrainingConfig, ValidationConfig, LoggerConfig).
    {"--micro-batch-size", T::integer, "", "sequences per micro-batch (required)", "", "train"},
    {"--global-batch-size", T::integer, "", "sequences per iteration, a multiple of micro batch x dp (default: micro batch x dp)", "", "train"},
    {"--step-batch-size-schedule", T::text, "", "global batch growing with the tokens consumed: \"THRESHOLD:BATCH ...\" (e.g. \"0:384 200B:768\"; K/M/B/T suffixes); --global-batch-size, if given, must equal its final batch", "", "train"},
    {"--eval-global-batch-size", T::integer, "", "sequences per evaluation iteration, a multiple of micro batch x dp (default: the global batch; under a schedule its final one)", "", "train"},
    {"--train-iters", T::integer, "", "iterations to train (or give --train-samples)", "", "train"},
    {"--train-samples", T::integer, "", "samples to train; iterations = samples // global batch, or under a batch schedule the iterations that reach them (or give --train-iters)", "", "train"},
    {"--log-interval", T::integer, "100", "iterations between log lines", "", "train"},
    {"--log-params-norm", T::flag, "", "log the parameters' L2 norm after the update (\"params norm\")", "", "train"},
    {"--log-progress", T::flag, "", "print a [progress] line (iterations done, time elapsed and left) after each log line, also under mpirun and into pipes (by default only a single-rank run on a terminal shows it); Megatron's progress.txt is not written", "", "train"},
    {"--profile-ops", T::flag, "", "time every op (each waits for its device) and print where the steps after the first went, op by op, when training ends", "", "train"},
    {"--eval-interval", T::integer, "", "iterations between evaluations on the validation split (default: only after training)", "", "train"},
    {"--eval-iters", T::integer, "100", "global batches per evaluation (validation and test); 0 disables evaluation", "", "train"},
    {"--exit-interval", T::integer, "", "stop after an iteration that is a multiple of this (skips the final evaluation)", "", "train"},
    {"--check-weight-hash-across-dp-replicas-interval", T::integer, "", "every N iterations, stop with an error unless all data-parallel replicas hold the same weights", "", "train"},
    {"--exit-duration-in-mins", T::real, "", "stop (saving first, with --save) after the first iteration that ends later than this many minutes after start", "", "train"},
    {"--exit-signal-handler", T::flag, "", "on --exit-signal (any rank), finish the iteration on every rank, save (with --save) and exit 0", "", "train"},
    {"--exit-signal", T::integer, "15", "the signal number --exit-signal-handler waits for (15: SIGTERM; 10: SIGUSR1, which mpirun forwards without ending the job)", "", "train"},
    {"--seed", T::integer, "1234", "random seed (train: init, dropout, data shuffle; generate: sampling)", "", "train,generate"},
    {"--calculate-per-token-loss", T::flag, "", "normalise the loss by the tokens of the global batch, not per micro-batch", "", "train"},
    // Data (data and tokenizer args).
    {"--mock-data", T::flag, "", "train on Megatron's mock dataset instead of --data-path", "", "train"},
    {"--data-path", T::list, "", "dataset prefixes (PREFIX.bin/.idx), optionally weighted: P, or P1 P2 ..., or W1 P1 W2 P2 ...", "", "train"},
    {"--train-data-path", T::list, "", "the train split's own prefixes (weighted like --data-path); with --valid/--test-data-path", "", "train"},
    {"--valid-data-path", T::list, "", "the validation split's own prefixes", "", "train"},
    {"--test-data-path", T::list, "", "the test split's own prefixes", "", "train"},
    {"--data-cache-path", T::text, "", "directory for the dataset index cache (default: PREFIX/cache/GPTDataset_indices, as Megatron)", "", "train"},
    {"--tokenizer-type", T::choice, "", "tokenizer (default: GPT2BPETokenizer when --vocab-file and --merge-file are given, as Megatron's scripts expect; else NullTokenizer with --vocab-size)",
     "GPT2BPETokenizer|SentencePieceTokenizer|GPTSentencePieceTokenizer|Llama2Tokenizer|HuggingFaceTokenizer|TikTokenizer|NullTokenizer",
     "train,preprocess,generate,serve"},
    {"--vocab-file", T::text, "", "GPT2BPETokenizer: vocab.json / encoder.json", "", "train,preprocess,generate,serve"},
    {"--merge-file", T::text, "", "GPT2BPETokenizer: merges.txt / vocab.bpe", "", "train,preprocess,generate,serve"},
    {"--tokenizer-model", T::text, "", "SentencePieceTokenizer: the .model file; HuggingFaceTokenizer: the directory with tokenizer.json and tokenizer_config.json; TikTokenizer: the vocabulary (.json or .tiktoken)", "", "train,preprocess,generate,serve"},
    {"--null-tokenizer-eod-id", T::integer, "", "NullTokenizer: the EOD id (default vocab size - 1)", "", "train,preprocess,generate,serve"},
    {"--vocab-extra-ids", T::integer, "0", "SentencePieceTokenizer: number of <extra_id_i> tokens added", "", "train,preprocess,generate,serve"},
    {"--tiktoken-pattern", T::choice, "v2", "TikTokenizer: Megatron's split regex", "v1|v2", "train,preprocess,generate,serve"},
    {"--tiktoken-num-special-tokens", T::integer, "1000", "TikTokenizer: ids 0..N-1 are special tokens; vocabulary rank r is id r + N", "", "train,preprocess,generate,serve"},
    {"--tokenizer-special-tokens", T::list, "", "TikTokenizer: the special tokens first (default <unk> <s> </s> <mask> <pad> <cls> <sep>, which a list must include)", "", "train,preprocess,generate,serve"},
    {"--split", T::text, "", "train,valid,test proportions of --data-path (default 969,30,1; mock data always uses 1,1,1)", "", "train"},
    {"--reset-position-ids", T::flag, "", "restart position ids after each end-of-document token", "", "train"},
    {"--reset-attention-mask", T::flag, "", "tokens attend only within their own document (causal mask cut at each end-of-document token)", "", "train"},
    {"--eod-mask-loss", T::flag, "", "no loss on tokens that follow an end-of-document token", "", "train"},
    // Learning rate and weight decay (SchedulerConfig; optimizer_param_scheduler.py).
    {"--lr", T::real, "", "peak learning rate (required)", "", "train"},
    {"--decoupled-lr", T::real, "", "peak learning rate of the word embedding and the output layer (default --lr), on the same schedule", "", "train"},
    {"--decoupled-min-lr", T::real, "", "final learning rate of the word embedding and the output layer (default --min-lr)", "", "train"},
    {"--min-lr", T::real, "0.0", "learning rate floor of the decay", "", "train"},
    {"--lr-decay-style", T::choice, "linear", "learning-rate decay after warmup", "constant|linear|cosine|inverse-square-root|WSD", "train"},
    {"--lr-decay-iters", T::integer, "", "iterations to decay over (default --train-iters)", "", "train"},
    {"--lr-decay-samples", T::integer, "", "samples to decay over (default --train-samples)", "", "train"},
    {"--lr-warmup-iters", T::integer, "0", "iterations of linear warmup", "", "train"},
    {"--lr-warmup-samples", T::integer, "0", "samples of linear warmup (sample-based training)", "", "train"},
    {"--lr-warmup-fraction", T::real, "", "warmup as a fraction of the decay length (instead of --lr-warmup-iters/-samples)", "", "train"},
    {"--lr-warmup-init", T::real, "0.0", "learning rate at the start of warmup", "", "train"},
    {"--lr-wsd-decay-style", T::choice, "exponential", "anneal shape of the WSD schedule", "exponential|linear|cosine|minus_sqrt", "train"},
    {"--lr-wsd-decay-iters", T::integer, "", "iterations of the WSD anneal", "", "train"},
    {"--lr-wsd-decay-samples", T::integer, "", "samples of the WSD anneal (sample-based training)", "", "train"},
    {"--weight-decay", T::real, "0.01", "decoupled weight decay (not applied to biases and norms)", "", "train"},
    {"--apply-wd-to-qk-layernorm", T::flag, "", "weight decay applies to the query and key norms (--qk-layernorm) too", "", "train"},
    {"--start-weight-decay", T::real, "", "weight decay at the start of a linear/cosine ramp", "", "train"},
    {"--end-weight-decay", T::real, "", "weight decay at the end of a linear/cosine ramp", "", "train"},
    {"--weight-decay-incr-style", T::choice, "constant", "weight-decay ramp over the run", "constant|linear|cosine", "train"},
    // Optimizer.
    // Precision and recomputation.
    {"--bf16", T::flag, "", "bf16 parameters and activations, f32 main parameters and gradients (generate, serve: bf16 activations)", "", "train,generate,serve"},
    {"--fp16", T::flag, "", "fp16 parameters and activations with dynamic loss scaling (generate, serve: fp16 activations)", "", "train,generate,serve"},
    {"--loss-scale", T::real, "", "constant loss scale (fp16/bf16); unset: dynamic scaling under --fp16", "", "train"},
    {"--initial-loss-scale", T::real, "4294967296", "starting dynamic loss scale", "", "train"},
    {"--min-loss-scale", T::real, "1.0", "floor of the dynamic loss scale", "", "train"},
    {"--loss-scale-window", T::integer, "1000", "clean iterations before the loss scale grows", "", "train"},
    {"--hysteresis", T::integer, "2", "overflows tolerated before the loss scale backs off", "", "train"},
    {"--accumulate-allreduce-grads-in-fp32", T::flag, "", "accumulate gradients in fp32 (always the case here)", "", "train"},
    {"--recompute-activations", T::flag, "", "same as --recompute-granularity selective", "", "train"},
    {"--recompute-granularity", T::choice, "", "recompute the attention core (selective) or whole layers (full) in the backward", "full|selective", "train"},
    {"--recompute-method", T::choice, "", "full recomputation: all layers in groups (uniform) or the first N (block)", "uniform|block", "train"},
    {"--moe-layer-recompute", T::flag, "", "the old spelling of --recompute-granularity selective --recompute-modules moe (added to the modules)", "", "train"},
    {"--recompute-modules", T::list, "", "selective recomputation: core_attn (the default), layernorm and moe_act (always recomputed here), mlp (dense layers: rerun fc1 in the backward instead of saving its output), shared_experts (the same for the shared expert), moe (keep nothing of an MoE block: rerun its forward, dispatch included, before its backward)", "", "train"},
    {"--fine-grained-activation-offloading", T::flag, "", "Megatron's offloading of chosen activations to host memory: no effect on the CPU backend, where they live already; not implemented on CUDA", "", "train"},
    {"--offload-modules", T::list, "", "the modules --fine-grained-activation-offloading offloads (no effect here)", "", "train"},
    {"--recompute-num-layers", T::integer, "1", "layers per recompute group (uniform) or recomputed layers (block)", "", "train"},
    {"--adam-beta1", T::real, "0.9", "Adam beta1", "", "train"},
    {"--adam-beta2", T::real, "0.999", "Adam beta2", "", "train"},
    {"--adam-eps", T::real, "1e-8", "Adam epsilon", "", "train"},
    {"--clip-grad", T::real, "1.0", "global gradient-norm clip (0 disables)", "", "train"},
    {"--optimizer", T::choice, "adam", "adam (AdamW); muon: Muon for the weight matrices (their momentum orthogonalised by a Newton-Schulz iteration), Adam for the rest; dist_muon: Megatron's deprecated name for muon with the distributed optimizer", "adam|muon|dist_muon", "train"},
    {"--muon-momentum", T::real, "0.9", "Muon's momentum", "", "train"},
    {"--muon-nesterov", T::flag, "", "Muon: Nesterov momentum", "", "train"},
    {"--muon-no-split-qkv", T::flag, "", "Muon: orthogonalise the fused QKV weight whole, not its Q, K and V apart", "", "train"},
    {"--muon-scale-mode", T::choice, "spectral", "Muon's update scale for a matrix [out, in]: spectral sqrt(max(out, in)), unit_rms_norm sqrt(out/in), shape_scaling sqrt(max(1, out/in))", "spectral|unit_rms_norm|shape_scaling", "train"},
    {"--muon-extra-scale-factor", T::real, "1.0", "Muon: a further factor on the update", "", "train"},
    {"--muon-fp32-matmul-prec", T::choice, "medium", "Muon's Newton-Schulz products: medium in bf16 (f32 accumulation), high in f32", "medium|high", "train"},
    {"--muon-coefficient-type", T::choice, "quintic", "Muon's Newton-Schulz coefficient set", "simple|quintic|polar_express|cans|aol|deepseekv4|cubic5", "train"},
    {"--muon-num-ns-steps", T::integer, "5", "Muon's Newton-Schulz iterations", "", "train"},
    {"--muon-tp-mode", T::choice, "duplicated", "Muon under tensor parallelism: duplicated and distributed orthogonalise each matrix whole (the same update on every layout), blockwise each rank's shard alone", "blockwise|duplicated|distributed", "train"},
    {"--muon-scalar-optimizer", T::choice, "adam", "the optimizer of what Muon does not update (embeddings, output layer, norms, biases)", "adam", "train"},
    // Parallelism.
    {"--tensor-model-parallel-size", T::integer, "1", "ranks each layer is split over (heads, MLP width and vocabulary)", "", "train"},
    {"--pipeline-model-parallel-size", T::integer, "1", "pipeline stages the layers are split over (1F1B, or interleaved with virtual stages; the first stage holds the embedding, the last the output layer and loss)", "", "train"},
    {"--decoder-first-pipeline-num-layers", T::integer, "", "layers on the first pipeline stage (uneven split; the others share the rest evenly)", "", "train"},
    {"--decoder-last-pipeline-num-layers", T::integer, "", "layers on the last pipeline stage (uneven split)", "", "train"},
    {"--account-for-embedding-in-pipeline-split", T::flag, "", "count the embedding as one layer when splitting the layers over pipeline stages", "", "train"},
    {"--account-for-loss-in-pipeline-split", T::flag, "", "count the output layer and loss as one layer when splitting the layers over pipeline stages", "", "train"},
    {"--num-layers-per-virtual-pipeline-stage", T::integer, "", "layers per model chunk (interleaved schedule)", "", "train"},
    {"--pipeline-model-parallel-layout", T::text, "", "every virtual pipeline stage's layers spelled out, stages separated by |: E embedding, t transformer layer, L loss; x*N and (...)*N repeat (\"Et*3|(tt|)*2L\")", "", "train"},
    {"--num-virtual-stages-per-pipeline-rank", T::integer, "", "model chunks per pipeline rank (interleaved schedule)", "", "train"},
    {"--microbatch-group-size-per-virtual-pipeline-stage", T::integer, "", "micro-batches run through one model chunk before the next (interleaved; default the pipeline size)", "", "train"},
    {"--overlap-grad-reduce", T::flag, "", "start each gradient bucket's data-parallel reduction as soon as the last micro-batch's backward has filled it", "", "train"},
    {"--ddp-bucket-size", T::integer, "0", "elements per gradient bucket with --overlap-grad-reduce (0: Megatron's max(40M, 1M x dp))", "", "train"},
    {"--overlap-param-gather", T::flag, "", "distributed optimizer: start the updated parameters' all-gathers after the step and wait for each bucket only when the next forward reaches it (needs --overlap-grad-reduce)", "", "train"},
    {"--ddp-average-in-collective", T::flag, "", "average the gradients in the data-parallel reduction instead of scaling them by 1/dp before a sum", "", "train"},
    {"--use-distributed-optimizer", T::flag, "", "shard the optimizer state over the data-parallel ranks (ZeRO-1): gradients reduce-scattered, parameters all-gathered", "", "train"},
    {"--num-distributed-optimizer-instances", T::integer, "1", "distributed optimizer: shard its state within each of N groups of dp/N consecutive data-parallel ranks; the shards' gradients are then all-reduced across the groups", "", "train"},
    {"--use-tp-pp-dp-mapping", T::flag, "", "order ranks tp-cp-ep-pp-dp (data parallel outermost) instead of tp-cp-ep-dp-pp", "", "train"},
    {"--sequence-parallel", T::flag, "", "split norms, dropout and residual adds along the sequence over the tensor-parallel ranks", "", "train"},
    {"--context-parallel-size", T::integer, "1", "ranks each sequence is split over (two of its 2 x cp chunks per rank, for balanced causal attention)", "", "train"},
    {"--cp-comm-type", T::list, "p2p", "how context-parallel attention exchanges keys and values: p2p (ring, overlapped with the blocks' attention), a2a (all-to-all to heads and back; heads and query groups divisible by cp) or allgather; one value, or the same one per layer", "", "train"},
    // Checkpoints.
    {"--save", T::text, "", "directory to save checkpoints into (iter_NNNNNNN/ and latest_checkpointed_iteration.txt, as Megatron)", "", "train"},
    {"--save-interval", T::integer, "", "iterations between checkpoints (needs --save; a checkpoint is also saved at the end and on --exit-interval)", "", "train"},
    {"--save-retain-interval", T::integer, "", "keep only the checkpoints whose iteration is a multiple of N (and the latest); N a multiple of --save-interval", "", "train"},
    {"--load", T::text, "", "directory to resume from (its latest checkpoint, or --ckpt-step); any parallel layout loads", "", "train,generate,serve"},
    {"--ckpt-step", T::integer, "", "load this iteration's checkpoint instead of the latest", "", "train,convert,generate,serve"},
    {"--no-save-optim", T::flag, "", "save weights only (no optimizer state)", "", "train"},
    {"--no-load-optim", T::flag, "", "load weights only; start the optimizer state fresh", "", "train"},
    {"--no-save-rng", T::flag, "", "do not save the random state (the seed)", "", "train"},
    {"--no-load-rng", T::flag, "", "keep this run's --seed instead of the checkpoint's", "", "train"},
    {"--override-opt_param-scheduler", T::flag, "", "resume with the command line's learning-rate schedule where it differs from the checkpoint's (default: refused)", "", "train"},
    {"--override-opt-param-scheduler", T::flag, "", "same as --override-opt_param-scheduler", "", "train"},
    {"--use-checkpoint-opt_param-scheduler", T::flag, "", "resume with the checkpoint's learning-rate schedule, whatever the schedule flags say", "", "train"},
    {"--use-checkpoint-opt-param-scheduler", T::flag, "", "same as --use-checkpoint-opt_param-scheduler", "", "train"},
    {"--finetune", T::flag, "", "load weights only and start at iteration 0 with fresh optimizer state and schedule", "", "train"},
    {"--log-memory", T::flag, "", "print what each layer keeps between forward and backward, tensor by tensor (the activation ledger)", "", "train"},
    {"--use-checkpoint-args", T::flag, "", "take the model's architecture (layers, sizes, heads, norm, activation, positions, vocabulary) from the --load checkpoint", "", "train"},
    {"--exit-on-missing-checkpoint", T::flag, "", "with --load: fail instead of starting from scratch when there is no checkpoint", "", "train"},
    // Configuration files.
    {"--config", T::text, "", "YAML file of options (keys are flag names without --, - or _); flags override it", "", "train"},
    {"--print-config", T::flag, "", "print the resolved options as YAML and exit", "", "train"},
    // megatron preprocess (tools/preprocess_data.py, tools/merge_datasets.py).
    {"--input", T::text, "", "JSON-lines file or glob of files (files read in sorted order); with --merge: a directory of .bin/.idx pairs or a glob of prefixes", "", "preprocess"},
    {"--json-keys", T::list, "text", "keys to extract from each JSON line (one output pair per key)", "", "preprocess"},
    {"--output-prefix", T::text, "", "output path without the _{key}_document.bin/.idx suffix (with --merge: without .bin/.idx)", "", "preprocess"},
    {"--append-eod", T::flag, "", "append the tokenizer's end-of-document token to each non-empty document", "", "preprocess"},
    {"--workers", T::integer, "1", "tokenizing threads (the output does not depend on it)", "", "preprocess"},
    {"--merge", T::flag, "", "merge the datasets of --input into --output-prefix (tools/merge_datasets.py)", "", "preprocess"},
    // megatron generate (Megatron's inference scripts; --top_k and --top_p also in kebab-case).
    {"--prompts", T::list, "", "prompts to continue (NullTokenizer: space-separated token ids)", "", "generate"},
    {"--prompt-file", T::text, "", "JSON lines, each an object with a \"prompt\" string", "", "generate"},
    {"--num-tokens-to-generate", T::integer, "30", "tokens to generate per prompt", "", "generate"},
    {"--temperature", T::real, "1.0", "sampling temperature (0: greedy)", "", "generate"},
    {"--top_k", T::integer, "", "sample from the k most likely tokens; 1: greedy, 0: no limit (default 1)", "", "generate"},
    {"--top-k", T::integer, "", "same as --top_k", "", "generate"},
    {"--top_p", T::real, "", "sample from the smallest set of tokens whose probability reaches p (with --top_k 0, or within the top k for k > 1; default 0: off)", "", "generate"},
    {"--top-p", T::real, "", "same as --top_p", "", "generate"},
    {"--return-log-probs", T::flag, "", "report the log-probability of every prompt and generated token", "", "generate"},
    {"--top-n-logprobs", T::integer, "0", "report the n most likely tokens at each generated position", "", "generate"},
    {"--stop-words", T::list, "", "end a generation where its text first contains one of these (cut before it)", "", "generate"},
    {"--output-path", T::text, "", "write one JSON line per prompt (prompt, generated_text, generated_tokens, logprobs)", "", "generate"},
    {"--inference-max-requests", T::integer, "8", "prompts generated at once (KV-cache slots)", "", "generate,serve"},
    {"--inference-max-seq-length", T::integer, "", "prompt + generated tokens a sequence may hold (default: the model's positions)", "", "generate,serve"},
    {"--inference-max-step-tokens", T::integer, "512", "new tokens one forward step takes (longer prompts are prefilled in pieces)", "", "generate,serve"},
    {"--inference-dynamic-batching-buffer-size-gb", T::real, "", "cap on KV-cache memory per rank, in GiB: fewer sequences are held at once when they would not fit", "", "generate,serve"},
    // megatron serve (Megatron's text generation server; OpenAI-style completions).
    {"--host", T::text, "127.0.0.1", "address to listen on (0.0.0.0: every interface)", "", "serve"},
    {"--port", T::integer, "5000", "port to listen on (0: any free port, printed)", "", "serve"},
    {"--max-request-bytes", T::integer, "1048576", "largest request body accepted (larger: 413)", "", "serve"},
    {"--max-prompts-per-request", T::integer, "128", "prompts one request may carry (Megatron's limit)", "", "serve"},
    {"--max-concurrent-requests", T::integer, "64", "requests admitted at once, waiting or running (more: 429)", "", "serve"},
    {"--max-top-logprobs", T::integer, "20", "largest OpenAI logprobs = n", "", "serve"},
    {"--served-model-name", T::text, "megatron", "the model's name in OpenAI responses and /v1/models", "", "serve"},
    {"--tensor-model-parallel-size", T::integer, "", "the ranks' tensor-parallel size, as Megatron's launchers pass it: must equal the number of ranks (inference splits each layer over all of them)", "", "generate,serve"},
    {"--pipeline-model-parallel-size", T::integer, "1", "1: inference runs no pipeline stages (Megatron's launchers pass it)", "", "generate,serve"},
    {"--chat-template", T::text, "", "Jinja chat template for /v1/chat/completions: the text, or a file holding it (default: the one in the tokenizer's tokenizer_config.json)", "", "serve"},
    // megatron plan (also takes every train option).
    {"--world-size", T::integer, "1", "ranks the run would use (tp x pp x dp; dp takes the rest)", "", "plan"},
    {"--json", T::flag, "", "print the plan as one JSON object (a ranks list with each rank's bytes)", "", "plan"},
    {"--search", T::flag, "", "list the layouts (tp, sp, pp, v, micro-batch, recompute, distributed optimizer) that fit the memory budget, fastest first by a step-time model", "", "plan"},
    {"--device", T::choice, "auto", "the device planned for: cpu, or a GPU model (cuda: h100) whose peak FLOP/s, link and network bandwidth and memory --search uses; auto: the device train would pick here", "a100|h100|h200|cpu|cuda|auto", "plan"},
    {"--memory-budget-gb", T::real, "", "--search: memory per device in GiB (default: the device's)", "", "plan"},
    {"--top", T::integer, "10", "--search: how many layouts to list", "", "plan"},
    // megatron convert (tools/checkpoint/convert.py).
    {"--model-type", T::choice, "GPT", "the model family (only GPT models exist here)", "GPT", "convert"},
    {"--loader", T::choice, "", "what --load-dir holds: a megatron.cpp checkpoint or a Hugging Face model directory", "megatron|hf", "convert"},
    {"--saver", T::choice, "", "what to write into --save-dir", "megatron|hf", "convert"},
    {"--load-dir", T::text, "", "checkpoint directory (its latest iteration, or --ckpt-step) or Hugging Face model directory to read", "", "convert"},
    {"--save-dir", T::text, "", "directory to write the converted checkpoint or Hugging Face model into", "", "convert"},
    {"--target-tensor-parallel-size", T::integer, "1", "--saver megatron: the tensor-parallel size of the files written", "", "convert"},
    {"--target-pipeline-parallel-size", T::integer, "1", "--saver megatron: the pipeline-parallel size of the files written", "", "convert"},
};

bool listed(const OptionSpec& o, const std::string& command) {
  const std::string commands = std::string(",") + o.commands + ",";
  return commands.find("," + command + ",") != std::string::npos;
}

// `megatron plan` reads a train command line as it stands: every train option, and its own.
// A name may have one entry per command (--device: train's backend, plan's device model): the
// command's own entry wins.
const OptionSpec* find(const std::string& command, const std::string& name) {
  for (const OptionSpec& o : kTable)
    if (name == o.name && listed(o, command)) return &o;
  if (command == "plan")
    for (const OptionSpec& o : kTable)
      if (name == o.name && listed(o, "train")) return &o;
  return nullptr;
}

// Levenshtein distance, for "did you mean" hints.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

void check_value(const OptionSpec& o, const std::string& v) {
  char* end = nullptr;
  switch (o.type) {
    case T::integer:
      std::strtoll(v.c_str(), &end, 10);
      MT_CHECK(!v.empty() && *end == '\0') << o.name << " expects an integer, got '" << v << "'";
      break;
    case T::real:
      std::strtod(v.c_str(), &end);
      MT_CHECK(!v.empty() && *end == '\0') << o.name << " expects a number, got '" << v << "'";
      break;
    case T::choice: {
      std::string choices = "|";
      choices.append(o.choices).append("|");
      std::string wanted = "|";
      wanted.append(v).append("|");
      if (choices.find(wanted) != std::string::npos) break;
      const MegatronArgument* m = find_megatron_argument(o.name);
      std::string megatron_choices = m ? std::string("|") + m->choices + "|" : "";
      if (megatron_choices.find(wanted) != std::string::npos) {
        const MegatronFlagStatus* s = megatron_value_status(o.name, v);
        MT_FAIL() << o.name << " " << v << " is not implemented in megatron.cpp (implemented: " << o.choices
                  << "): " << (s ? s->why : "this Megatron-LM feature") << (s && s->planned ? " (planned)" : "");
      }
      MT_FAIL() << o.name << " must be one of " << o.choices << ", got '" << v << "'";
      break;
    }
    case T::flag:
    case T::text:
    case T::list: break;
  }
}
}  // namespace

const std::vector<OptionSpec>& option_table() { return kTable; }

namespace {
// train and plan read Megatron's command lines: its flags that the table lacks are accepted
// without effect or refused by name (megatron_flags.h), never reported as unknown.
bool reads_megatron_flags(const std::string& command) { return command == "train" || command == "plan"; }

const OptionSpec& lookup(const std::string& command, const std::string& name, const std::string& where) {
  if (const OptionSpec* o = find(command, name)) return *o;
  std::string best;
  size_t best_d = 4;
  const auto consider = [&](const std::string& candidate) {
    const size_t d = edit_distance(name, candidate);
    if (d < best_d) best = candidate, best_d = d;
  };
  for (const OptionSpec& c : kTable)
    if (find(command, c.name)) consider(c.name);
  if (reads_megatron_flags(command))
    for (const MegatronArgument& m : megatron_arguments()) consider(m.name);
  MT_FAIL() << "unknown option " << name << where << " for 'megatron " << command << "'"
            << (best.empty() ? "" : "; did you mean " + best + "?") << " (see --help)";
}

// A Megatron flag the table lacks: its note when accepted (values as given), or an error naming
// the missing feature.
MegatronNote megatron_flag_note(const MegatronArgument& m, const std::vector<std::string>& values, const std::string& where) {
  const MegatronFlagStatus* s = megatron_flag_status(m.name);
  const std::string given = std::string(m.name) + (values.empty() ? "" : " " + values.front()) + (values.size() > 1 ? " ..." : "");
  if (s && s->treatment == MegatronTreatment::accepted) return {given, s->why};
  if (is_megatron_default(m, values)) return {given, "Megatron's default: nothing to do"};
  if (s && s->same_here && values.size() == 1 && values.front() == s->same_here) return {given, "what megatron.cpp does"};
  MT_FAIL() << m.name << where << " is not implemented in megatron.cpp: " << (s ? s->why : "this Megatron-LM feature")
            << (s && s->planned ? " (planned)" : "");
}

// The values a Megatron flag that the table lacks takes after args[i], as argparse reads them
// (inline: the value of "--name=value"); checked against Megatron's choices.
std::vector<std::string> megatron_flag_values(const MegatronArgument& m, const std::vector<std::string>& args,
                                              size_t& i, const std::string* inline_value) {
  std::vector<std::string> given;
  const auto is_value = [&](size_t j) { return j < args.size() && args[j].rfind("--", 0) != 0; };
  if (inline_value) {
    MT_CHECK(m.values != MegatronValues::flag) << m.name << " is a flag and takes no value";
    given.push_back(*inline_value);
  } else if (m.values == MegatronValues::one) {
    MT_CHECK(i + 1 < args.size()) << m.name << " needs a value";
    given.push_back(args[++i]);
  } else if (m.values == MegatronValues::optional && is_value(i + 1)) {
    given.push_back(args[++i]);
  } else if (m.values == MegatronValues::list) {
    while (is_value(i + 1)) given.push_back(args[++i]);
  }
  const std::string choices = std::string("|") + m.choices + "|";
  for (const std::string& v : given)
    MT_CHECK(!*m.choices || choices.find("|" + v + "|") != std::string::npos)
        << m.name << " must be one of " << m.choices << ", got '" << v << "'";
  return given;
}

// Options from a YAML mapping: `hidden_size: 768`, `swiglu: true`, `lr: 3.0e-4`.
void load_config_file(const std::string& command, const std::string& path, std::map<std::string, std::string>& values,
                      std::vector<MegatronNote>& notes) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    MT_FAIL() << "cannot read config file " << path;
  } catch (const YAML::Exception& e) {
    MT_FAIL() << path << ": not valid YAML: " << e.what();
  }
  if (root.IsNull()) return;
  MT_CHECK(root.IsMap()) << path << ": expected a mapping of option names to values";
  for (const auto& item : root) {
    std::string key = item.first.as<std::string>();
    for (char& ch : key)
      if (ch == '_') ch = '-';
    const std::string name = "--" + key;
    const MegatronArgument* m = find(command, name) || !reads_megatron_flags(command) ? nullptr : find_megatron_argument(name);
    if (m) {
      std::vector<std::string> given;
      if (m->values != MegatronValues::flag) {
        MT_CHECK(item.second.IsScalar()) << path << ": value of " << key << " must be a scalar";
        given.push_back(item.second.as<std::string>());
      }
      notes.push_back(megatron_flag_note(*m, given, " in " + path));
      continue;
    }
    const OptionSpec& o = lookup(command, name, " in " + path);
    MT_CHECK(name != "--config") << path << ": a config file cannot include another";
    if (o.type == T::list && item.second.IsSequence()) {
      std::string joined;
      for (const auto& element : item.second) {
        MT_CHECK(element.IsScalar()) << path << ": " << key << " must be a list of scalars";
        joined += (joined.empty() ? "" : "\n") + element.as<std::string>();
      }
      MT_CHECK(!joined.empty()) << path << ": " << key << " is an empty list";
      values[name] = joined;
      continue;
    }
    MT_CHECK(item.second.IsScalar()) << path << ": value of " << item.first.as<std::string>() << " must be a scalar";
    std::string value = item.second.as<std::string>();
    if (o.type == T::flag) {
      MT_CHECK(value == "true" || value == "false") << path << ": " << key << " is a flag; use true or false";
      if (value == "false") {
        values.erase(name);
        continue;
      }
      value = "1";
    }
    check_value(o, value);
    values[name] = value;
  }
}
}  // namespace

Options parse_options(const std::string& command, const std::vector<std::string>& argv) {
  Options out;
  const std::vector<std::string> args =
      reads_megatron_flags(command) ? replace_legacy_megatron_flags(argv, out.legacy_notes_) : argv;
  for (const OptionSpec& o : kTable)
    if (find(command, o.name) == &o && *o.default_value) out.values_[o.name] = o.default_value;
  std::vector<std::pair<std::string, std::string>> cli;
  // Megatron's parser lets an option repeat (its scripts append overrides to shared argument
  // lists): as argparse, the last value wins, and a note says so when the values differ.
  std::map<std::string, std::string> seen;
  const auto first_time = [&seen, &out](const std::string& name, const std::string& value) {
    const auto [it, fresh] = seen.emplace(name, value);
    if (!fresh && it->second != value) {
      const auto shown = [](std::string v) {  // a list's values are joined by newlines
        std::replace(v.begin(), v.end(), '\n', ' ');
        return v;
      };
      out.repeat_notes_.push_back(name + " ('" + shown(it->second) + "', then '" + shown(value) + "')");
      it->second = value;
    }
    return fresh;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i], value;
    const bool inline_value = name.find('=') != std::string::npos;
    if (inline_value) {
      value = name.substr(name.find('=') + 1);
      name = name.substr(0, name.find('='));
    }
    MT_CHECK(name.rfind("--", 0) == 0) << "unexpected argument '" << args[i] << "' (options start with --)";
    if (const MegatronArgument* m = find(command, name) || !reads_megatron_flags(command) ? nullptr : find_megatron_argument(name)) {
      const std::vector<std::string> given = megatron_flag_values(*m, args, i, inline_value ? &value : nullptr);
      std::string joined;
      for (const std::string& v : given) joined += (joined.empty() ? "" : " ") + v;
      if (!first_time(name, joined)) continue;
      out.megatron_notes_.push_back(megatron_flag_note(*m, given, ""));
      out.given_[name] = true;
      continue;
    }
    const OptionSpec& o = lookup(command, name, "");
    if (o.type == T::flag) {
      MT_CHECK(!inline_value) << name << " is a flag and takes no value";
      value = "1";
    } else if (o.type == T::list && !inline_value) {
      // Every following word up to the next --option (values are stored joined by newlines).
      MT_CHECK(i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) << name << " needs at least one value";
      while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
        MT_CHECK(args[i + 1].find('\n') == std::string::npos) << name << ": a value holds a newline";
        value += (value.empty() ? "" : "\n") + args[++i];
      }
    } else if (!inline_value) {
      MT_CHECK(i + 1 < args.size()) << name << " needs a value";
      value = args[++i];
    }
    check_value(o, value);
    first_time(name, value);
    cli.emplace_back(name, value);  // later entries overwrite earlier ones below
    out.given_[name] = true;
  }
  // The config file sits between the defaults and the command line.
  for (const auto& [name, value] : cli)
    if (name == "--config") load_config_file(command, value, out.values_, out.megatron_notes_);
  for (const auto& [name, value] : cli) out.values_[name] = value;
  return out;
}

std::string Options::to_yaml() const {
  std::string out;
  for (const auto& [name, value] : values_) {
    if (name == "--config" || name == "--print-config") continue;
    std::string key = name.substr(2);
    for (char& ch : key)
      if (ch == '-') ch = '_';
    const OptionSpec* o = nullptr;
    for (const OptionSpec& c : kTable)
      if (name == c.name) o = &c;
    if (o && o->type == T::list) {
      YAML::Emitter e;
      e << YAML::Flow << YAML::BeginSeq;
      for (const std::string& v : list(name)) e << YAML::DoubleQuoted << v;
      e << YAML::EndSeq;
      out += key + ": " + e.c_str() + "\n";
      continue;
    }
    out += key + ": " + (o && o->type == T::flag ? "true" : value) + "\n";
  }
  return out;
}

bool Options::has(const std::string& name) const { return values_.count(name) > 0; }

long long Options::integer(const std::string& name) const { return std::strtoll(text(name).c_str(), nullptr, 10); }
double Options::real(const std::string& name) const { return std::strtod(text(name).c_str(), nullptr); }
bool Options::flag(const std::string& name) const { return values_.count(name) > 0; }

std::vector<std::string> Options::list(const std::string& name) const {
  std::vector<std::string> out;
  std::string item;
  for (char c : text(name)) {
    if (c == '\n') out.push_back(std::move(item)), item.clear();
    else item += c;
  }
  out.push_back(item);
  return out;
}

const std::string& Options::text(const std::string& name) const {
  auto it = values_.find(name);
  MT_CHECK(it != values_.end()) << name << " has no value and no default";
  return it->second;
}

bool implemented_for_train(const std::string& name) { return find("train", name) != nullptr; }

std::string Options::megatron_notes_line() const {
  std::vector<std::pair<std::string, std::string>> by_why;  // why, the flags given
  for (const MegatronNote& n : megatron_notes_) {
    auto it = std::find_if(by_why.begin(), by_why.end(), [&](const auto& w) { return w.first == n.why; });
    if (it == by_why.end()) by_why.emplace_back(n.why, n.given);
    else it->second += ", " + n.given;
  }
  std::string line, legacy;
  for (const auto& [why, flags] : by_why) line += (line.empty() ? "" : "; ") + flags + " (" + why + ")";
  for (const auto& [given, reading] : legacy_notes_) legacy += (legacy.empty() ? "" : "; ") + given + " " + reading;
  if (!line.empty()) line = "Megatron-LM flags accepted without effect: " + line;
  if (!legacy.empty()) line += (line.empty() ? "" : ". ") + std::string("Megatron-LM's old flags read as today's: ") + legacy;
  std::string repeats;
  for (const std::string& r : repeat_notes_) repeats += (repeats.empty() ? "" : "; ") + r;
  if (!repeats.empty()) line += (line.empty() ? "" : ". ") + std::string("Given twice, the last value used (as argparse): ") + repeats;
  return line;
}

std::string options_help(const std::string& command) {
  std::ostringstream s;
  s << "usage: megatron " << command << " [options]\n\noptions:\n";
  for (const OptionSpec& o : kTable) {
    if (find(command, o.name) != &o) continue;
    std::string left = std::string("  ") + o.name;
    if (o.type == T::choice) left += std::string(" {") + o.choices + "}";
    else if (o.type == T::integer) left += " N";
    else if (o.type == T::real) left += " X";
    else if (o.type == T::text) left += " S";
    else if (o.type == T::list) left += " S [S ...]";
    s << left << std::string(left.size() < 44 ? 44 - left.size() : 1, ' ') << o.help;
    if (*o.default_value) s << " (default " << o.default_value << ")";
    s << "\n";
  }
  if (reads_megatron_flags(command)) {
    int counts[3] = {0, 0, 0};
    for (const MegatronArgument& m : megatron_arguments()) {
      const MegatronFlagStatus* st = megatron_flag_status(m.name);
      ++counts[implemented_for_train(m.name) ? 0 : st && st->treatment == MegatronTreatment::accepted ? 1 : 2];
    }
    s << "\nMegatron-LM's other flags: of its " << megatron_arguments().size() << ", " << counts[0]
      << " are implemented (above), " << counts[1] << " are accepted without effect (kernel, fusion and framework "
      << "choices; listed in the log's first lines) and " << counts[2]
      << " are refused as not implemented, by name. `megatron flags` lists each.\n";
  }
  return s.str();
}

}  // namespace mt
