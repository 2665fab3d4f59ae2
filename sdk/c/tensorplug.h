/* tensorplug.h — a small C layer over the bindings `wit-bindgen c` generates for a
 * tensorplug world (wit/plugin.wit). Header only: include your world's generated header
 * (predictor.h, preprocessor.h or postprocessor.h) first, then this one.
 *
 * Ownership, which the generated bindings leave to you:
 * - An export's arguments belong to the plugin: free them before returning, after the
 *   last use of any view into them: tensors with `tp_tensors_free(batch->ptr, batch->len)`,
 *   items with `tp_items_free(items->ptr, items->len)`, parameters with the generated
 *   `predictor_list_parameter_free(parameters)`. Not with the generated
 *   `predictor_list_tensor_free` or `..._list_item_free`: wit-bindgen 0.63's C generator
 *   forgets each tensor's `data` there, which leaks every batch's bytes.
 * - An export's results are freed by the bindings after the host has copied them, with
 *   `free`: every pointer in a result (names, shapes, data, messages, lists) must come
 *   from `malloc`, and an empty list is { NULL, 0 }. The builders below do exactly that.
 *
 * Views (`tp_values`) point into the argument's own buffer (no copy): valid until the
 * argument is freed. Strings a helper only reads (names, labels) are borrowed
 * NUL-terminated `const char *`; `tp_graph_t` owns the host's graph handles (drop them
 * with `tp_graph_drop`, or keep them for the instance's life). Buffers the host hands over come from `malloc` (through
 * `cabi_realloc`), so they are aligned for every element type; the view checks anyway.
 *
 * Every helper that can fail says so with `false` / NULL and, where it takes one, fills an
 * item error (HTTP-style status + message) that the plugin hands back as the item's (or
 * the batch's) error: 400 when the input is at fault, 422 for well-formed but
 * unacceptable values, 5xx when the plugin is.
 */
#ifndef TENSORPLUG_H
#define TENSORPLUG_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The world's string type (its name carries the world's). */
#if defined(__BINDINGS_PREDICTOR_H)
typedef predictor_string_t tp_string_t;
#elif defined(__BINDINGS_PREPROCESSOR_H)
typedef preprocessor_string_t tp_string_t;
#elif defined(__BINDINGS_POSTPROCESSOR_H)
typedef postprocessor_string_t tp_string_t;
#else
#error "include the header wit-bindgen generated for your world before tensorplug.h"
#endif

typedef tensorplug_plugin_types_tensor_t tp_tensor_t;
typedef tensorplug_plugin_types_item_error_t tp_item_error_t;
typedef tensorplug_plugin_types_parameter_t tp_parameter_t;
typedef tensorplug_plugin_types_list_item_failure_t tp_failures_t;
typedef tensorplug_plugin_types_datatype_t tp_datatype_t;

/* Where the model folder is, read-only, inside the plugin. */
#define TP_MODEL_DIR "/model"

/* ---- strings ----------------------------------------------------------------------- */

/* Fills `out` with a malloc'd copy of the formatted text (what results need). */
static inline void tp_string_vprintf(tp_string_t *out, const char *format, va_list args) {
    va_list again;
    va_copy(again, args);
    int len = vsnprintf(NULL, 0, format, args);
    if (len < 0) len = 0;
    char *text = (char *)malloc((size_t)len + 1);
    if (text == NULL) abort();
    vsnprintf(text, (size_t)len + 1, format, again);
    va_end(again);
    out->ptr = (uint8_t *)text;
    out->len = (size_t)len;
}

__attribute__((format(printf, 2, 3)))
static inline void tp_string_printf(tp_string_t *out, const char *format, ...) {
    va_list args;
    va_start(args, format);
    tp_string_vprintf(out, format, args);
    va_end(args);
}

/* Whether a WIT string (not NUL-terminated) equals `text`. */
static inline bool tp_string_is(const tp_string_t *s, const char *text) {
    size_t len = strlen(text);
    return s->len == len && memcmp(s->ptr, text, len) == 0;
}

/* ---- item errors ------------------------------------------------------------------- */

/* Fills `err` with `status` and a formatted message; returns false, so that
 * `return tp_fail(err, 400, "...")` reads as what it does. */
