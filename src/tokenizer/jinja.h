#pragma once
// A small Jinja interpreter for chat templates, following @huggingface/jinja (the renderer
// transformers.js uses) so output is byte-identical to it: lstrip_blocks and trim_blocks on,
// {%- -%} whitespace control, if/elif/else, for (loop.*, tuple unpacking, `if` filter,
// else), set (also ns.attr and block form), namespace(), literals, slicing, the operators
// and tests chat templates use, the filters trim/length/tojson/first/last/default/join/
// upper/lower/string/int/list/items/reverse..., string methods (startswith, endswith, split,
// strip, lstrip, rstrip, replace, upper, lower, title), dict .items()/.keys()/.values()/.get(),
// raise_exception(). Anything else (macros, call blocks, filters not listed...) is an Error
// naming the construct.
// Like @huggingface/jinja, str.strip/lstrip/rstrip ignore their argument and trim whitespace.
#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace latentserve::tokenizer {

namespace jinja {
struct Node;
}

class JinjaTemplate {
 public:
  explicit JinjaTemplate(const std::string& source);
  ~JinjaTemplate();
  JinjaTemplate(JinjaTemplate&&) noexcept;
  // Variables of the template; objects keep their key order (tojson prints it).
  std::string render(const nlohmann::ordered_json& context) const;

 private:
  std::shared_ptr<jinja::Node> root_;
};

}  // namespace latentserve::tokenizer
