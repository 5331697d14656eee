// The official OpenAI Node client (npm `openai`, pinned in tests/package-lock.json) talks to
// the server: tests/server/openai_client_check.js runs its checks (chat and completions,
// streaming, logprobs, n, errors as the client's typed exceptions) and, as the reference for
// chat prompts, renders the template with @huggingface/jinja and tokenizes with HF tokenizers.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>

#include "server/test_server.h"

namespace latentserve::testing {
namespace {

TEST(OpenAiClient, OfficialNodeClientChecksPass) {
  ASSERT_EQ(std::system("node --version > /dev/null 2>&1"), 0) << "node is not installed (scripts/install-deps.sh installs it)";
  const std::filesystem::path tests_dir = std::filesystem::path(LATENTSERVE_FIXTURES_DIR).parent_path();
  ASSERT_TRUE(std::filesystem::exists(tests_dir / "node_modules" / "openai"))
      << "npm module 'openai' missing: run scripts/install-deps.sh (npm ci in tests/)";
  TestServer server;
  const std::string cmd = "node '" + (tests_dir / "server" / "openai_client_check.js").string() + "' '" + server.url() +
                          "' '" + server.model_name() + "' '" + server.dir().string() + "' 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  std::array<char, 4096> buf;
  for (size_t n; (n = fread(buf.data(), 1, buf.size(), pipe)) > 0;) output.append(buf.data(), n);
  const int status = pclose(pipe);
  EXPECT_EQ(WEXITSTATUS(status), 0) << output;
  EXPECT_NE(output.find("all checks passed"), std::string::npos) << output;
  std::printf("%s", output.c_str());
}

}  // namespace
}  // namespace latentserve::testing
