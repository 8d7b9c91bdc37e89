// Owns the sample sources, Megatron's pretraining sampler and micro-batch buffers (see train_data.h).
#include "train/train_data.h"

#include <limits>

#include "base/error.h"
#include "data/mock_dataset.h"

namespace mt {

namespace {
void write_sample(const GptSample& sample, int64_t index, const SampleRows& rows) {
  int32_t *tokens = rows.tokens, *labels = rows.labels;
  float* loss_mask = rows.loss_mask;
  const size_t s = sample.tokens.size();
  for (size_t i = 0; i < s; ++i) {
    // Token ids come from a tokenizer whose vocabulary the model was sized for; a 32-bit id is
    // what the embedding takes.
    MT_CHECK(sample.tokens[i] >= 0 && sample.labels[i] >= 0 &&
             sample.tokens[i] <= std::numeric_limits<int32_t>::max() &&
             sample.labels[i] <= std::numeric_limits<int32_t>::max())
        << "sample " << index << " holds a token id outside [0, 2^31)";
    tokens[i] = static_cast<int32_t>(sample.tokens[i]);
    labels[i] = static_cast<int32_t>(sample.labels[i]);
    loss_mask[i] = sample.loss_mask[i];
  }
  // Positions lie in [0, s), so they fit in 32 bits.
  if (rows.position_ids)
    for (size_t i = 0; i < s; ++i) rows.position_ids[i] = static_cast<int32_t>(sample.position_ids[i]);
  if (rows.document_start)
    for (size_t i = 0; i < s; ++i) rows.document_start[i] = static_cast<int32_t>(sample.document_start[i]);
}

SampleRows basic_rows(int32_t* tokens, int32_t* labels, float* loss_mask) {
  SampleRows rows;
  rows.tokens = tokens;
  rows.labels = labels;
  rows.loss_mask = loss_mask;
  return rows;
}
}  // namespace

DatasetSampleSource::DatasetSampleSource(std::shared_ptr<const GptSampleDataset> dataset, SampleExtras extras)
    : dataset_(std::move(dataset)), extras_(extras) {
  MT_CHECK(dataset_ != nullptr) << "DatasetSampleSource needs a dataset";
}

void DatasetSampleSource::read(int64_t index, int32_t* tokens, int32_t* labels, float* loss_mask) const {
  write_sample(dataset_->get_sample(index), index, basic_rows(tokens, labels, loss_mask));
}

void DatasetSampleSource::read_rows(int64_t index, const SampleRows& rows) const {
  write_sample(dataset_->get_sample(index), index, rows);
}

TrainData build_gpt_train_data(const GptDataConfig& config, const std::array<int64_t, 3>& sizes,
                               GptDataBuildStats* stats) {
  const auto splits = build_gpt_datasets(config, sizes, stats);
  TrainData data;
  std::shared_ptr<const SampleSource>* out[3] = {&data.train, &data.valid, &data.test};
  for (int i = 0; i < 3; ++i)
    if (splits[i])
      *out[i] = std::make_shared<DatasetSampleSource>(
          splits[i], SampleExtras{config.gpt.reset_position_ids, config.gpt.reset_attention_mask});
  return data;
}

const SampleSource* TrainData::split(Split s) const {
  switch (s) {
    case Split::train: return train.get();
    case Split::valid: return valid.get();
    case Split::test: return test.get();
  }
  return nullptr;
}

TrainData build_mock_train_data(int64_t vocab_size, int64_t sequence_length, uint64_t seed, bool eod_mask_loss,
                                const std::array<int64_t, 3>& sizes, SampleExtras extras) {
  MT_CHECK(seed <= std::numeric_limits<uint32_t>::max())
      << "--seed " << seed << " is too large: the data shuffle (numpy's RandomState) takes a 32-bit seed";
  GptDatasetConfig config;
  config.sequence_length = sequence_length;
  config.random_seed = static_cast<uint32_t>(seed);
  config.eod_mask_loss = eod_mask_loss;
  config.reset_position_ids = extras.position_ids;
  config.reset_attention_mask = extras.document_start;
  std::array<std::optional<int64_t>, 3> wanted;
  for (int i = 0; i < 3; ++i) wanted[i] = sizes[i];
  auto splits = build_mock_gpt_datasets(null_tokenizer_ids(vocab_size), wanted, config);
  TrainData data;
  std::shared_ptr<const SampleSource>* out[3] = {&data.train, &data.valid, &data.test};
  for (int i = 0; i < 3; ++i)
    if (sizes[i] > 0 && splits[i])
      *out[i] = std::make_shared<DatasetSampleSource>(
          std::make_shared<SingleGptDataset>(std::make_shared<const GptDataset>(std::move(*splits[i]))), extras);
  return data;
}

PretrainingSampler::PretrainingSampler(int64_t total_samples, int64_t consumed_samples, int64_t micro_batch,
                                       int64_t dp_rank, int64_t dp_size)
    : total_(total_samples), consumed_(consumed_samples), micro_batch_(micro_batch), dp_rank_(dp_rank),
      dp_size_(dp_size) {
  // The sanity checks of MegatronPretrainingSampler.__init__.
  MT_CHECK(total_ > 0) << "no sample to consume: the split is empty";
  MT_CHECK(consumed_ >= 0 && consumed_ < total_)
      << "no samples left to consume: " << consumed_ << " consumed of " << total_;
  MT_CHECK(micro_batch_ > 0 && dp_size_ > 0 && dp_rank_ >= 0 && dp_rank_ < dp_size_)
      << "bad sampler layout: micro batch " << micro_batch_ << ", dp rank " << dp_rank_ << " of " << dp_size_;
}

std::vector<int64_t> PretrainingSampler::next() {
  const int64_t step = micro_batch_ * dp_size_;
  // drop_last: a partial step at the end of the split is never read.
  MT_CHECK(consumed_ + step <= total_) << "the split ran out of samples after " << consumed_ << " of " << total_
                                       << " (the dataset sizes requested should rule this out)";
  std::vector<int64_t> indices(static_cast<size_t>(micro_batch_));
  for (int64_t i = 0; i < micro_batch_; ++i) indices[static_cast<size_t>(i)] = consumed_ + dp_rank_ * micro_batch_ + i;
  consumed_ += step;
  return indices;
}

void MicroBatchBuffer::fill(const SampleSource& source, const std::vector<int64_t>& sample_indices) {
  const int64_t s = source.sequence_length();
  const size_t n = sample_indices.size() * static_cast<size_t>(s);
  tokens.resize(n);
  labels.resize(n);
  loss_mask.resize(n);
  const SampleExtras extras = source.extras();
  position_ids.resize(extras.position_ids ? n : 0);
  document_start.resize(extras.document_start ? n : 0);
  indices = sample_indices;
  for (size_t j = 0; j < sample_indices.size(); ++j) {
    const size_t off = j * static_cast<size_t>(s);
    SampleRows rows = basic_rows(tokens.data() + off, labels.data() + off, loss_mask.data() + off);
    if (extras.position_ids) rows.position_ids = position_ids.data() + off;
    if (extras.document_start) rows.document_start = document_start.data() + off;
    source.read_rows(sample_indices[j], rows);
  }
  num_tokens = 0.0;
  for (float m : loss_mask) num_tokens += m;
}

MicroBatch MicroBatchBuffer::view(int64_t sequence_length) {
  const int64_t b = static_cast<int64_t>(indices.size());
  MicroBatch batch{TensorView(tokens.data(), DType::i32, {b, sequence_length}),
                   TensorView(labels.data(), DType::i32, {b, sequence_length}),
                   TensorView(loss_mask.data(), DType::f32, {b, sequence_length})};
  if (!position_ids.empty()) batch.position_ids = TensorView(position_ids.data(), DType::i32, {b, sequence_length});
  if (!document_start.empty())
    batch.document_start = TensorView(document_start.data(), DType::i32, {b, sequence_length});
  return batch;
}

}  // namespace mt