__attribute__((format(printf, 3, 4)))
static inline bool tp_fail(tp_item_error_t *err, uint16_t status, const char *format, ...) {
    va_list args;
    va_start(args, format);
    err->status = status;
    tp_string_vprintf(&err->message, format, args);
    va_end(args);
    return false;
}

/* Appends a failure of the item at `index` to a prediction's `failures`: that item gets
 * this status and message, its neighbours their rows. */
__attribute__((format(printf, 4, 5)))
static inline void tp_fail_item(tp_failures_t *failures, uint32_t index, uint16_t status, const char *format, ...) {
    tensorplug_plugin_types_item_failure_t *grown = (tensorplug_plugin_types_item_failure_t *)realloc(
        failures->ptr, (failures->len + 1) * sizeof *failures->ptr);
    if (grown == NULL) abort();
    failures->ptr = grown;
    tensorplug_plugin_types_item_failure_t *failure = &grown[failures->len++];
    failure->index = index;
    failure->error.status = status;
    va_list args;
    va_start(args, format);
    tp_string_vprintf(&failure->error.message, format, args);
    va_end(args);
}

/* ---- tensors: views ---------------------------------------------------------------- */

/* Bytes per element of a fixed-size datatype; 0 for BYTES. */
static inline size_t tp_element_size(tp_datatype_t datatype) {
    switch (datatype) {
    case TENSORPLUG_PLUGIN_TYPES_DATATYPE_BOOL:
    case TENSORPLUG_PLUGIN_TYPES_DATATYPE_UINT8:
    case TENSORPLUG_PLUGIN_TYPES_DATATYPE_INT8: return 1;
    case TENSORPLUG_PLUGIN_TYPES_DATATYPE_UINT16:
    case TENSORPLUG_PLUGIN_TYPES_DATATYPE_INT16:
    case TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP16: return 2;
    case TENSORPLUG_PLUGIN_TYPES_DATATYPE_UINT32:
    case TENSORPLUG_PLUGIN_TYPES_DATATYPE_INT32:
    case TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32: return 4;
    case TENSORPLUG_PLUGIN_TYPES_DATATYPE_UINT64:
    case TENSORPLUG_PLUGIN_TYPES_DATATYPE_INT64:
    case TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP64: return 8;
    default: return 0;
    }
}

/* The tensor named `name` among `count` tensors, or NULL (then `err`, if not NULL, says
 * so with a 400). */
static inline const tp_tensor_t *tp_find(const tp_tensor_t *tensors, size_t count, const char *name,
                                         tp_item_error_t *err) {
    for (size_t i = 0; i < count; i++)
        if (tp_string_is(&tensors[i].name, name)) return &tensors[i];
    if (err != NULL) tp_fail(err, 400, "no input named '%s'", name);
    return NULL;
}

/* Checks datatype and shape; -1 in `shape` matches any size. 400 otherwise. */
static inline bool tp_expect(const tp_tensor_t *t, tp_datatype_t datatype, const int64_t *shape, size_t rank,
                             tp_item_error_t *err) {
    const char *name = (const char *)t->name.ptr;
    int name_len = (int)t->name.len;
    if (t->datatype != datatype)
        return tp_fail(err, 400, "%.*s: unexpected datatype (%u)", name_len, name, (unsigned)t->datatype);
    bool fits = t->shape.len == rank;
    for (size_t i = 0; fits && i < rank; i++)
        fits = shape[i] < 0 || (uint64_t)shape[i] == t->shape.ptr[i];
    if (!fits) return tp_fail(err, 400, "%.*s: unexpected shape (rank %zu)", name_len, name, t->shape.len);
    return true;
}

/* The element count (product of the shape; 1 for a scalar). */
static inline uint64_t tp_element_count(const tp_tensor_t *t) {
    uint64_t count = 1;
    for (size_t i = 0; i < t->shape.len; i++) count *= t->shape.ptr[i];
    return count;
}

/* A view of a fixed-size tensor's elements (cast it to the datatype's C type), after
 * checking that the data holds exactly the shape's element count; NULL and a 400
 * otherwise. An empty tensor gives a non-NULL view of 0 elements. */
