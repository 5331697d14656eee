#include "server/async_engine.h"

#include <fmt/format.h>

#include <future>

namespace latentserve::server {

std::vector<RequestOutput> OutputStream::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  ready_.wait_for(lock, timeout, [&] { return !queue_.empty() || unfinished_ == 0 || failure_; });
  std::vector<RequestOutput> out(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
  queue_.clear();
  return out;
}

bool OutputStream::finished() const {
  std::lock_guard lock(mutex_);
  return (unfinished_ == 0 || failure_) && queue_.empty();
}

bool OutputStream::all_finished() const {
  std::lock_guard lock(mutex_);
  return unfinished_ == 0 || failure_;
}

std::optional<std::string> OutputStream::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

void OutputStream::push(RequestOutput output) {
  {
    std::lock_guard lock(mutex_);
    if (output.finished) --unfinished_;
    queue_.push_back(std::move(output));
  }
  ready_.notify_all();
}

void OutputStream::fail(const std::string& why) {
  {
    std::lock_guard lock(mutex_);
    failure_ = why;
  }
  ready_.notify_all();
}

AsyncEngine::AsyncEngine(LLMEngine& engine) : engine_(engine) {
  refresh_snapshot();
  thread_ = std::thread([this] { loop(); });
}

AsyncEngine::~AsyncEngine() { shutdown(); }

void AsyncEngine::post(std::function<void()> command, bool submission) {
  {
    std::lock_guard lock(mutex_);
    // One critical section with abort_all()'s flag: a submission is either refused here or
    // queued before abort_all()'s command (which then aborts it).
    if (stopping_ || (submission && !accepting_)) throw EngineUnavailable("the server is shutting down");
    commands_.push_back(std::move(command));
  }
  wake_.notify_one();
}

std::shared_ptr<OutputStream> AsyncEngine::submit(const std::string& id, std::vector<int32_t> prompt,
                                                  SamplingParams params, std::vector<std::string> stop) {
  auto stream = std::make_shared<OutputStream>(params.n);
  std::promise<void> accepted;
  auto result = accepted.get_future();
  post([&] {
    try {
      if (!failure_.empty()) throw EngineUnavailable("the engine failed earlier: " + failure_);
      engine_.add_request(id, std::move(prompt), std::move(params), std::move(stop));
      streams_[id] = stream;
      accepted.set_value();
    } catch (...) {
      accepted.set_exception(std::current_exception());
    }
  }, /*submission=*/true);
  result.get();  // the engine thread runs every posted command, even while stopping
  return stream;
}

void AsyncEngine::abort(const std::string& id) {
  try {
    post([this, id] {
      engine_.abort(id);
      streams_.erase(id);
    });
  } catch (const EngineUnavailable&) {
    // Shutting down: shutdown() aborts every request itself.
  }
}

void AsyncEngine::abort_all() {
  {
    std::lock_guard lock(mutex_);
    accepting_ = false;  // a submission posted after this is refused; one posted before is aborted below
  }
  try {
    post([this] { abort_every_stream(); });
  } catch (const EngineUnavailable&) {
  }
}

void AsyncEngine::abort_every_stream() {
  for (const auto& [id, stream] : streams_) engine_.abort(id);  // abort() leaves streams_ alone
}

EngineSnapshot AsyncEngine::snapshot() const {
  std::lock_guard lock(mutex_);
  return snapshot_;
}

void AsyncEngine::shutdown() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void AsyncEngine::deliver(std::vector<RequestOutput> outputs) {
  for (auto& o : outputs) {
    auto it = streams_.find(o.id);
    if (it == streams_.end()) continue;  // aborted by its client
    auto stream = it->second;
    stream->push(std::move(o));
    if (stream->all_finished()) streams_.erase(it);
  }
}

void AsyncEngine::refresh_snapshot() {
  EngineSnapshot s;
  s.healthy = failure_.empty();
  s.failure = failure_;
  const EngineMetrics& m = engine_.metrics();
  s.n_running = m.n_running;
  s.n_waiting = m.n_waiting;
  s.kv = engine_.kv_manager().stats();
  s.n_steps = m.n_steps;
  s.prompt_tokens = m.prompt_tokens_total;
  s.prompt_tokens_cached = m.prompt_tokens_cached;
  s.generated_tokens = m.generated_tokens;
  s.n_finished = m.n_finished;
  s.n_aborted = m.n_aborted;
  s.n_preemptions = m.n_preemptions;
  s.n_streams = int64_t(streams_.size());
  s.step_seconds = m.step_seconds;
  s.forward_seconds = m.forward_seconds;
  std::lock_guard lock(mutex_);
  snapshot_ = std::move(s);
}

void AsyncEngine::loop() {
  auto fail_all = [&](const std::string& why) {
    for (auto& [id, stream] : streams_) stream->fail(why);
    streams_.clear();
  };
  auto step_once = [&] {
    try {
      deliver(engine_.step());
    } catch (const std::exception& e) {
      // The engine's state is unknown after a failed step: stop serving, say why.
      failure_ = fmt::format("engine step failed: {}", e.what());
      fail_all(failure_);
    }
    refresh_snapshot();
  };
  for (;;) {
    std::vector<std::function<void()>> commands;
    bool stopping;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !commands_.empty() || (failure_.empty() && engine_.has_unfinished()); });
      commands.swap(commands_);
      stopping = stopping_;
    }
    for (auto& c : commands) c();
    if (!commands.empty()) refresh_snapshot();
    if (stopping) break;
    if (failure_.empty() && engine_.has_unfinished()) step_once();
  }
  // Shutting down: every live request ends as "abort" and gives its blocks back.
  abort_every_stream();
  while (failure_.empty() && engine_.has_unfinished()) step_once();
  fail_all("the server is shutting down");
  refresh_snapshot();
}

}  // namespace latentserve::server
