// Native unit tests of sdk/cpp/tensorplug.hpp (scripts/test-c-sdk.sh builds and runs
// them, under AddressSanitizer and UBSan where the machine has them).
//
// The out-of-line members of the `wit-bindgen cpp` bindings the SDK calls are defined here
// over a fake host that owns every handle it hands out: a handle dropped twice, dropped
// after it moved to the host, or never dropped fails a check. The fake Compute lowers its
// inputs the way the generated one does (the handle written back into the input's Tensor),
// so the SDK's forgetting of moved handles is tested too. Prints one line per failed check
// and a summary; exits 1 on any failure.
#include <cstdio>
#include <cstdlib>

#include "predictor_cpp.h"
#include "tensorplug.hpp"

namespace {

int checks, failed_checks;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(cond)) {                                                                             \
            failed_checks++;                                                                       \
            std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);          \
        }                                                                                          \
    } while (0)

enum class Kind { kFree, kGraph, kContext, kTensor, kError };

struct Handle {
    Kind kind = Kind::kFree;
    std::vector<uint32_t> dims;
    wasi::nn::tensor::TensorType type{};
    std::vector<uint8_t> data;
    wasi::nn::errors::ErrorCode code{};
    std::string message;
};

std::vector<Handle> handles(64);
int bad_drops;
std::string last_metric;
size_t last_labels;

int32_t host_new(Kind kind) {
    for (int32_t h = 1; h < int32_t(handles.size()); h++)
        if (handles[h].kind == Kind::kFree) {
            handles[h] = Handle{};
            handles[h].kind = kind;
            return h;
        }
    std::abort();
}

void host_drop(int32_t h, Kind kind) {
    if (h <= 0 || h >= int32_t(handles.size()) || handles[h].kind != kind) {
        bad_drops++;
        return;
    }
    handles[h] = Handle{};
}

int live_handles() {
    int live = 0;
    for (const Handle &h : handles) live += h.kind != Kind::kFree;
    return live;
}

// A buffer as cabi_realloc gives one: malloc'd, or a dangling non-NULL pointer if empty.
template <class T> wit::vector<T> host_vector(const std::vector<T> &items) {
    if (items.empty()) return wit::vector<T>(reinterpret_cast<T *>(alignof(T)), 0);
    auto *copy = static_cast<T *>(std::malloc(items.size() * sizeof(T)));
    std::memcpy(copy, items.data(), items.size() * sizeof(T));
    return wit::vector<T>(copy, items.size());
}

wasi::nn::errors::Error host_error(wasi::nn::errors::ErrorCode code, std::string message) {
    int32_t h = host_new(Kind::kError);
    handles[h].code = code;
    handles[h].message = std::move(message);
    return wasi::nn::errors::Error(wit::ResourceImportBase{h});
}

std::expected<void, wit::string> metric(const char *kind, std::string_view name,
                                        std::span<tensorplug::plugin::metrics::Label const> labels) {
    last_metric = std::string(kind) + " " + std::string(name);
    last_labels = labels.size();
    if (name.find(' ') != std::string_view::npos)
        return std::unexpected(wit::string::from_view("metric name has a space"));
    return {};
}

} // namespace

// ---- the bindings' imports, faked -------------------------------------------------------

void tensorplug::plugin::log::Log(Level, std::string_view) {}

std::expected<void, wit::string> tensorplug::plugin::metrics::CounterAdd(std::string_view name,
                                                                         std::span<Label const> labels, double) {
    return metric("counter", name, labels);
}
std::expected<void, wit::string> tensorplug::plugin::metrics::GaugeSet(std::string_view name,
                                                                       std::span<Label const> labels, double) {
    return metric("gauge", name, labels);
}
std::expected<void, wit::string> tensorplug::plugin::metrics::HistogramObserve(std::string_view name,
                                                                               std::span<Label const> labels, double) {
    return metric("histogram", name, labels);
}

std::expected<void, wit::string> tensorplug::plugin::metadata::Declare(std::string_view key, std::string_view) {
    if (key.empty()) return std::unexpected(wit::string::from_view("empty key"));
    return {};
}