static inline const void *tp_values(const tp_tensor_t *t, size_t *count, tp_item_error_t *err) {
    size_t size = tp_element_size(t->datatype);
    uint64_t elements = tp_element_count(t);
    if (size == 0)
        return tp_fail(err, 400, "%.*s: BYTES has no fixed-size view", (int)t->name.len, (char *)t->name.ptr), NULL;
    if (t->data.len != elements * size)
        return tp_fail(err, 400, "%.*s: %zu data bytes for %llu elements", (int)t->name.len, (char *)t->name.ptr,
                       t->data.len, (unsigned long long)elements),
               NULL;
    if ((uintptr_t)t->data.ptr % size != 0)
        return tp_fail(err, 500, "%.*s: misaligned data", (int)t->name.len, (char *)t->name.ptr), NULL;
    *count = (size_t)elements;
    return t->data.len ? (const void *)t->data.ptr : (const void *)"";
}

/* ---- tensors: builders ------------------------------------------------------------- */

/* Makes `out` a tensor `name` of `datatype` and `shape` (all malloc'd, as results must
 * be) and returns its zeroed data for the caller to fill. */
static inline void *tp_tensor_new(tp_tensor_t *out, const char *name, tp_datatype_t datatype, const uint64_t *shape,
                                  size_t rank) {
    tp_string_printf(&out->name, "%s", name);
    out->datatype = datatype;
    out->shape.len = rank;
    out->shape.ptr = NULL;
    uint64_t elements = 1;
    if (rank > 0) {
        out->shape.ptr = (uint64_t *)malloc(rank * sizeof(uint64_t));
        if (out->shape.ptr == NULL) abort();
        memcpy(out->shape.ptr, shape, rank * sizeof(uint64_t));
    }
    for (size_t i = 0; i < rank; i++) elements *= shape[i];
    out->data.len = (size_t)(elements * tp_element_size(datatype));
    out->data.ptr = NULL;
    if (out->data.len > 0) {
        out->data.ptr = (uint8_t *)calloc(out->data.len, 1);
        if (out->data.ptr == NULL) abort();
    }
    return out->data.ptr;
}

/* A malloc'd array of `count` zeroed tensors, for a prediction's outputs or an item. */
static inline tp_tensor_t *tp_tensors_new(size_t count) {
    tp_tensor_t *tensors = (tp_tensor_t *)calloc(count, sizeof(tp_tensor_t));
    if (tensors == NULL) abort();
    return tensors;
}

/* Frees `count` tensors and their array: an export's tensor arguments (e.g. predict's
 * `batch->ptr, batch->len`), or results the plugin ends up not handing back (made by the
 * builders or by `tp_graph_compute`). Each buffer is freed only if it is not empty: the
 * bindings give an empty list a dangling pointer. */
static inline void tp_tensors_free(tp_tensor_t *tensors, size_t count) {
    for (size_t i = 0; i < count; i++) {
        if (tensors[i].name.len > 0) free(tensors[i].name.ptr);
        if (tensors[i].shape.len > 0) free(tensors[i].shape.ptr);
        if (tensors[i].data.len > 0) free(tensors[i].data.ptr);
    }
    if (count > 0) free(tensors);
}

/* Frees `count` items (each a list of tensors) and their array: a pre- or postprocess
 * export's `items->ptr, items->len`, or the items it does not hand back. */
static inline void tp_items_free(tensorplug_plugin_types_item_t *items, size_t count) {
    for (size_t i = 0; i < count; i++) tp_tensors_free(items[i].ptr, items[i].len);
    if (count > 0) free(items);
}

/* ---- parameters -------------------------------------------------------------------- */

/* The value of parameter `name` as a malloc'd NUL-terminated string (free it), or NULL. */
static inline char *tp_parameter(const tp_parameter_t *parameters, size_t count, const char *name) {
    for (size_t i = 0; i < count; i++) {
        if (!tp_string_is(&parameters[i].name, name)) continue;
        char *value = (char *)malloc(parameters[i].value.len + 1);
        if (value == NULL) abort();
        memcpy(value, parameters[i].value.ptr, parameters[i].value.len);
        value[parameters[i].value.len] = '\0';
        return value;
    }
    return NULL;
}

/* ---- logging and metadata ---------------------------------------------------------- */

enum {
    TP_TRACE = TENSORPLUG_PLUGIN_LOG_LEVEL_TRACE,
    TP_DEBUG = TENSORPLUG_PLUGIN_LOG_LEVEL_DEBUG,
    TP_INFO = TENSORPLUG_PLUGIN_LOG_LEVEL_INFO,
    TP_WARN = TENSORPLUG_PLUGIN_LOG_LEVEL_WARN,
    TP_ERROR = TENSORPLUG_PLUGIN_LOG_LEVEL_ERROR,
};

