// The preprocess stage of {{name}}: passes each item's `x: FP32 [1]` on to predict; an
// item whose x is negative fails alone with 422.
#include <string>

#include "preprocessor_cpp.h"
#include "tensorplug.hpp"

namespace {

// Nothing when `item` may pass, else its error.
std::expected<void, tp::ItemError> check(const wit::vector<tp::Tensor> &item) {
    auto x = tp::find(item.get_const_view(), "x");
    if (!x) return std::unexpected(std::move(x.error()));
    constexpr int64_t shape[] = {1};
    auto values = tp::values<float>(**x, shape);
    if (!values) return std::unexpected(std::move(values.error()));
    if ((*values)[0] < 0.0f)
        return tp::fail(422, "x: " + std::to_string((*values)[0]) + " is negative (checked by preprocess)");
    return {};
}

} // namespace

std::expected<void, wit::string> exports::preprocessor::Init(wit::vector<tp::Parameter> /*parameters*/) {
    return {};
}

wit::vector<std::expected<wit::vector<tp::Tensor>, tp::ItemError>>
exports::preprocessor::Preprocess(wit::vector<wit::vector<tp::Tensor>> items) {
    std::vector<std::expected<wit::vector<tp::Tensor>, tp::ItemError>> results;
    for (wit::vector<tp::Tensor> &item : items.get_view()) {
        if (auto checked = check(item); checked)
            results.push_back(std::move(item));
        else
            results.push_back(std::unexpected(std::move(checked.error())));
    }
    return tp::to_wit(std::move(results));
}
