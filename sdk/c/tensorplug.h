/* tensorplug.h — a small C layer over the bindings `wit-bindgen c` generates for a
 * tensorplug world (wit/plugin.wit). Header only: include your world's generated header
 * (predictor.h, preprocessor.h or postprocessor.h) first, then this one.
 *
 * Ownership, which the generated bindings leave to you:
 * - An export's arguments belong to the plugin: free them before returning (e.g.
 *   `predictor_list_tensor_free(batch)`, `predictor_list_parameter_free(parameters)`),
 *   after the last use of any view into them.
 * - An export's results are freed by the bindings after the host has copied them, with
 *   `free`: every pointer in a result (names, shapes, data, messages, lists) must come
 *   from `malloc`, and an empty list is { NULL, 0 }. The builders below do exactly that.
 *
 * Views (`tp_values`) point into the argument's own buffer (no copy): valid until the
 * argument is freed. Buffers the host hands over come from `malloc` (through
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

#endif /* TENSORPLUG_H */