/* A line in the host's log, tagged with the model, version and stage. */
__attribute__((format(printf, 2, 3)))
static inline void tp_log(int level, const char *format, ...) {
    tp_string_t line;
    va_list args;
    va_start(args, format);
    tp_string_vprintf(&line, format, args);
    va_end(args);
    tensorplug_plugin_log_log((tensorplug_plugin_log_level_t)level, &line);
    free(line.ptr);
}

/* Declares a metadata fact (only during init). On refusal fills `err` (an init error,
 * malloc'd) and returns false. */
static inline bool tp_declare(const char *key, const char *value, tp_string_t *err) {
    tp_string_t k = {(uint8_t *)key, strlen(key)}, v = {(uint8_t *)value, strlen(value)};
    return tensorplug_plugin_metadata_declare(&k, &v, err);
}

/* ---- model files ------------------------------------------------------------------- */

/* Reads `TP_MODEL_DIR/name`, which must hold exactly `size` bytes, into `out`. On failure
 * fills `err` (an init error, malloc'd) and returns false. */
static inline bool tp_read_model_file(const char *name, void *out, size_t size, tp_string_t *err) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", TP_MODEL_DIR, name);
    FILE *file = fopen(path, "rb");
    if (file == NULL) return tp_string_printf(err, "cannot open %s", path), false;
    size_t got = fread(out, 1, size, file);
    bool longer = fgetc(file) != EOF;
    fclose(file);
    if (got != size || longer) return tp_string_printf(err, "%s: expected %zu bytes", path, size), false;
    return true;
}

/* ---- plugin metrics ---------------------------------------------------------------- */

/* A label of a metric: both strings borrowed (NUL-terminated), only read during the call. */
typedef struct tp_label {
    const char *name;
    const char *value;
} tp_label_t;

/* The three `metrics` imports share this signature. */
typedef bool (*tp_metric_update_t)(tp_string_t *name, tensorplug_plugin_metrics_list_label_t *labels, double value,
                                   tp_string_t *reason);

/* Labels that fit here cost no allocation. */
#define TP_METRIC_STACK_LABELS 8

/* Calls a `metrics` import. The host's refusal (a bad name, a kind clash, a full budget)
 * fills `err` with 422 and the host's reason, as the Rust SDK's callers hand it back;
 * with `err` NULL the reason is dropped (for metrics that are best effort). */
static inline bool tp_metric_update_(tp_metric_update_t update, const char *name, const tp_label_t *labels,
                                     size_t n_labels, double value, tp_item_error_t *err) {
    tensorplug_plugin_metrics_label_t stack[TP_METRIC_STACK_LABELS];
    tensorplug_plugin_metrics_label_t *pairs = stack;
    if (n_labels > TP_METRIC_STACK_LABELS) {
        pairs = (tensorplug_plugin_metrics_label_t *)malloc(n_labels * sizeof *pairs);
        if (pairs == NULL) abort();
    }
    for (size_t i = 0; i < n_labels; i++) {
        pairs[i].name = (tp_string_t){(uint8_t *)labels[i].name, strlen(labels[i].name)};
        pairs[i].value = (tp_string_t){(uint8_t *)labels[i].value, strlen(labels[i].value)};
    }
    tp_string_t metric = {(uint8_t *)name, strlen(name)};
    tensorplug_plugin_metrics_list_label_t list = {pairs, n_labels};
    tp_string_t reason = {NULL, 0};
    bool accepted = update(&metric, &list, value, &reason);
    if (pairs != stack) free(pairs);
    if (accepted) return true;
    /* The reason is the bindings' allocation (a dangling non-NULL pointer when empty). */
    if (reason.len == 0) reason.ptr = NULL;
    if (err == NULL) {
        free(reason.ptr);
    } else {
        err->status = 422;
        err->message = reason; /* moved: the item error now owns it */
    }
    return false;
}

/* Adds `value` (finite, at least 0) to the counter `name` with `labels` (`n_labels` of
 * them; NULL, 0 for none). Exported as `tensorplug_plugin_<name>_total`, labelled with
 * the model and version too. On refusal: false and a 422 in `err` (if not NULL). */
