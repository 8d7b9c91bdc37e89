// Owns how the training loop reads data: a SampleSource per split (sample i -> tokens, labels,
// loss mask), Megatron's MegatronPretrainingSampler (which global sample indices each
// micro-batch of each data-parallel rank reads), the host buffers of one micro-batch, the
// --mock-data sources (Megatron's MockGPTDataset splits with NullTokenizer ids) and the sources
// read from .bin/.idx files (--data-path).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "data/blended_dataset.h"
#include "data/gpt_data_builder.h"
#include "data/gpt_dataset.h"
#include "model/gpt.h"

namespace mt {

// The per-token extras a source provides besides tokens, labels and loss mask (Megatron's
// _get_ltor_masks_and_position_ids under --reset-position-ids / --reset-attention-mask).
struct SampleExtras {
  bool position_ids = false;    // positions restart at 0 after each EOD
  bool document_start = false;  // each token attends only within its own document
};

// Where read_rows writes one sample, [sequence_length] each; the extras only when the source has them.
struct SampleRows {
  int32_t* tokens = nullptr;
  int32_t* labels = nullptr;
  float* loss_mask = nullptr;
  int32_t* position_ids = nullptr;    // when extras().position_ids
  int32_t* document_start = nullptr;  // when extras().document_start: index of the token's document's first token
};

// One split's samples, as the loop sees them. Sample i is a pure function of i.
class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int64_t size() const = 0;
  virtual int64_t sequence_length() const = 0;
  // Writes sample i: tokens and labels [sequence_length] (i32) and the loss mask (f32, 0 or 1).
  virtual void read(int64_t index, int32_t* tokens, int32_t* labels, float* loss_mask) const = 0;
  virtual SampleExtras extras() const { return {}; }
  // Writes sample i with its extras (a source without extras writes what read() does).
  virtual void read_rows(int64_t index, const SampleRows& rows) const {
    read(index, rows.tokens, rows.labels, rows.loss_mask);
  }
};

// A Megatron GPTDataset split (tokens = text[:-1], labels = text[1:], loss mask from pad/EOD):
// one GptDataset (mock or read from .bin/.idx files) or a blend of several (data/blended_dataset.h).
class DatasetSampleSource : public SampleSource {
 public:
  // extras: what the datasets' config asks for (--reset-position-ids / --reset-attention-mask).
  explicit DatasetSampleSource(std::shared_ptr<const GptSampleDataset> dataset, SampleExtras extras = {});
  int64_t size() const override { return dataset_->size(); }
  int64_t sequence_length() const override { return dataset_->sequence_length(); }
  void read(int64_t index, int32_t* tokens, int32_t* labels, float* loss_mask) const override;
  SampleExtras extras() const override { return extras_; }
  void read_rows(int64_t index, const SampleRows& rows) const override;

 private:
  std::shared_ptr<const GptSampleDataset> dataset_;
  SampleExtras extras_;
};

// The three splits; valid/test may be null (no evaluation).
struct TrainData {
  std::shared_ptr<const SampleSource> train, valid, test;
  const SampleSource* split(Split s) const;
};

// --mock-data: Megatron's mock splits ("1,1,1", whatever --split says) with NullTokenizer ids for
// `vocab_size` (eod = vocab_size - 1, no pad), sized as requested. A size of 0 builds no split.
// extras: --reset-position-ids / --reset-attention-mask.
TrainData build_mock_train_data(int64_t vocab_size, int64_t sequence_length, uint64_t seed, bool eod_mask_loss,
                                const std::array<int64_t, 3>& sizes, SampleExtras extras = {});

// --data-path / --train-data-path ...: the splits built from .bin/.idx files (indices cached as
// the config says), sized as requested. A size of 0 builds no split.
TrainData build_gpt_train_data(const GptDataConfig& config, const std::array<int64_t, 3>& sizes,
                               GptDataBuildStats* stats = nullptr);

// Megatron's MegatronPretrainingSampler (data_samplers.py): walks global sample indices from
// `consumed_samples`; every micro_batch × dp consecutive indices form one step, of which rank r
// reads [r·micro_batch, (r+1)·micro_batch). Resuming = starting from the consumed count.
class PretrainingSampler {
 public:
  PretrainingSampler(int64_t total_samples, int64_t consumed_samples, int64_t micro_batch, int64_t dp_rank,
                     int64_t dp_size);
  // The next micro-batch of this rank. Throws when the split is exhausted (Megatron's
  // StopIteration), which the sizes requested from the dataset rule out.
  std::vector<int64_t> next();
  // Global samples consumed by all ranks so far.
  int64_t consumed() const { return consumed_; }

 private:
  int64_t total_, consumed_, micro_batch_, dp_rank_, dp_size_;
};

// One micro-batch in host memory, [b, s] row-major, with its mask's token count.
struct MicroBatchBuffer {
  std::vector<int32_t> tokens, labels;
  std::vector<float> loss_mask;
  std::vector<int32_t> position_ids;    // empty unless the source has them (SampleExtras)
  std::vector<int32_t> document_start;  // empty unless the source has them
  std::vector<int64_t> indices;  // the global sample indices it holds
  double num_tokens = 0.0;       // Σ loss_mask

  // Reads `indices` from `source`.
  void fill(const SampleSource& source, const std::vector<int64_t>& sample_indices);
  MicroBatch view(int64_t sequence_length);
};

}  // namespace mt
