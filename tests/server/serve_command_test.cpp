// `latentserve serve` as a user runs it: a separate process on a free port that answers,
// and stops cleanly (exit 0) on SIGTERM; bad flags are errors that name them.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "server/test_server.h"

namespace latentserve::testing {
namespace {

namespace fs = std::filesystem;

struct ServeProcess {
  pid_t pid = -1;
  fs::path log;
};

ServeProcess start_serve(const std::vector<std::string>& args, const std::string& tag) {
  ServeProcess p;
  p.log = fs::temp_directory_path() / ("latentserve_serve_" + tag + "_" + std::to_string(getpid()) + ".log");
  p.pid = fork();
  if (p.pid == 0) {
    std::vector<std::string> argv_s = {LATENTSERVE_BINARY, "serve"};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    FILE* out = std::fopen(p.log.c_str(), "w");
    dup2(fileno(out), STDOUT_FILENO);
    dup2(fileno(out), STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return p;
}

std::string read_all(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The port the server printed, or -1 when it exited or took longer than ~20 s.
int wait_for_port(const ServeProcess& p) {
  const std::regex listening(R"(on http://127\.0\.0\.1:(\d+))");
  for (int i = 0; i < 400; ++i) {
    std::smatch m;
    const std::string text = read_all(p.log);
    if (std::regex_search(text, m, listening)) return std::stoi(m[1]);
    int status;
    if (waitpid(p.pid, &status, WNOHANG) == p.pid) return -1;
    usleep(50'000);
  }
  return -1;
}

int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(ServeCommand, AnswersAndStopsOnSigterm) {
  const fs::path dir = make_served_model_dir("cli");
  ServeProcess p = start_serve({"--model", dir.string(), "--port", "0", "--served-model-name", "tiny", "--threads", "1"}, "ok");
  const int port = wait_for_port(p);
  ASSERT_GT(port, 0) << read_all(p.log);
  httplib::Client c("127.0.0.1", port);
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto r = c.Post("/v1/chat/completions",
                  R"({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0})",
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(nlohmann::json::parse(r->body)["usage"]["completion_tokens"].get<int>() > 0, true);
  kill(p.pid, SIGTERM);
  EXPECT_EQ(wait_exit(p.pid), 0) << read_all(p.log);
  EXPECT_NE(read_all(p.log).find("stopped"), std::string::npos) << read_all(p.log);
  fs::remove(p.log);
  fs::remove_all(dir);
}

// `bench serve` against a running `serve`: every request streams its tokens, the JSON counts
// them, and the engine's step time comes back from /metrics.
TEST(ServeCommand, BenchServeLoadsARunningServer) {
  const fs::path dir = make_served_model_dir("bench");
  ServeProcess p = start_serve({"--model", dir.string(), "--port", "0", "--threads", "1", "--kv-cache-mb", "64"}, "bench");
  const int port = wait_for_port(p);
  ASSERT_GT(port, 0) << read_all(p.log);
  const fs::path json_path = fs::temp_directory_path() / ("latentserve_bench_serve_" + std::to_string(getpid()) + ".json");
  const std::string cmd = std::string(LATENTSERVE_BINARY) + " bench serve --url http://127.0.0.1:" + std::to_string(port) +
                          " --concurrency 1,3 --requests 6 --prompt-tokens 9 --max-tokens 5 --vocab 200 --json " +
                          json_path.string() + " > /dev/null 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  kill(p.pid, SIGTERM);
  EXPECT_EQ(wait_exit(p.pid), 0) << read_all(p.log);
  std::ifstream in(json_path);
  const nlohmann::json result = nlohmann::json::parse(in);
  ASSERT_EQ(result["levels"].size(), 2u);
  for (const auto& level : result["levels"]) {
    EXPECT_EQ(level["failed"], 0);
    EXPECT_EQ(level["output_tokens"], 6 * 5);
    EXPECT_GT(level["ttft_ms"]["p50"].get<double>(), 0.0);
    EXPECT_GT(level["tpot_ms"]["p50"].get<double>(), 0.0);
    EXPECT_GT(level["engine_step_ms"].get<double>(), 0.0);
    EXPECT_GT(level["generated_tokens_per_step"].get<double>(), 0.9);
  }
  EXPECT_EQ(result["levels"][1]["concurrency"], 3);
  fs::remove(json_path);
  fs::remove(p.log);
  fs::remove_all(dir);
}

TEST(ServeCommand, BadFlagsNameThemselves) {
  const fs::path dir = make_served_model_dir("cli_bad");
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const Case cases[] = {
      {{"--model", dir.string(), "--max-model-len", "100000"}, "--max-model-len"},
      {{"--model", dir.string(), "--host", "256.1.1.1", "--port", "0"}, "256.1.1.1"},
      {{"--model", (dir / "missing").string()}, "missing"},
  };
  for (const auto& c : cases) {
    ServeProcess p = start_serve(c.args, "bad");
    EXPECT_EQ(wait_exit(p.pid), 1) << read_all(p.log);
    EXPECT_NE(read_all(p.log).find(c.says), std::string::npos) << read_all(p.log);
    fs::remove(p.log);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace latentserve::testing