static inline bool tp_counter_add(const char *name, const tp_label_t *labels, size_t n_labels, double value,
                                  tp_item_error_t *err) {
    return tp_metric_update_(tensorplug_plugin_metrics_counter_add, name, labels, n_labels, value, err);
}

/* Sets the gauge `name` with `labels` to `value` (finite). As `tp_counter_add` on refusal. */
static inline bool tp_gauge_set(const char *name, const tp_label_t *labels, size_t n_labels, double value,
                                tp_item_error_t *err) {
    return tp_metric_update_(tensorplug_plugin_metrics_gauge_set, name, labels, n_labels, value, err);
}

/* Records `value` (finite) in the histogram `name` with `labels` (buckets 0.005 .. 10).
 * As `tp_counter_add` on refusal. */
static inline bool tp_histogram_observe(const char *name, const tp_label_t *labels, size_t n_labels, double value,
                                        tp_item_error_t *err) {
    return tp_metric_update_(tensorplug_plugin_metrics_histogram_observe, name, labels, n_labels, value, err);
}

/* ---- wasi:nn graphs ------------------------------------------------------------------ */

/* A graph of the model's `[graphs]` (model.toml) with its execution context: load it once
 * (in init) with `tp_graph_by_name`, run it with `tp_graph_compute` as often as needed,
 * release it with `tp_graph_drop` (or let the instance end). The host parses each graph
 * once per model version; every instance shares it. */
typedef struct tp_graph {
    wasi_nn_graph_own_graph_t graph;
    wasi_nn_inference_own_graph_execution_context_t context;
} tp_graph_t;

/* The V2 datatypes wasi:nn can carry, each with its wasi:nn element type. */
static const struct {
    tp_datatype_t datatype;
    wasi_nn_tensor_tensor_type_t type;
} tp_nn_types_[] = {
    {TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP16, WASI_NN_TENSOR_TENSOR_TYPE_FP16},
    {TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32, WASI_NN_TENSOR_TENSOR_TYPE_FP32},
    {TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP64, WASI_NN_TENSOR_TENSOR_TYPE_FP64},
    {TENSORPLUG_PLUGIN_TYPES_DATATYPE_UINT8, WASI_NN_TENSOR_TENSOR_TYPE_U8},
    {TENSORPLUG_PLUGIN_TYPES_DATATYPE_INT32, WASI_NN_TENSOR_TENSOR_TYPE_I32},
    {TENSORPLUG_PLUGIN_TYPES_DATATYPE_INT64, WASI_NN_TENSOR_TENSOR_TYPE_I64},
};

/* The wasi:nn element type of a V2 datatype: FP16, FP32, FP64, UINT8, INT32 and INT64
 * have one; false for the others. */
static inline bool tp_nn_tensor_type(tp_datatype_t datatype, wasi_nn_tensor_tensor_type_t *out) {
    for (size_t i = 0; i < sizeof tp_nn_types_ / sizeof tp_nn_types_[0]; i++)
        if (tp_nn_types_[i].datatype == datatype) return *out = tp_nn_types_[i].type, true;
    return false;
}

/* The V2 datatype of a wasi:nn element type; false for BF16, which V2 has not. */
static inline bool tp_nn_datatype(wasi_nn_tensor_tensor_type_t type, tp_datatype_t *out) {
    for (size_t i = 0; i < sizeof tp_nn_types_ / sizeof tp_nn_types_[0]; i++)
        if (tp_nn_types_[i].type == type) return *out = tp_nn_types_[i].datatype, true;
    return false;
}

/* The status an item gets for a wasi:nn error code, as in the Rust SDK: 400 when the
 * inputs do not fit the graph (invalid-argument), 504 for a timeout, 500 otherwise (a
 * missing or failing graph is the model's fault, not the client's). */
static inline uint16_t tp_nn_status(wasi_nn_errors_error_code_t code) {
    switch (code) {
    case WASI_NN_ERRORS_ERROR_CODE_INVALID_ARGUMENT: return 400;
    case WASI_NN_ERRORS_ERROR_CODE_TIMEOUT: return 504;
    default: return 500;
    }
}