wasi::nn::tensor::Tensor::~Tensor() {
    if (handle >= 0) host_drop(handle, Kind::kTensor);
}
wasi::nn::tensor::Tensor::Tensor(std::span<uint32_t const> dimensions, TensorType ty, std::span<uint8_t const> data) {
    handle = host_new(Kind::kTensor);
    handles[handle].dims.assign(dimensions.begin(), dimensions.end());
    handles[handle].type = ty;
    handles[handle].data.assign(data.begin(), data.end());
}
wit::vector<uint32_t> wasi::nn::tensor::Tensor::Dimensions() const { return host_vector(handles[handle].dims); }
wasi::nn::tensor::TensorType wasi::nn::tensor::Tensor::Ty() const { return handles[handle].type; }
wit::vector<uint8_t> wasi::nn::tensor::Tensor::Data() const { return host_vector(handles[handle].data); }
wasi::nn::tensor::Tensor::Tensor(wit::ResourceImportBase &&b) : wit::ResourceImportBase(std::move(b)) {}

wasi::nn::errors::Error::~Error() {
    if (handle >= 0) host_drop(handle, Kind::kError);
}
wasi::nn::errors::ErrorCode wasi::nn::errors::Error::Code() const { return handles[handle].code; }
wit::string wasi::nn::errors::Error::Data() const { return wit::string::from_view(handles[handle].message); }
wasi::nn::errors::Error::Error(wit::ResourceImportBase &&b) : wit::ResourceImportBase(std::move(b)) {}

wasi::nn::inference::GraphExecutionContext::~GraphExecutionContext() {
    if (handle >= 0) host_drop(handle, Kind::kContext);
}
wasi::nn::inference::GraphExecutionContext::GraphExecutionContext(wit::ResourceImportBase &&b)
    : wit::ResourceImportBase(std::move(b)) {}

// The fake graph: one FP32 input of shape [1, 4] → `double` (2x) and `empty` (I64 [0]).
std::expected<wit::vector<std::tuple<wit::string, wasi::nn::tensor::Tensor>>, wasi::nn::errors::Error>
wasi::nn::inference::GraphExecutionContext::Compute(std::span<std::tuple<std::string_view, tensor::Tensor>> inputs) const {
    CHECK(handles[handle].kind == Kind::kContext);
    std::vector<int32_t> moved;
    for (auto &input : inputs) {
        // As the generated lowering: the handle leaves the Tensor, then lands back in it.
        int32_t h = std::get<1>(input).into_handle();
        std::get<1>(input).set_handle(h);
        moved.push_back(h);
    }
    const Handle *x = moved.size() == 1 ? &handles[moved[0]] : nullptr;
    bool fits = x != nullptr && x->kind == Kind::kTensor && x->type == tensor::TensorType::kFp32 &&
                x->dims == std::vector<uint32_t>{1, 4} && x->data.size() == 16;
    std::vector<uint8_t> doubled(16);
    if (fits) {
        float values[4];
        std::memcpy(values, x->data.data(), 16);
        for (float &v : values) v *= 2;
        std::memcpy(doubled.data(), values, 16);
    }
    for (int32_t h : moved) host_drop(h, Kind::kTensor); // the host's now
    if (!fits) return std::unexpected(host_error(errors::ErrorCode::kInvalidArgument, "expected one FP32 [1, 4] input"));
    auto out = wit::vector<std::tuple<wit::string, tensor::Tensor>>::allocate(2);
    int32_t a = host_new(Kind::kTensor), b = host_new(Kind::kTensor);
    handles[a].type = tensor::TensorType::kFp32;
    handles[a].dims = {1, 4};
    handles[a].data = doubled;
    handles[b].type = tensor::TensorType::kI64;
    handles[b].dims = {0};
    out.initialize(0, {wit::string::from_view("double"), tensor::Tensor(wit::ResourceImportBase{a})});
    out.initialize(1, {wit::string::from_view("empty"), tensor::Tensor(wit::ResourceImportBase{b})});
    return out;
}

