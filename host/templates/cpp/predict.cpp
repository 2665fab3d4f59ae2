// The predict stage of {{name}}: y = 2 * x for a batch of `x: FP32 [N, 1]`; an item
// whose x is negative fails alone with 422, its neighbours get their y.
#include <string>

#include "predictor_cpp.h"
#include "tensorplug.hpp"

std::expected<void, wit::string> exports::predictor::Init(wit::vector<tp::Parameter> /*parameters*/) {
    return {};
}

std::expected<tp::Prediction, tp::ItemError> exports::predictor::Predict(wit::vector<tp::Tensor> batch) {
    auto x = tp::find(batch.get_const_view(), "x");
    if (!x) return std::unexpected(std::move(x.error()));
    constexpr int64_t shape[] = {-1, 1};
    auto values = tp::values<float>(**x, shape);
    if (!values) return std::unexpected(std::move(values.error()));
    uint64_t n = (*x)->shape[0];

    auto [y_tensor, y] = tp::tensor<float>("y", std::array{n, uint64_t(1)});
    std::vector<tp::ItemFailure> failures;
    for (uint64_t i = 0; i < n; i++) {
        float v = (*values)[i];
        if (v < 0.0f)
            failures.push_back({uint32_t(i), {422, wit::string::from_view("x: " + std::to_string(v) + " is negative")}});
        y[i] = 2.0f * v;
    }
    std::vector<tp::Tensor> outputs;
    outputs.push_back(std::move(y_tensor));
    return tp::Prediction{tp::to_wit(std::move(outputs)), tp::to_wit(std::move(failures))};
}
