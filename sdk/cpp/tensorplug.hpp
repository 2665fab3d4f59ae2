// tensorplug.hpp — a small C++23 layer over the bindings `wit-bindgen cpp` generates for
// a tensorplug world (wit/plugin.wit). Header only: include your world's generated header
// (predictor_cpp.h, ...) first, then this one. Built with -std=c++23 -fno-exceptions:
// failures travel as std::expected, never as exceptions.
//
// Ownership is the bindings' RAII: an export's arguments arrive as wit::vector /
// wit::string values that free themselves when they go out of scope, and results are
// wit:: values (malloc'd) that the bindings free after the host has copied them. Views
// (`tp::values`) point into an argument's buffer: valid while the argument lives.
//
// Item errors are HTTP-style: 400 when the input is at fault, 422 for well-formed but
// unacceptable values, 5xx when the plugin is.
#ifndef TENSORPLUG_HPP
#define TENSORPLUG_HPP

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <expected>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tp {

using Tensor = tensorplug::plugin::types::Tensor;
using Datatype = tensorplug::plugin::types::Datatype;
using ItemError = tensorplug::plugin::types::ItemError;
using ItemFailure = tensorplug::plugin::types::ItemFailure;
using Prediction = tensorplug::plugin::types::Prediction;
using Parameter = tensorplug::plugin::types::Parameter;
using Level = tensorplug::plugin::log::Level;

// Where the model folder is, read-only, inside the plugin.
inline constexpr const char *kModelDir = "/model";

// An item (or batch) error to return: `return tp::fail(422, "...")`.
inline std::unexpected<ItemError> fail(uint16_t status, std::string_view message) {
    return std::unexpected(ItemError{status, wit::string::from_view(message)});
}

// The C++ element type of each fixed-size datatype.
template <class T> constexpr Datatype datatype_of();
template <> constexpr Datatype datatype_of<float>() { return Datatype::kFp32; }
template <> constexpr Datatype datatype_of<double>() { return Datatype::kFp64; }
template <> constexpr Datatype datatype_of<int32_t>() { return Datatype::kInt32; }
template <> constexpr Datatype datatype_of<int64_t>() { return Datatype::kInt64; }
template <> constexpr Datatype datatype_of<uint8_t>() { return Datatype::kUint8; }

// The tensor named `name`, or a 400.
inline std::expected<const Tensor *, ItemError> find(std::span<const Tensor> tensors, std::string_view name) {
    for (const Tensor &t : tensors)
        if (t.name.get_view() == name) return &t;
    return fail(400, "no input named '" + std::string(name) + "'");
}

// A view of the elements of `t` as T, after checking the datatype, the shape (-1 matches
// any size) and that the data holds exactly the shape's elements; a 400 otherwise.
template <class T>
std::expected<std::span<const T>, ItemError> values(const Tensor &t, std::span<const int64_t> shape) {
    std::string name(t.name.get_view());
    if (t.datatype != datatype_of<T>()) return fail(400, name + ": unexpected datatype");
    bool fits = t.shape.size() == shape.size();
    uint64_t count = 1;
    for (size_t i = 0; i < t.shape.size(); i++) {
        fits = fits && (shape[i] < 0 || uint64_t(shape[i]) == t.shape[i]);
        count *= t.shape[i];
    }
    if (!fits) return fail(400, name + ": unexpected shape");
    if (t.data.size() != count * sizeof(T)) return fail(400, name + ": data does not match the shape");
    if (reinterpret_cast<uintptr_t>(t.data.data()) % alignof(T) != 0) return fail(500, name + ": misaligned data");
    return std::span<const T>(reinterpret_cast<const T *>(t.data.data()), count);
}

// A zeroed tensor `name` of `shape` with elements of T, and a view to fill it through.
template <class T> std::pair<Tensor, std::span<T>> tensor(std::string_view name, std::span<const uint64_t> shape) {
    uint64_t count = 1;
    for (uint64_t d : shape) count *= d;
    auto data = wit::vector<uint8_t>::allocate(count * sizeof(T));
    if (!data.empty()) std::memset(data.data(), 0, data.size());
    std::span<T> view(reinterpret_cast<T *>(data.data()), count);
    return {Tensor{wit::string::from_view(name), datatype_of<T>(), wit::vector<uint64_t>::from_view(shape),
                   std::move(data)},
            view};
}

// A wit::vector (a result's list) from a std::vector, moving the elements.
template <class T> wit::vector<T> to_wit(std::vector<T> &&items) {
    auto out = wit::vector<T>::allocate(items.size());
    for (size_t i = 0; i < items.size(); i++) out.initialize(i, std::move(items[i]));
    return out;
}

// The value of parameter `name` (a view into `parameters`), or nullopt.
inline std::optional<std::string_view> parameter(std::span<const Parameter> parameters, std::string_view name) {
    for (const Parameter &p : parameters)
        if (p.name.get_view() == name) return p.value.get_view();
    return std::nullopt;
}

// Declares a metadata fact (only during Init); the host's refusal is Init's error.
inline std::expected<void, wit::string> declare(std::string_view key, std::string_view value) {
    return tensorplug::plugin::metadata::Declare(key, value);
}

// A line in the host's log, tagged with the model, version and stage.
inline void log(Level level, std::string_view message) { tensorplug::plugin::log::Log(level, message); }

// Reads `kModelDir/name`, which must hold exactly `out.size()` bytes, into `out`.
// (Debian's wasm libc++ has no <fstream>: stdio it is.)
inline std::expected<void, wit::string> read_model_file(std::string_view name, std::span<std::byte> out) {
    std::string path = std::string(kModelDir) + "/" + std::string(name);
    std::FILE *file = std::fopen(path.c_str(), "rb");
    if (file == nullptr) return std::unexpected(wit::string::from_view("cannot open " + path));
    size_t got = std::fread(out.data(), 1, out.size(), file);
    bool longer = std::fgetc(file) != EOF;
    std::fclose(file);
    if (got != out.size() || longer)
        return std::unexpected(wit::string::from_view(path + ": expected " + std::to_string(out.size()) + " bytes"));
    return {};
}

// ---- plugin metrics ------------------------------------------------------------------

// A metric's label: both views only read during the call.
using Label = std::pair<std::string_view, std::string_view>;

namespace detail {
using MetricUpdate = std::expected<void, wit::string> (*)(std::string_view, std::span<tensorplug::plugin::metrics::Label const>,
                                                          double);

// Calls a `metrics` import; the host's refusal (a bad name, a kind clash, a full budget)
// becomes a 422 carrying the host's reason, as the Rust and C SDKs' callers hand it back.
inline std::expected<void, ItemError> metric(MetricUpdate update, std::string_view name,
                                             std::initializer_list<Label> labels, double value) {
    std::vector<tensorplug::plugin::metrics::Label> pairs;
    pairs.reserve(labels.size());
    for (auto [key, label] : labels) pairs.push_back({wit::string::from_view(key), wit::string::from_view(label)});
    auto updated = update(name, pairs, value);
    if (!updated) return std::unexpected(ItemError{422, std::move(updated.error())});
    return {};
}
} // namespace detail

// Adds `value` (finite, at least 0) to the counter `name` (exported as
// `tensorplug_plugin_<name>_total`, labelled with the model, the version and `labels`).
inline std::expected<void, ItemError> counter_add(std::string_view name, std::initializer_list<Label> labels,
                                                  double value) {
    return detail::metric(tensorplug::plugin::metrics::CounterAdd, name, labels, value);
}

// Sets the gauge `name` with `labels` to `value` (finite).
inline std::expected<void, ItemError> gauge_set(std::string_view name, std::initializer_list<Label> labels,
                                                double value) {
    return detail::metric(tensorplug::plugin::metrics::GaugeSet, name, labels, value);
}

// Records `value` (finite) in the histogram `name` with `labels` (buckets 0.005 .. 10).
inline std::expected<void, ItemError> histogram_observe(std::string_view name, std::initializer_list<Label> labels,
                                                        double value) {
    return detail::metric(tensorplug::plugin::metrics::HistogramObserve, name, labels, value);
}

// ---- wasi:nn graphs ------------------------------------------------------------------

namespace nn = wasi::nn;

// The wasi:nn element type of a V2 datatype: FP16, FP32, FP64, UINT8, INT32, INT64.
inline std::optional<nn::tensor::TensorType> nn_tensor_type(Datatype datatype) {
    using T = nn::tensor::TensorType;
    switch (datatype) {
    case Datatype::kFp16: return T::kFp16;
    case Datatype::kFp32: return T::kFp32;
    case Datatype::kFp64: return T::kFp64;
    case Datatype::kUint8: return T::kU8;
    case Datatype::kInt32: return T::kI32;
    case Datatype::kInt64: return T::kI64;
    default: return std::nullopt;
    }
}

// The V2 datatype of a wasi:nn element type (BF16 has none).
inline std::optional<Datatype> nn_datatype(nn::tensor::TensorType type) {
    using T = nn::tensor::TensorType;
    switch (type) {
    case T::kFp16: return Datatype::kFp16;
    case T::kFp32: return Datatype::kFp32;
    case T::kFp64: return Datatype::kFp64;
    case T::kU8: return Datatype::kUint8;
    case T::kI32: return Datatype::kInt32;
    case T::kI64: return Datatype::kInt64;
    default: return std::nullopt;
    }
}

// A wasi:nn error as an item error, as in the Rust and C SDKs: 400 for invalid-argument
// (the inputs do not fit the graph), 504 for a timeout, 500 otherwise.
inline ItemError nn_error(const nn::errors::Error &error) {
    using C = nn::errors::ErrorCode;
    static constexpr const char *names[] = {"invalid-argument", "invalid-encoding", "timeout",
                                            "runtime-error",    "unsupported-operation", "too-large",
                                            "not-found",        "security",         "unknown"};
    C code = error.Code();
    auto index = size_t(code);
    uint16_t status = code == C::kInvalidArgument ? 400 : code == C::kTimeout ? 504 : 500;
    std::string message = std::string("wasi:nn ") + (index < std::size(names) ? names[index] : "unknown") + ": " +
                          std::string(error.Data().get_view());
    return ItemError{status, wit::string::from_view(message)};
}

// A graph of the model's `[graphs]` (model.toml) with its execution context; the host
// parses each graph once per model version and every instance shares it. Load it once
// (in Init, or on first use) and compute as often as needed; RAII releases both.
class Graph {
  public:
    static std::expected<Graph, ItemError> by_name(std::string_view name) {
        auto graph = nn::graph::LoadByName(name);
        if (!graph) return std::unexpected(nn_error(graph.error()));
        auto context = graph->InitExecutionContext();
        if (!context) return std::unexpected(nn_error(context.error()));
        return Graph(std::move(*graph), std::move(*context));
    }

    // Runs the graph: each input by its name (a graph with one input takes any name; the
    // host copies them), outputs named as the graph names them, in its order, ready to be
    // moved into a prediction's outputs.
    std::expected<std::vector<Tensor>, ItemError> compute(std::span<const Tensor> inputs) const {
        std::vector<std::tuple<std::string_view, nn::tensor::Tensor>> named;
        named.reserve(inputs.size());
        for (const Tensor &t : inputs) {
            std::string name(t.name.get_view());
            auto type = nn_tensor_type(t.datatype);
            if (!type) return fail(400, "wasi:nn invalid-argument: invalid input '" + name + "': wasi:nn cannot carry its datatype");
            std::vector<uint32_t> dims;
            for (uint64_t d : t.shape.get_const_view()) {
                if (d > UINT32_MAX) return fail(400, "wasi:nn invalid-argument: invalid input '" + name + "': a dimension exceeds u32");
                dims.push_back(uint32_t(d));
            }
            named.emplace_back(t.name.get_view(), nn::tensor::Tensor(dims, *type, t.data.get_const_view()));
        }
        auto computed = context_.Compute(named);
        // The handles moved to the host with the call, but the bindings (wit-bindgen cpp
        // 0.63) lower the list in place, writing each handle back into its Tensor: forget
        // them here, or their destructors would drop handles this instance no longer owns.
        for (auto &input : named) (void)std::get<1>(input).into_handle();
        if (!computed) return std::unexpected(nn_error(computed.error()));
        std::vector<Tensor> outputs;
        outputs.reserve(computed->size());
        for (auto &[name, tensor] : computed->get_view()) {
            auto datatype = nn_datatype(tensor.Ty());
            if (!datatype)
                return fail(500, "wasi:nn unsupported-operation: output '" + std::string(name.get_view()) +
                                     "': BF16 has no V2 datatype");
            auto dims = tensor.Dimensions();
            auto shape = wit::vector<uint64_t>::allocate(dims.size());
            for (size_t d = 0; d < dims.size(); d++) shape.initialize(d, uint64_t(dims[d]));
            outputs.push_back(Tensor{std::move(name), *datatype, std::move(shape), tensor.Data()});
        }
        return outputs;
    }

  private:
    Graph(nn::graph::Graph graph, nn::inference::GraphExecutionContext context)
        : graph_(std::move(graph)), context_(std::move(context)) {}

    // Destroyed in reverse order: the context before the graph it came from.
    nn::graph::Graph graph_;
    nn::inference::GraphExecutionContext context_;
};

} // namespace tp

#endif // TENSORPLUG_HPP
