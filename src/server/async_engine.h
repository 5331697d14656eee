#pragma once
// AsyncEngine: the one thread that owns an LLMEngine. HTTP threads submit requests and abort
// them; the outputs of each request arrive in its own OutputStream. The engine thread runs
// the submissions and aborts that came in, then one engine step, and sleeps on a condition
// variable while there is no work. LLMEngine itself is never touched by another thread.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/llm_engine.h"

namespace latentserve::server {

// The engine cannot take requests: it is shutting down, or a step failed.
struct EngineUnavailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The outputs of one request (all of its n completions), in the order the engine made them.
class OutputStream {
 public:
  explicit OutputStream(int32_t n_completions) : unfinished_(n_completions) {}

  // What arrived, waiting up to `timeout` when nothing has; empty once finished and drained.
  std::vector<RequestOutput> wait(std::chrono::milliseconds timeout);
  bool finished() const;                       // every completion finished, or the engine failed, and all read
  bool all_finished() const;                   // every completion finished (outputs may still be unread)
  std::optional<std::string> failure() const;  // why the engine failed this request

  void push(RequestOutput output);
  void fail(const std::string& why);

 private:
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<RequestOutput> queue_;
  int32_t unfinished_;
  std::optional<std::string> failure_;
};

// A consistent view of the engine for /metrics and /health, refreshed after every step.
struct EngineSnapshot {
  bool healthy = true;
  std::string failure;                 // when not healthy
  int64_t n_running = 0, n_waiting = 0;
  KvCacheStats kv;
  int64_t n_steps = 0, prompt_tokens = 0, prompt_tokens_cached = 0, generated_tokens = 0;
  int64_t n_finished = 0, n_aborted = 0, n_preemptions = 0;
  int64_t n_streams = 0;               // requests with a stream still open on the engine thread
  double step_seconds = 0, forward_seconds = 0;  // summed over every step (forward: the model's part)
};

class AsyncEngine {
 public:
  explicit AsyncEngine(LLMEngine& engine);
  ~AsyncEngine();  // shutdown()

  // Queues the request on the engine thread and waits until it is accepted. Throws the
  // engine's Error (a bad request: it names the parameter) or EngineUnavailable.
  std::shared_ptr<OutputStream> submit(const std::string& id, std::vector<int32_t> prompt, SamplingParams params,
                                       std::vector<std::string> stop);
  // Ends the request at the next step and frees its KV blocks; its stream is dropped. No-op
  // for an unknown or finished id. Never blocks.
  void abort(const std::string& id);
  // Ends every request at the next step; their streams get the final outputs (finish_reason
  // "abort"), so responses in flight can end properly before the server stops. Later
  // submissions are refused (EngineUnavailable). Never blocks.
  void abort_all();
  EngineSnapshot snapshot() const;
  // Aborts every request (their streams finish with "abort"), then stops the thread.
  void shutdown();

 private:
  void post(std::function<void()> command, bool submission = false);
  void loop();
  void deliver(std::vector<RequestOutput> outputs);
  void refresh_snapshot();
  void abort_every_stream();  // engine thread: every request with a stream ends at the next step

  LLMEngine& engine_;
  mutable std::mutex mutex_;             // guards commands_, stopping_, snapshot_
  std::condition_variable wake_;
  std::vector<std::function<void()>> commands_;
  bool stopping_ = false;
  bool accepting_ = true;                // false after abort_all(): submit() throws EngineUnavailable
  EngineSnapshot snapshot_;
  // Engine thread only:
  std::unordered_map<std::string, std::shared_ptr<OutputStream>> streams_;
  std::string failure_;                  // why a step failed; empty while the engine serves
  std::thread thread_;
};

}  // namespace latentserve::server
