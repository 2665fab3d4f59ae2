// The postprocess stage of {{name}}: passes each item's `y: FP32 [1]` from predict on; an
// item whose y is over 100 fails alone with 422.
#include <string>

#include "postprocessor_cpp.h"
#include "tensorplug.hpp"

namespace {

// Nothing when `item` may pass, else its error.
std::expected<void, tp::ItemError> check(const wit::vector<tp::Tensor> &item) {
    auto y = tp::find(item.get_const_view(), "y");
    if (!y) return std::unexpected(std::move(y.error()));
    constexpr int64_t shape[] = {1};
    auto values = tp::values<float>(**y, shape);
    if (!values) return std::unexpected(std::move(values.error()));
    if ((*values)[0] > 100.0f)
        return tp::fail(422, "y: " + std::to_string((*values)[0]) + " is over 100 (checked by postprocess)");
    return {};
}

} // namespace

std::expected<void, wit::string> exports::postprocessor::Init(wit::vector<tp::Parameter> /*parameters*/) {
    return {};
}

wit::vector<std::expected<wit::vector<tp::Tensor>, tp::ItemError>>
exports::postprocessor::Postprocess(wit::vector<wit::vector<tp::Tensor>> items) {
    std::vector<std::expected<wit::vector<tp::Tensor>, tp::ItemError>> results;
    for (wit::vector<tp::Tensor> &item : items.get_view()) {
        if (auto checked = check(item); checked)
            results.push_back(std::move(item));
        else
            results.push_back(std::unexpected(std::move(checked.error())));
    }
    return tp::to_wit(std::move(results));
}
