#include "engine/request.h"

namespace latentserve {

std::string Request::finish_reason_name() const {
  if (aborted) return "abort";
  switch (finish_reason) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::None: break;
  }
  return "";
}

Request::Request(int64_t seq_id, std::string id, std::vector<int32_t> prompt, SamplingParams params,
                 std::string user_id, int32_t completion_index)
    : seq_id(seq_id), id(std::move(id)), user_id(user_id.empty() ? this->id : std::move(user_id)),
      completion_index(completion_index), prompt(std::move(prompt)), params(std::move(params)),
      rng(this->params.seed, uint64_t(completion_index)), arrival_time(Clock::now()) {}

std::vector<int32_t> Request::all_tokens() const {
  std::vector<int32_t> t = prompt;
  t.insert(t.end(), output.begin(), output.end());
  return t;
}

}  // namespace latentserve
