// The C++ twin of faulty.c (same codes, same answers), written with the C++ SDK
// (sdk/cpp/tensorplug.hpp) and built with -fno-exceptions, so its uncaught failure is
// std::abort() rather than a throw:
//
// | x | what happens |
// | --- | --- |
// | -1 | `std::abort()` (a trap) |
// | -3 | allocates 1 MiB blocks with `new` until memory runs out: `new` then aborts (a trap) |
// | -5 | item failure 422 "faulty-cpp: item rejected" |
// | -40 - k (k = 0..9) | y = the probability of class k the `wasi:nn` graph `digits` gives the image of faulty.c |
// | -60 | runs `digits` on an FP32 [1, 63] input: the host's refusal (400) is the item's error |
// | -61 | runs `digits` on a BOOL input: the SDK's refusal (400) is the item's error |
//
// Built by scripts/build-c-plugins.sh into tests/models/faulty-cpp/predict.wasm.
#include <cstdlib>
#include <memory>

#include "predictor_cpp.h"
#include "tensorplug.hpp"

namespace {

constexpr size_t kPixels = 64, kClasses = 10;

// Loaded on first use, kept for the instance's life.
std::optional<tp::Graph> digits;

std::expected<std::vector<tp::Tensor>, tp::ItemError> run_digits(tp::Tensor input) {
    if (!digits) {
        auto loaded = tp::Graph::by_name("digits");
        if (!loaded) return std::unexpected(std::move(loaded.error()));
        digits.emplace(std::move(*loaded));
    }
    return digits->compute(std::span(&input, 1));
}

std::expected<float, tp::ItemError> digits_probability(size_t k) {
    auto [input, pixels] = tp::tensor<float>("input", std::array{uint64_t(1), uint64_t(kPixels)});
    for (size_t i = 0; i < kPixels; i++) pixels[i] = float((7 * i) % 17);
    auto outputs = run_digits(std::move(input));
    if (!outputs) return std::unexpected(std::move(outputs.error()));
    auto proba = tp::find(*outputs, "probabilities");
    if (!proba) return std::unexpected(std::move(proba.error()));
    constexpr int64_t shape[] = {1, kClasses};
    auto p = tp::values<float>(**proba, shape);
    if (!p) return std::unexpected(std::move(p.error()));
    return (*p)[k];
}

tp::ItemError digits_refusal(tp::Tensor input) {
    auto outputs = run_digits(std::move(input));
    if (!outputs) return std::move(outputs.error());
    return {500, wit::string::from_view("faulty-cpp: the graph accepted an input it should refuse")};
}

[[noreturn]] void exhaust_memory() {
    std::vector<std::unique_ptr<std::byte[]>> blocks;
    for (;;) {
        blocks.push_back(std::make_unique<std::byte[]>(1 << 20)); // zeroed: the pages are touched
    }
}

} // namespace

std::expected<void, wit::string> exports::predictor::Init(wit::vector<tp::Parameter>) { return {}; }

std::expected<tp::Prediction, tp::ItemError> exports::predictor::Predict(wit::vector<tp::Tensor> batch) {
    auto input = tp::find(batch.get_const_view(), "x");
    if (!input) return std::unexpected(std::move(input.error()));
    constexpr int64_t shape[] = {-1, 1};
    auto x = tp::values<float>(**input, shape);
    if (!x) return std::unexpected(std::move(x.error()));
    auto [tensor, y] = tp::tensor<float>("y", std::array{uint64_t(x->size()), uint64_t(1)});
    std::vector<tp::ItemFailure> failures;
    for (size_t i = 0; i < x->size(); i++) {
        float v = (*x)[i];
        if (v == -1.0f) std::abort();
        if (v == -3.0f) exhaust_memory();
        std::optional<tp::ItemError> failed;
        if (v == -5.0f) {
            failed = tp::ItemError{422, wit::string::from_view("faulty-cpp: item rejected")};
        } else if (v <= -40.0f && v >= -49.0f && v == float(int(v))) {
            auto p = digits_probability(size_t(-40 - int(v)));
            if (p) y[i] = *p;
            else failed = std::move(p.error());
        } else if (v == -60.0f) {
            auto [bad, _] = tp::tensor<float>("input", std::array{uint64_t(1), uint64_t(kPixels - 1)});
            failed = digits_refusal(std::move(bad));
        } else if (v == -61.0f) {
            auto [bad, _] = tp::tensor<uint8_t>("input", std::array{uint64_t(1), uint64_t(kPixels)});
            bad.datatype = tp::Datatype::kBool;
            failed = digits_refusal(std::move(bad));
        } else {
            y[i] = 2 * v;
        }
        if (failed) failures.push_back({uint32_t(i), std::move(*failed)});
    }
    std::vector<tp::Tensor> outputs;
    outputs.push_back(std::move(tensor));
    return tp::Prediction{tp::to_wit(std::move(outputs)), tp::to_wit(std::move(failures))};
}
