// The {{stage}} stage of {{name}}: passes each item's `{{tensor}}: FP32 [1]` on{{flow}}; an
// item whose {{tensor}} {{refusal}} fails alone with 422.
#include <string>

#include "{{world}}_cpp.h"
#include "tensorplug.hpp"

namespace {

// Nothing when `item` may pass, else its error.
std::expected<void, tp::ItemError> check(const wit::vector<tp::Tensor> &item) {
    auto t = tp::find(item.get_const_view(), "{{tensor}}");
    if (!t) return std::unexpected(std::move(t.error()));
    constexpr int64_t shape[] = {1};
    auto values = tp::values<float>(**t, shape);
    if (!values) return std::unexpected(std::move(values.error()));
    if ((*values)[0] {{refused_if}}f)
        return tp::fail(422, "{{tensor}}: " + std::to_string((*values)[0]) + " {{refusal}} (checked by {{stage}})");
    return {};
}

} // namespace

std::expected<void, wit::string> exports::{{world}}::Init(wit::vector<tp::Parameter> /*parameters*/) {
    return {};
}

wit::vector<std::expected<wit::vector<tp::Tensor>, tp::ItemError>>
exports::{{world}}::{{Stage}}(wit::vector<wit::vector<tp::Tensor>> items) {
    std::vector<std::expected<wit::vector<tp::Tensor>, tp::ItemError>> results;
    for (wit::vector<tp::Tensor> &item : items.get_view()) {
        if (auto checked = check(item); checked)
            results.push_back(std::move(item));
        else
            results.push_back(std::unexpected(std::move(checked.error())));
    }
    return tp::to_wit(std::move(results));
}