/* The name wasi:nn's WIT gives an error code, for messages. */
static inline const char *tp_nn_code_name(wasi_nn_errors_error_code_t code) {
    static const char *const names[] = {"invalid-argument", "invalid-encoding", "timeout",
                                        "runtime-error",    "unsupported-operation", "too-large",
                                        "not-found",        "security",         "unknown"};
    return code < sizeof names / sizeof names[0] ? names[code] : "unknown";
}

/* Turns a wasi:nn error (owned: dropped here) into `err`: "wasi:nn <code>: <message>"
 * with `tp_nn_status`. Returns false. */
static inline bool tp_nn_fail_(wasi_nn_errors_own_error_t error, tp_item_error_t *err) {
    /* A borrow made from an own handle is not a handle of its own: nothing to drop. */
    wasi_nn_errors_borrow_error_t borrowed = wasi_nn_errors_borrow_error(error);
    wasi_nn_errors_error_code_t code = wasi_nn_errors_method_error_code(borrowed);
    tp_string_t data = {NULL, 0};
    wasi_nn_errors_method_error_data(borrowed, &data);
    wasi_nn_errors_error_drop_own(error);
    tp_fail(err, tp_nn_status(code), "wasi:nn %s: %.*s", tp_nn_code_name(code), (int)data.len, (const char *)data.ptr);
    if (data.len > 0) free(data.ptr);
    return false;
}

/* Loads the graph `name` of the model's `[graphs]` and an execution context for it into
 * `graph`. On failure (e.g. not-found: no graph by that name) fills `err` and returns
 * false, leaving nothing to drop. In init, hand `err->message` back as the init error
 * (it is malloc'd; the status is then unused). */
static inline bool tp_graph_by_name(const char *name, tp_graph_t *graph, tp_item_error_t *err) {
    tp_string_t wanted = {(uint8_t *)name, strlen(name)};
    wasi_nn_errors_own_error_t error;
    if (!wasi_nn_graph_load_by_name(&wanted, &graph->graph, &error)) return tp_nn_fail_(error, err);
    if (!wasi_nn_graph_method_graph_init_execution_context(wasi_nn_graph_borrow_graph(graph->graph), &graph->context,
                                                           &error)) {
        wasi_nn_graph_graph_drop_own(graph->graph);
        return tp_nn_fail_(error, err);
    }
    return true;
}

/* Releases a graph from `tp_graph_by_name`: its context, then the graph. */
static inline void tp_graph_drop(tp_graph_t *graph) {
    wasi_nn_inference_graph_execution_context_drop_own(graph->context);
    wasi_nn_graph_graph_drop_own(graph->graph);
}

/* One output of a compute as a tensor: its name and data moved (no copy), its shape
 * widened to u64. Drops the output's handle. */
static inline bool tp_nn_output_(wasi_nn_inference_named_tensor_t *named, tp_tensor_t *out, tp_item_error_t *err) {
    wasi_nn_tensor_borrow_tensor_t borrowed = wasi_nn_tensor_borrow_tensor(named->f1);
    wasi_nn_tensor_tensor_type_t type = wasi_nn_tensor_method_tensor_ty(borrowed);
    tp_string_t name = named->f0;
    if (name.len == 0) name.ptr = NULL;
    named->f0 = (tp_string_t){NULL, 0};
    tp_datatype_t datatype;
    if (!tp_nn_datatype(type, &datatype)) {
        wasi_nn_tensor_tensor_drop_own(named->f1);
        tp_fail(err, 500, "wasi:nn unsupported-operation: output '%.*s': BF16 has no V2 datatype", (int)name.len,
                (const char *)name.ptr);
        free(name.ptr);
        return false;
    }
    wasi_nn_tensor_tensor_dimensions_t dims;
    wasi_nn_tensor_tensor_data_t data;
    wasi_nn_tensor_method_tensor_dimensions(borrowed, &dims);
    wasi_nn_tensor_method_tensor_data(borrowed, &data);
    wasi_nn_tensor_tensor_drop_own(named->f1);
    out->name = name;
    out->datatype = datatype;
    out->shape.len = dims.len;
    out->shape.ptr = NULL;
    if (dims.len > 0) {
        out->shape.ptr = (uint64_t *)malloc(dims.len * sizeof(uint64_t));
        if (out->shape.ptr == NULL) abort();
        for (size_t d = 0; d < dims.len; d++) out->shape.ptr[d] = dims.ptr[d];
        free(dims.ptr);
    }
    out->data.len = data.len;
    out->data.ptr = data.len > 0 ? data.ptr : NULL;
    return true;
}