wasi::nn::graph::Graph::~Graph() {
    if (handle >= 0) host_drop(handle, Kind::kGraph);
}
wasi::nn::graph::Graph::Graph(wit::ResourceImportBase &&b) : wit::ResourceImportBase(std::move(b)) {}
std::expected<wasi::nn::inference::GraphExecutionContext, wasi::nn::errors::Error>
wasi::nn::graph::Graph::InitExecutionContext() const {
    CHECK(handles[handle].kind == Kind::kGraph);
    return inference::GraphExecutionContext(wit::ResourceImportBase{host_new(Kind::kContext)});
}
std::expected<wasi::nn::graph::Graph, wasi::nn::errors::Error> wasi::nn::graph::LoadByName(std::string_view name) {
    if (name != "digits") return std::unexpected(host_error(errors::ErrorCode::kNotFound, "no graph by that name"));
    return Graph(wit::ResourceImportBase{host_new(Kind::kGraph)});
}

// ---- the tests ----------------------------------------------------------------------------

namespace {

tp::Tensor input(std::string_view name, tp::Datatype datatype, std::vector<uint64_t> shape, size_t bytes) {
    auto data = wit::vector<uint8_t>::allocate(bytes);
    if (bytes) std::memset(data.data(), 0, bytes);
    return tp::Tensor{wit::string::from_view(name), datatype, wit::vector<uint64_t>::from_view(std::span(shape)),
                      std::move(data)};
}

bool has(const wit::string &s, std::string_view needle) { return s.get_view().find(needle) != std::string_view::npos; }

void test_tensors() {
    std::vector<tp::Tensor> batch;
    batch.push_back(input("a", tp::Datatype::kFp32, {3, 2}, 24));
    batch.push_back(input("b", tp::Datatype::kInt64, {3}, 24));
    auto b = tp::find(batch, "b");
    CHECK(b && *b == &batch[1]);
    auto c = tp::find(batch, "c");
    CHECK(!c && c.error().status == 400 && has(c.error().message, "'c'"));

    constexpr int64_t any_by_2[] = {-1, 2}, any_by_3[] = {-1, 3}, rank1[] = {-1};
    auto a = tp::values<float>(batch[0], any_by_2);
    CHECK(a && a->size() == 6);
    CHECK(!tp::values<double>(batch[0], any_by_2) && tp::values<double>(batch[0], any_by_2).error().status == 400);
    CHECK(!tp::values<float>(batch[0], any_by_3));
    CHECK(!tp::values<float>(batch[0], rank1));
    tp::Tensor short_data = input("s", tp::Datatype::kFp32, {2, 2}, 12);
    constexpr int64_t two_by_two[] = {2, 2};
    auto s = tp::values<float>(short_data, two_by_two);
    CHECK(!s && s.error().status == 400 && has(s.error().message, "does not match"));

    auto [y, view] = tp::tensor<float>("y", std::array{uint64_t(2), uint64_t(3)});
    CHECK(view.size() == 6 && y.data.size() == 24 && y.shape.size() == 2 && y.datatype == tp::Datatype::kFp32);
    bool zeroed = true;
    for (float v : view) zeroed = zeroed && v == 0.0f;
    CHECK(zeroed);
    view[5] = 1.0f;
    std::vector<tp::Tensor> outputs;
    outputs.push_back(std::move(y));
    auto list = tp::to_wit(std::move(outputs));
    CHECK(list.size() == 1 && list[0].name.get_view() == "y");

    auto failed = tp::fail(422, "x: negative");
    CHECK(failed.error().status == 422 && failed.error().message.get_view() == "x: negative");
}

void test_parameters_and_metadata() {
    std::vector<tp::Parameter> parameters;
    parameters.push_back({wit::string::from_view("scale"), wit::string::from_view("2.5")});
    parameters.push_back({wit::string::from_view("mode"), wit::string::from_view("")});
    CHECK(tp::parameter(parameters, "scale") == "2.5");
    CHECK(tp::parameter(parameters, "mode") == "");
    CHECK(!tp::parameter(parameters, "missing"));
    CHECK(!tp::parameter(parameters, "scal"));
    CHECK(tp::declare("labels", "0,1"));
    auto refused = tp::declare("", "x");
    CHECK(!refused && refused.error().get_view() == "empty key");
}

void test_metrics() {
    CHECK(tp::counter_add("blank_images", {}, 2.0) && last_metric == "counter blank_images" && last_labels == 0);
    CHECK(tp::gauge_set("last_batch", {{"class", "7"}, {"stage", "predict"}}, 4.0) && last_labels == 2);
    CHECK(tp::histogram_observe("confidence", {}, 0.5) && last_metric == "histogram confidence");
    auto refused = tp::counter_add("bad name", {{"k", "v"}}, 1.0);
    CHECK(!refused && refused.error().status == 422 && refused.error().message.get_view() == "metric name has a space");
}

void test_nn_types() {
    using T = tp::nn::tensor::TensorType;
    using D = tp::Datatype;
    const std::pair<D, T> pairs[] = {{D::kFp16, T::kFp16}, {D::kFp32, T::kFp32}, {D::kFp64, T::kFp64},
                                     {D::kUint8, T::kU8},  {D::kInt32, T::kI32}, {D::kInt64, T::kI64}};
    for (auto [datatype, type] : pairs) {
        CHECK(tp::nn_tensor_type(datatype) == type);
        CHECK(tp::nn_datatype(type) == datatype);
    }
    for (D d : {D::kBool, D::kInt8, D::kInt16, D::kUint16, D::kUint32, D::kUint64, D::kBytes})
        CHECK(!tp::nn_tensor_type(d));
    CHECK(!tp::nn_datatype(T::kBf16));
}

void test_graphs() {
    {
        auto missing = tp::Graph::by_name("nope");
        CHECK(!missing && missing.error().status == 500 &&
              missing.error().message.get_view() == "wasi:nn not-found: no graph by that name");
    }
    CHECK(live_handles() == 0);
    {
        auto graph = tp::Graph::by_name("digits");
        CHECK(graph.has_value() && live_handles() == 2);
        if (!graph) return;
        std::vector<tp::Tensor> x;
        x.push_back(input("x", tp::Datatype::kFp32, {1, 4}, 16));
        float values[] = {0.5f, 1.5f, 2.5f, 3.5f};
        std::memcpy(x[0].data.data(), values, 16);
        for (int run = 0; run < 3; run++) { // one context, reused
            auto outputs = graph->compute(x);
            CHECK(outputs && outputs->size() == 2 && live_handles() == 2);
            if (!outputs || outputs->size() != 2) break;
            constexpr int64_t shape[] = {1, 4};
            auto y = tp::values<float>((*outputs)[0], shape);
            CHECK((*outputs)[0].name.get_view() == "double" && y && (*y)[3] == 7.0f);
            CHECK((*outputs)[1].datatype == tp::Datatype::kInt64 && (*outputs)[1].data.size() == 0);
        }
        std::vector<tp::Tensor> wide;
        wide.push_back(input("x", tp::Datatype::kFp32, {1, 5}, 20));
        auto refused = graph->compute(wide);
        CHECK(!refused && refused.error().status == 400 &&
              refused.error().message.get_view() == "wasi:nn invalid-argument: expected one FP32 [1, 4] input");
        std::vector<tp::Tensor> flags;
        flags.push_back(input("flags", tp::Datatype::kBool, {4}, 4));
        auto uncarried = graph->compute(flags);
        CHECK(!uncarried && uncarried.error().status == 400 && has(uncarried.error().message, "cannot carry"));
        CHECK(live_handles() == 2);
    }
    CHECK(live_handles() == 0);
    CHECK(bad_drops == 0);
}

} // namespace

int main() {
    test_tensors();
    test_parameters_and_metadata();
    test_metrics();
    test_nn_types();
    test_graphs();
    if (failed_checks > 0) {
        std::printf("C++ SDK: %d of %d checks FAILED\n", failed_checks, checks);
        return 1;
    }
    std::printf("C++ SDK: %d checks passed\n", checks);
    return 0;
}
