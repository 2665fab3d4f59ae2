// The C++ twin of faulty.c (same codes, same answers), written with the C++ SDK
// (sdk/cpp/tensorplug.hpp) and built with -fno-exceptions, so its uncaught failure is
// std::abort() rather than a throw:
//
// | x | what happens |
// | --- | --- |
// | -1 | `std::abort()` (a trap) |
// | -3 | allocates 1 MiB blocks with `new` until memory runs out: `new` then aborts (a trap) |
// | -5 | item failure 422 "faulty-cpp: item rejected" |
// | -2 | loops forever (the deadline: 504) |
// | -4 | recurses without end (a stack overflow: a trap) |
// | -9 | `sleep(3)` (a WASI poll: the deadline cuts it) |
// | -11 | writes 1 MiB to stdout and to stderr, then answers as usual (the host keeps 64 KiB) |
// | -51 | the batch also answers `blob: BYTES [N, 1]`, whose element is 80 MiB for this item and empty for the others (declare no outputs, so `blob` may appear; past `max_answer_mib` the item's 500) |
// | -70 | tries the sandbox's walls, fails the item 422 with what each met: files outside the model folder, the environment (a wall that gives way says BREACH) |
// | -40 - k (k = 0..9) | y = the probability of class k the `wasi:nn` graph `digits` gives the image of faulty.c |
// | -60 | runs `digits` on an FP32 [1, 63] input: the host's refusal (400) is the item's error |
// | -61 | runs `digits` on a BOOL input: the SDK's refusal (400) is the item's error |
//
// Built by scripts/build-c-plugins.sh into tests/models/faulty-cpp/predict.wasm.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include <unistd.h>

#include "predictor_cpp.h"
#include "tensorplug.hpp"

extern "C" char **environ;

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

// Code -4: each frame keeps a little stack, so the recursion reaches the stack's end (the
// condition is never false, but the compiler cannot know it).
volatile int bottomless = 1;
int recurse(int depth) {
    volatile char frame[256];
    frame[0] = char(depth);
    return bottomless ? recurse(depth + 1) + frame[0] : 0;
}

// Code -51's element of `blob`: far past any test's max_answer_mib, and enough that the
// instance grows more than the 64 MiB past its start after which the host replaces it.
constexpr uint32_t kHuge = 80 << 20;

// Code -51: `blob`, BYTES [n, 1], each element its 4-byte little-endian length and then
// its bytes: kHuge bytes for the items that are -51, none for the others. BYTES elements
// have sizes of their own, so only those items' rows are huge (an FP32 row is as wide as
// the widest) and their neighbours in the call stay answerable.
tp::Tensor huge_blob(std::span<const float> x) {
    size_t size = 0;
    for (float v : x) size += 4 + (v == -51.0f ? kHuge : 0);
    auto data = wit::vector<uint8_t>::allocate(size);
    uint8_t *at = data.data();
    for (float v : x) {
        uint32_t len = v == -51.0f ? kHuge : 0;
        std::memcpy(at, &len, 4); // WebAssembly is little-endian
        std::memset(at + 4, 0xff, len);
        at += 4 + len;
    }
    const uint64_t shape[] = {x.size(), 1};
    return tp::Tensor{wit::string::from_view("blob"), tp::Datatype::kBytes,
                      wit::vector<uint64_t>::from_view(std::span<const uint64_t>(shape)), std::move(data)};
}

// Code -70: what each attempt to leave the sandbox met.
std::string walls() {
    std::string report;
    for (const char *path : {"/etc/passwd", "/model/../../etc/passwd", "/proc/self/environ"}) {
        FILE *f = std::fopen(path, "rb");
        report += std::string(f ? "BREACH opened " : "no ") + path + "; ";
        if (f) std::fclose(f);
    }
    size_t variables = 0;
    for (char **v = environ; v != nullptr && *v != nullptr; v++) variables++;
    return report + "environment: " + std::to_string(variables) + " variables" + (variables ? " BREACH" : "");
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
        if (v == -2.0f)
            // A volatile store is a side effect, so the loop is not undefined behaviour that
            // the compiler could remove (C++ assumes loops without one end); C++20
            // deprecates `++` on a volatile, not `=`.
            for (volatile int spin = 0;; spin = spin + 1) {
            }
        if (v == -9.0f) sleep(3);
        if (v == -11.0f)
            for (int line = 0; line < 256; line++) {
                std::printf("%4095s\n", "o");
                std::fprintf(stderr, "%4095s\n", "e");
            }
        std::optional<tp::ItemError> failed;
        if (v == -4.0f) {
            y[i] = float(recurse(0));
        } else if (v == -70.0f) {
            failed = tp::ItemError{422, wit::string::from_view("faulty-cpp walls: " + walls())};
        } else if (v == -5.0f) {
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
    if (std::ranges::find(*x, -51.0f) != x->end()) outputs.push_back(huge_blob(*x));
    return tp::Prediction{tp::to_wit(std::move(outputs)), tp::to_wit(std::move(failures))};
}