/* Runs `graph` on `count` inputs (borrowed: the host copies them; each by its name, and a
 * graph with one input takes any name). On success `*outputs` is a malloc'd array of
 * `*n_outputs` tensors in the graph's output order, each named as the graph names it and
 * malloc'd as results must be: move them into a prediction's outputs (rename them with
 * `free(t.name.ptr); tp_string_printf(&t.name, "...")`) or free them with
 * `tp_tensors_free`. On failure fills `err` (400 when the inputs do not fit the graph:
 * wrong names, types or shapes, a datatype wasi:nn cannot carry; 504 timeout; 500
 * otherwise), sets `*outputs` to NULL and returns false. */
static inline bool tp_graph_compute(const tp_graph_t *graph, const tp_tensor_t *inputs, size_t count,
                                    tp_tensor_t **outputs, size_t *n_outputs, tp_item_error_t *err) {
    *outputs = NULL;
    *n_outputs = 0;
    /* Everything that can be refused is checked before any tensor handle exists. */
    wasi_nn_tensor_tensor_type_t *types =
        (wasi_nn_tensor_tensor_type_t *)malloc((count ? count : 1) * sizeof *types);
    if (types == NULL) abort();
    for (size_t i = 0; i < count; i++) {
        const tp_tensor_t *t = &inputs[i];
        bool narrow = true;
        for (size_t d = 0; d < t->shape.len; d++) narrow = narrow && t->shape.ptr[d] <= UINT32_MAX;
        if (!tp_nn_tensor_type(t->datatype, &types[i]) || !narrow) {
            free(types);
            return tp_fail(err, 400, "wasi:nn invalid-argument: invalid input '%.*s': %s", (int)t->name.len,
                           (const char *)t->name.ptr,
                           narrow ? "wasi:nn cannot carry its datatype" : "a dimension exceeds u32");
        }
    }
    wasi_nn_inference_named_tensor_t *named =
        (wasi_nn_inference_named_tensor_t *)malloc((count ? count : 1) * sizeof *named);
    if (named == NULL) abort();
    for (size_t i = 0; i < count; i++) {
        const tp_tensor_t *t = &inputs[i];
        uint32_t *dims = (uint32_t *)malloc((t->shape.len ? t->shape.len : 1) * sizeof(uint32_t));
        if (dims == NULL) abort();
        for (size_t d = 0; d < t->shape.len; d++) dims[d] = (uint32_t)t->shape.ptr[d];
        wasi_nn_tensor_tensor_dimensions_t dimensions = {dims, t->shape.len};
        wasi_nn_tensor_tensor_data_t data = {t->data.ptr, t->data.len};
        named[i].f0 = t->name; /* borrowed: the host copies it */
        named[i].f1 = wasi_nn_tensor_constructor_tensor(&dimensions, types[i], &data);
        free(dims);
    }
    free(types);
    /* The input handles move to the host with the call, whatever it answers. */
    wasi_nn_inference_list_named_tensor_t list = {named, count}, results = {NULL, 0};
    wasi_nn_errors_own_error_t error;
    bool computed = wasi_nn_inference_method_graph_execution_context_compute(
        wasi_nn_inference_borrow_graph_execution_context(graph->context), &list, &results, &error);
    free(named);
    if (!computed) return tp_nn_fail_(error, err);
    tp_tensor_t *tensors = tp_tensors_new(results.len ? results.len : 1);
    size_t made = 0;
    bool ok = true;
    for (size_t i = 0; i < results.len; i++) {
        if (ok && tp_nn_output_(&results.ptr[i], &tensors[made], err)) {
            made++;
            continue;
        }
        if (ok) { /* the failing output was released by tp_nn_output_ */
            ok = false;
            continue;
        }
        wasi_nn_tensor_tensor_drop_own(results.ptr[i].f1);
        if (results.ptr[i].f0.len > 0) free(results.ptr[i].f0.ptr);
    }
    if (results.len > 0) free(results.ptr);
    if (!ok || made == 0) {
        tp_tensors_free(tensors, made);
        return ok; /* no outputs: the empty list { NULL, 0 } */
    }
    *outputs = tensors;
    *n_outputs = made;
    return true;
}

#endif /* TENSORPLUG_H */
