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

} // namespace tp

#endif // TENSORPLUG_HPP
