// The digits model's predict stage in C++23: the same weights files, forward pass and
// answers as the Rust `digits-predict` and the C examples/digits-c. Loads
// W0/b0/W1/b1.f32 from the model folder at init and classifies a batch
// `input-0: FP32 [N, 64]` into `probabilities: FP32 [N, 10]` and `label: INT64 [N]`.
// A blank image (every pixel 0) fails alone with a 422. Plugin metrics: the counter
// `blank_images` and the histogram `batch_size`, as in the C example.
//
// Built by scripts/build-c-plugins.sh as a wasm32-wasip1 reactor module (-fno-exceptions),
// which the host makes a component at load.
#include <algorithm>
#include <array>
#include <cmath>

#include "predictor_cpp.h"
#include "tensorplug.hpp"

namespace {

constexpr size_t kInputs = 64, kHidden = 64, kClasses = 10;

// Row-major, as in the model folder; loaded once per instance by Init.
struct Weights {
    std::array<std::array<float, kHidden>, kInputs> w0;
    std::array<float, kHidden> b0;
    std::array<std::array<float, kClasses>, kHidden> w1;
    std::array<float, kClasses> b1;
} weights;

// One image: softmax probabilities into `p`, and the most probable class (the first on
// ties). Sums run over the inputs in order, as in the Rust forward pass.
int64_t classify(std::span<const float> x, std::span<float> p) {
    std::array<float, kHidden> h = weights.b0;
    for (size_t k = 0; k < kInputs; k++)
        for (size_t j = 0; j < kHidden; j++) h[j] += x[k] * weights.w0[k][j];
    std::array<float, kClasses> z = weights.b1;
    for (size_t k = 0; k < kHidden; k++) {
        float hk = h[k] > 0.0f ? h[k] : 0.0f; // ReLU; a NaN unit gives 0
        for (size_t j = 0; j < kClasses; j++) z[j] += hk * weights.w1[k][j];
    }
    size_t best = 0;
    for (size_t j = 1; j < kClasses; j++)
        if (z[j] > z[best]) best = j;
    float sum = 0.0f;
    for (size_t j = 0; j < kClasses; j++) sum += p[j] = std::exp(z[j] - z[best]);
    for (float &pj : p) pj /= sum;
    return int64_t(best);
}

} // namespace

std::expected<void, wit::string> exports::predictor::Init(wit::vector<tp::Parameter> /*parameters*/) {
    using File = std::pair<const char *, std::span<std::byte>>;
    for (auto [name, field] : {File{"W0.f32", std::as_writable_bytes(std::span(weights.w0))},
                               File{"b0.f32", std::as_writable_bytes(std::span(weights.b0))},
                               File{"W1.f32", std::as_writable_bytes(std::span(weights.w1))},
                               File{"b1.f32", std::as_writable_bytes(std::span(weights.b1))}}) {
        if (auto read = tp::read_model_file(name, field); !read) return read;
    }
    tp::log(tp::Level::kDebug, "digits-cpp: weights loaded from /model");
    if (auto declared = tp::declare("labels", "0,1,2,3,4,5,6,7,8,9"); !declared) return declared;
    return tp::declare("description", "The digits MLP, predicted by a plugin written in C++");
}

std::expected<tp::Prediction, tp::ItemError> exports::predictor::Predict(wit::vector<tp::Tensor> batch) {
    auto x = tp::find(batch.get_const_view(), "input-0");
    if (!x) return std::unexpected(std::move(x.error()));
    constexpr int64_t shape[] = {-1, kInputs};
    auto pixels = tp::values<float>(**x, shape);
    if (!pixels) return std::unexpected(std::move(pixels.error()));
    uint64_t n = (*x)->shape[0];

    auto [probabilities, proba] = tp::tensor<float>("probabilities", std::array{n, uint64_t(kClasses)});
    auto [label, labels] = tp::tensor<int64_t>("label", std::array{n});
    std::vector<tp::ItemFailure> failures;
    for (uint64_t i = 0; i < n; i++) {
        auto image = pixels->subspan(i * kInputs, kInputs);
        if (std::ranges::all_of(image, [](float v) { return v == 0.0f; }))
            failures.push_back({uint32_t(i), {422, wit::string::from_view(
                                                      "input-0: every pixel is 0, there is no digit to classify")}});
        else
            labels[i] = classify(image, proba.subspan(i * kClasses, kClasses));
    }
    // The host refuses only a misused metric: a bug to log, not a reason to fail items.
    auto counted = failures.empty() ? std::expected<void, tp::ItemError>{}
                                    : tp::counter_add("blank_images", {}, double(failures.size()));
    if (auto observed = counted ? tp::histogram_observe("batch_size", {}, double(n)) : counted; !observed)
        tp::log(tp::Level::kWarn, "digits-cpp: metric refused: " + std::string(observed.error().message.get_view()));
    std::vector<tp::Tensor> outputs;
    outputs.push_back(std::move(probabilities));
    outputs.push_back(std::move(label));
    return tp::Prediction{tp::to_wit(std::move(outputs)), tp::to_wit(std::move(failures))};
}
