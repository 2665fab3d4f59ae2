/* Native unit tests of sdk/c/tensorplug.h (scripts/test-c-sdk.sh builds and runs them,
 * under AddressSanitizer and UBSan where the machine has them).
 *
 * The helpers' imports are faked here by a small host that owns every handle it hands
 * out: a handle the SDK drops twice, drops after giving it away, or never drops fails a
 * check, and buffers it "returns" come from malloc like cabi_realloc's, with the same
 * dangling non-NULL pointer for an empty one, so that a free the SDK must not do shows up
 * under the sanitizers. Prints one line per failed check and a summary; exits 1 on any
 * failure.
 */
#include "predictor.h"
#include "tensorplug.h"

static int checks, failed_checks;

#define CHECK(cond)                                                                                                \
    do {                                                                                                           \
        checks++;                                                                                                  \
        if (!(cond)) {                                                                                             \
            failed_checks++;                                                                                       \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                               \
        }                                                                                                          \
    } while (0)

static bool message_has(const tp_string_t *s, const char *needle) {
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= s->len; i++)
        if (memcmp(s->ptr + i, needle, n) == 0) return true;
    return false;
}

/* ---- the fake host ------------------------------------------------------------------- */

enum kind { FREE_SLOT, GRAPH, CONTEXT, TENSOR, ERROR };

#define HANDLES 64
static struct handle {
    enum kind kind;
    /* tensors */
    uint32_t dims[4];
    size_t rank;
    wasi_nn_tensor_tensor_type_t type;
    uint8_t *data;
    size_t len;
    /* errors */
    wasi_nn_errors_error_code_t code;
    const char *message;
} handles[HANDLES];
static int bad_drops;

/* What the fake graph answers next: 0 = outputs `double` (FP32, 2x) and `empty` (an I64
 * tensor of 0 elements); 1 = also a BF16 output. */
static int compute_mode;

static int32_t host_new(enum kind kind) {
    for (int32_t h = 1; h < HANDLES; h++)
        if (handles[h].kind == FREE_SLOT) {
            memset(&handles[h], 0, sizeof handles[h]);
            handles[h].kind = kind;
            return h;
        }
    abort();
}

static void host_drop(int32_t h, enum kind kind) {
    if (h <= 0 || h >= HANDLES || handles[h].kind != kind) {
        bad_drops++;
        return;
    }
    free(handles[h].data);
    handles[h].kind = FREE_SLOT;
}

static int live_handles(void) {
    int live = 0;
    for (int h = 1; h < HANDLES; h++) live += handles[h].kind != FREE_SLOT;
    return live;
}

/* A buffer as cabi_realloc gives one: malloc'd, or a dangling non-NULL pointer if empty. */
static uint8_t *host_copy(const void *bytes, size_t len) {
    if (len == 0) return (uint8_t *)(uintptr_t)4;
    uint8_t *copy = (uint8_t *)malloc(len);
    memcpy(copy, bytes, len);
    return copy;
}

static wasi_nn_errors_own_error_t host_error(wasi_nn_errors_error_code_t code, const char *message) {
    int32_t h = host_new(ERROR);
    handles[h].code = code;
    handles[h].message = message;
    return (wasi_nn_errors_own_error_t){h};
}

/* Log lines and metric updates the SDK made. */
static char last_log[256];
static char last_metric[128];
static double last_value;
static size_t last_labels;

void tensorplug_plugin_log_log(tensorplug_plugin_log_level_t level, predictor_string_t *message) {
    snprintf(last_log, sizeof last_log, "%u %.*s", (unsigned)level, (int)message->len, (const char *)message->ptr);
}

bool tensorplug_plugin_metadata_declare(predictor_string_t *key, predictor_string_t *value, predictor_string_t *err) {
    (void)value;
    if (key->len > 0) return true;
    const char *reason = "empty key";
    *err = (predictor_string_t){host_copy(reason, strlen(reason)), strlen(reason)};
    return false;
}

/* Refuses names with a space (with a reason) and names "silent" (with an empty one). */
static bool metric(const char *kind, predictor_string_t *name, tensorplug_plugin_metrics_list_label_t *labels,
                   double value, predictor_string_t *err) {
    snprintf(last_metric, sizeof last_metric, "%s %.*s", kind, (int)name->len, (const char *)name->ptr);
    last_value = value;
    last_labels = labels->len;
    for (size_t i = 0; i < labels->len; i++)
        if (labels->ptr[i].name.len == 0 || labels->ptr[i].value.len == 0) return false;
    if (memchr(name->ptr, ' ', name->len) != NULL) {
        const char *reason = "metric name has a space";
        *err = (predictor_string_t){host_copy(reason, strlen(reason)), strlen(reason)};
        return false;
    }
    if (name->len == 6 && memcmp(name->ptr, "silent", 6) == 0) {
        *err = (predictor_string_t){host_copy("", 0), 0};
        return false;
    }
    return true;
}

bool tensorplug_plugin_metrics_counter_add(predictor_string_t *name, tensorplug_plugin_metrics_list_label_t *labels,
                                           double value, predictor_string_t *err) {
    return metric("counter", name, labels, value, err);
}

bool tensorplug_plugin_metrics_gauge_set(predictor_string_t *name, tensorplug_plugin_metrics_list_label_t *labels,
                                         double value, predictor_string_t *err) {
    return metric("gauge", name, labels, value, err);
}

bool tensorplug_plugin_metrics_histogram_observe(predictor_string_t *name,
                                                 tensorplug_plugin_metrics_list_label_t *labels, double value,
                                                 predictor_string_t *err) {
    return metric("histogram", name, labels, value, err);
}

bool wasi_nn_graph_load_by_name(predictor_string_t *name, wasi_nn_graph_own_graph_t *ret,
                                wasi_nn_graph_own_error_t *err) {
    if (name->len == 6 && memcmp(name->ptr, "digits", 6) == 0) {
        *ret = (wasi_nn_graph_own_graph_t){host_new(GRAPH)};
        return true;
    }
    *err = host_error(WASI_NN_ERRORS_ERROR_CODE_NOT_FOUND, "no graph by that name");
    return false;
}

wasi_nn_graph_borrow_graph_t wasi_nn_graph_borrow_graph(wasi_nn_graph_own_graph_t handle) {
    return (wasi_nn_graph_borrow_graph_t){handle.__handle};
}

bool wasi_nn_graph_method_graph_init_execution_context(wasi_nn_graph_borrow_graph_t self,
                                                       wasi_nn_graph_own_graph_execution_context_t *ret,
                                                       wasi_nn_graph_own_error_t *err) {
    (void)err;
    CHECK(handles[self.__handle].kind == GRAPH);
    *ret = (wasi_nn_graph_own_graph_execution_context_t){host_new(CONTEXT)};
    return true;
}

void wasi_nn_graph_graph_drop_own(wasi_nn_graph_own_graph_t handle) { host_drop(handle.__handle, GRAPH); }

void wasi_nn_inference_graph_execution_context_drop_own(wasi_nn_inference_own_graph_execution_context_t handle) {
    host_drop(handle.__handle, CONTEXT);
}

wasi_nn_inference_borrow_graph_execution_context_t
wasi_nn_inference_borrow_graph_execution_context(wasi_nn_inference_own_graph_execution_context_t handle) {
    return (wasi_nn_inference_borrow_graph_execution_context_t){handle.__handle};
}

wasi_nn_tensor_own_tensor_t wasi_nn_tensor_constructor_tensor(wasi_nn_tensor_tensor_dimensions_t *dimensions,
                                                              wasi_nn_tensor_tensor_type_t ty,
                                                              wasi_nn_tensor_tensor_data_t *data) {
    int32_t h = host_new(TENSOR);
    CHECK(dimensions->len <= 4);
    handles[h].rank = dimensions->len;
    memcpy(handles[h].dims, dimensions->ptr, dimensions->len * sizeof(uint32_t));
    handles[h].type = ty;
    handles[h].len = data->len;
    handles[h].data = (uint8_t *)malloc(data->len ? data->len : 1);
    if (data->len) memcpy(handles[h].data, data->ptr, data->len);
    return (wasi_nn_tensor_own_tensor_t){h};
}

wasi_nn_tensor_borrow_tensor_t wasi_nn_tensor_borrow_tensor(wasi_nn_tensor_own_tensor_t handle) {
    return (wasi_nn_tensor_borrow_tensor_t){handle.__handle};
}

void wasi_nn_tensor_tensor_drop_own(wasi_nn_tensor_own_tensor_t handle) { host_drop(handle.__handle, TENSOR); }

wasi_nn_tensor_tensor_type_t wasi_nn_tensor_method_tensor_ty(wasi_nn_tensor_borrow_tensor_t self) {
    return handles[self.__handle].type;
}

void wasi_nn_tensor_method_tensor_dimensions(wasi_nn_tensor_borrow_tensor_t self,
                                             wasi_nn_tensor_tensor_dimensions_t *ret) {
    struct handle *t = &handles[self.__handle];
    *ret = (wasi_nn_tensor_tensor_dimensions_t){(uint32_t *)host_copy(t->dims, t->rank * sizeof(uint32_t)), t->rank};
}

void wasi_nn_tensor_method_tensor_data(wasi_nn_tensor_borrow_tensor_t self, wasi_nn_tensor_tensor_data_t *ret) {
    struct handle *t = &handles[self.__handle];
    *ret = (wasi_nn_tensor_tensor_data_t){host_copy(t->data, t->len), t->len};
}

wasi_nn_errors_borrow_error_t wasi_nn_errors_borrow_error(wasi_nn_errors_own_error_t handle) {
    return (wasi_nn_errors_borrow_error_t){handle.__handle};
}

wasi_nn_errors_error_code_t wasi_nn_errors_method_error_code(wasi_nn_errors_borrow_error_t self) {
    return handles[self.__handle].code;
}

void wasi_nn_errors_method_error_data(wasi_nn_errors_borrow_error_t self, predictor_string_t *ret) {
    const char *message = handles[self.__handle].message;
    *ret = (predictor_string_t){host_copy(message, strlen(message)), strlen(message)};
}

void wasi_nn_errors_error_drop_own(wasi_nn_errors_own_error_t handle) { host_drop(handle.__handle, ERROR); }

/* The fake graph: one FP32 input of shape [1, 4]; the inputs' handles become the host's. */
bool wasi_nn_inference_method_graph_execution_context_compute(wasi_nn_inference_borrow_graph_execution_context_t self,
                                                              wasi_nn_inference_list_named_tensor_t *inputs,
                                                              wasi_nn_inference_list_named_tensor_t *ret,
                                                              wasi_nn_inference_own_error_t *err) {
    CHECK(handles[self.__handle].kind == CONTEXT);
    bool fits = inputs->len == 1;
    struct handle *x = fits ? &handles[inputs->ptr[0].f1.__handle] : NULL;
    fits = fits && x->kind == TENSOR && x->type == WASI_NN_TENSOR_TENSOR_TYPE_FP32 && x->rank == 2 &&
           x->dims[0] == 1 && x->dims[1] == 4 && x->len == 16;
    float doubled[4] = {0};
    if (fits)
        for (int i = 0; i < 4; i++) doubled[i] = 2 * ((float *)x->data)[i];
    for (size_t i = 0; i < inputs->len; i++) host_drop(inputs->ptr[i].f1.__handle, TENSOR);
    if (!fits) {
        *err = host_error(WASI_NN_ERRORS_ERROR_CODE_INVALID_ARGUMENT, "expected one FP32 [1, 4] input");
        return false;
    }
    size_t count = compute_mode == 1 ? 3 : 2;
    wasi_nn_inference_named_tensor_t *out =
        (wasi_nn_inference_named_tensor_t *)malloc(count * sizeof(wasi_nn_inference_named_tensor_t));
    const char *names[] = {"double", "empty", "brain"};
    for (size_t i = 0; i < count; i++) {
        int32_t h = host_new(TENSOR);
        out[i].f0 = (predictor_string_t){host_copy(names[i], strlen(names[i])), strlen(names[i])};
        out[i].f1 = (wasi_nn_tensor_own_tensor_t){h};
        struct handle *t = &handles[h];
        if (i == 0) {
            t->type = WASI_NN_TENSOR_TENSOR_TYPE_FP32;
            t->rank = 2, t->dims[0] = 1, t->dims[1] = 4;
            t->len = sizeof doubled;
            t->data = host_copy(doubled, sizeof doubled);
        } else if (i == 1) {
            t->type = WASI_NN_TENSOR_TENSOR_TYPE_I64;
            t->rank = 1, t->dims[0] = 0;
        } else {
            t->type = WASI_NN_TENSOR_TENSOR_TYPE_BF16;
            t->rank = 1, t->dims[0] = 1;
            t->len = 2;
            t->data = host_copy("\0\0", 2);
        }
    }
    *ret = (wasi_nn_inference_list_named_tensor_t){out, count};
    return true;
}

/* ---- the tests ----------------------------------------------------------------------- */

/* A tensor as the host hands one to an export (its own malloc'd buffers). */
static tp_tensor_t input(const char *name, tp_datatype_t datatype, const uint64_t *shape, size_t rank,
                         size_t data_len) {
    tp_tensor_t t;
    tp_tensor_new(&t, name, datatype, shape, rank);
    if (t.data.len != data_len) {
        free(t.data.ptr);
        t.data.ptr = (uint8_t *)calloc(data_len ? data_len : 1, 1);
        t.data.len = data_len;
    }
    return t;
}

static void test_find_expect_values(void) {
    tp_tensor_t batch[2] = {input("a", TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32, (uint64_t[]){3, 2}, 2, 24),
                            input("b", TENSORPLUG_PLUGIN_TYPES_DATATYPE_INT64, (uint64_t[]){3}, 1, 24)};
    tp_item_error_t err = {0};
    CHECK(tp_find(batch, 2, "b", &err) == &batch[1]);
    CHECK(tp_find(batch, 2, "c", NULL) == NULL);
    CHECK(tp_find(batch, 2, "c", &err) == NULL && err.status == 400 && message_has(&err.message, "'c'"));
    free(err.message.ptr);

    CHECK(tp_expect(&batch[0], TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32, (int64_t[]){-1, 2}, 2, &err));
    CHECK(tp_expect(&batch[0], TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32, (int64_t[]){3, -1}, 2, &err));
    err = (tp_item_error_t){0};
    CHECK(!tp_expect(&batch[0], TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP64, (int64_t[]){-1, 2}, 2, &err));
    CHECK(err.status == 400 && message_has(&err.message, "datatype"));
    free(err.message.ptr);
    CHECK(!tp_expect(&batch[0], TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32, (int64_t[]){-1, 3}, 2, &err));
    CHECK(err.status == 400 && message_has(&err.message, "shape"));
    free(err.message.ptr);
    CHECK(!tp_expect(&batch[0], TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32, (int64_t[]){-1}, 1, &err)); /* rank */
    CHECK(err.status == 400 && message_has(&err.message, "rank 2"));
    free(err.message.ptr);

    size_t count = 0;
    const float *a = (const float *)tp_values(&batch[0], &count, &err);
    CHECK(a != NULL && count == 6 && (const uint8_t *)a == batch[0].data.ptr);
    tp_tensor_t short_data = input("s", TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32, (uint64_t[]){2, 2}, 2, 12);
    CHECK(tp_values(&short_data, &count, &err) == NULL && err.status == 400 &&
          message_has(&err.message, "12 data bytes for 4 elements"));
    free(err.message.ptr);
    tp_tensor_t bytes = input("t", TENSORPLUG_PLUGIN_TYPES_DATATYPE_BYTES, (uint64_t[]){1}, 1, 3);
    CHECK(tp_values(&bytes, &count, &err) == NULL && err.status == 400 && message_has(&err.message, "BYTES"));
    free(err.message.ptr);
    tp_tensor_t empty = input("e", TENSORPLUG_PLUGIN_TYPES_DATATYPE_INT32, (uint64_t[]){0, 5}, 2, 0);
    CHECK(tp_values(&empty, &count, &err) != NULL && count == 0);
    tp_tensor_t scalar = input("one", TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP64, NULL, 0, 8);
    CHECK(tp_element_count(&scalar) == 1 && tp_values(&scalar, &count, &err) != NULL && count == 1);

    tp_tensor_t *all = tp_tensors_new(6);
    all[0] = batch[0], all[1] = batch[1], all[2] = short_data, all[3] = bytes, all[4] = empty, all[5] = scalar;
    tp_tensors_free(all, 6);
}

static void test_builders(void) {
    tp_tensor_t *outputs = tp_tensors_new(2);
    CHECK(outputs[1].name.ptr == NULL && outputs[1].data.len == 0); /* zeroed */
    float *y = (float *)tp_tensor_new(&outputs[0], "y", TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32, (uint64_t[]){2, 3}, 2);
    CHECK(y != NULL && outputs[0].data.len == 24 && outputs[0].shape.len == 2 && outputs[0].shape.ptr[1] == 3);
    CHECK(tp_string_is(&outputs[0].name, "y") && outputs[0].datatype == TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32);
    bool zeroed = true;
    for (int i = 0; i < 6; i++) zeroed = zeroed && y[i] == 0.0f;
    CHECK(zeroed);
    y[5] = 1.0f; /* the whole buffer is writable (ASan checks the bound) */
    void *none = tp_tensor_new(&outputs[1], "none", TENSORPLUG_PLUGIN_TYPES_DATATYPE_INT64, (uint64_t[]){0}, 1);
    CHECK(none == NULL && outputs[1].data.len == 0 && outputs[1].data.ptr == NULL);
    tp_tensors_free(outputs, 2);
}

static void test_failures(void) {
    tp_item_error_t err;
    CHECK(!tp_fail(&err, 422, "x: %d is %s", 7, "odd"));
    CHECK(err.status == 422 && tp_string_is(&err.message, "x: 7 is odd"));
    free(err.message.ptr);

    tp_failures_t failures = {NULL, 0};
    for (uint32_t i = 0; i < 5; i++) tp_fail_item(&failures, i * 2, (uint16_t)(400 + i), "item %u", i * 2);
    CHECK(failures.len == 5 && failures.ptr[4].index == 8 && failures.ptr[4].error.status == 404);
    CHECK(tp_string_is(&failures.ptr[2].error.message, "item 4"));
    for (size_t i = 0; i < failures.len; i++) free(failures.ptr[i].error.message.ptr);
    free(failures.ptr);
}

static void test_parameters(void) {
    tp_parameter_t parameters[2] = {{{(uint8_t *)"scale", 5}, {(uint8_t *)"2.5", 3}},
                                    {{(uint8_t *)"mode", 4}, {(uint8_t *)"", 0}}};
    char *scale = tp_parameter(parameters, 2, "scale");
    CHECK(scale != NULL && strcmp(scale, "2.5") == 0);
    free(scale);
    char *mode = tp_parameter(parameters, 2, "mode");
    CHECK(mode != NULL && mode[0] == '\0');
    free(mode);
    CHECK(tp_parameter(parameters, 2, "missing") == NULL);
    CHECK(tp_parameter(parameters, 2, "scal") == NULL);
}

static void test_log_and_metadata(void) {
    tp_log(TP_WARN, "%s %d", "ready", 3);
    CHECK(strcmp(last_log, "3 ready 3") == 0);
    tp_string_t err;
    CHECK(tp_declare("labels", "0,1", &err));
    CHECK(!tp_declare("", "x", &err) && tp_string_is(&err, "empty key"));
    free(err.ptr);
}

static void test_metrics(void) {
    tp_item_error_t err = {0};
    CHECK(tp_counter_add("blank_images", NULL, 0, 2.0, &err));
    CHECK(strcmp(last_metric, "counter blank_images") == 0 && last_value == 2.0 && last_labels == 0);
    tp_label_t labels[10];
    for (int i = 0; i < 10; i++) labels[i] = (tp_label_t){"class", "7"};
    CHECK(tp_gauge_set("last_batch", labels, 2, 4.0, &err) && last_labels == 2);
    CHECK(tp_histogram_observe("confidence", labels, 10, 0.5, &err)); /* more labels than the stack holds */
    CHECK(strcmp(last_metric, "histogram confidence") == 0 && last_labels == 10);
    CHECK(err.message.ptr == NULL);

    /* A refusal: false and a 422 carrying the host's reason, which the caller owns. */
    CHECK(!tp_counter_add("bad name", NULL, 0, 1.0, &err));
    CHECK(err.status == 422 && tp_string_is(&err.message, "metric name has a space"));
    free(err.message.ptr);
    CHECK(!tp_gauge_set("bad name", labels, 9, 1.0, &err) && err.status == 422);
    free(err.message.ptr);
    CHECK(!tp_histogram_observe("bad name", NULL, 0, 1.0, NULL)); /* reason dropped, not leaked */
    /* An empty reason: a NULL message (never the bindings' dangling pointer). */
    CHECK(!tp_counter_add("silent", NULL, 0, 1.0, &err) && err.status == 422 && err.message.ptr == NULL &&
          err.message.len == 0);
}

static void test_nn_types(void) {
    static const struct {
        tp_datatype_t datatype;
        wasi_nn_tensor_tensor_type_t type;
    } pairs[] = {{TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP16, WASI_NN_TENSOR_TENSOR_TYPE_FP16},
                 {TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32, WASI_NN_TENSOR_TENSOR_TYPE_FP32},
                 {TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP64, WASI_NN_TENSOR_TENSOR_TYPE_FP64},
                 {TENSORPLUG_PLUGIN_TYPES_DATATYPE_UINT8, WASI_NN_TENSOR_TENSOR_TYPE_U8},
                 {TENSORPLUG_PLUGIN_TYPES_DATATYPE_INT32, WASI_NN_TENSOR_TENSOR_TYPE_I32},
                 {TENSORPLUG_PLUGIN_TYPES_DATATYPE_INT64, WASI_NN_TENSOR_TENSOR_TYPE_I64}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        wasi_nn_tensor_tensor_type_t type = 99;
        tp_datatype_t datatype = 99;
        CHECK(tp_nn_tensor_type(pairs[i].datatype, &type) && type == pairs[i].type);
        CHECK(tp_nn_datatype(pairs[i].type, &datatype) && datatype == pairs[i].datatype);
    }
    wasi_nn_tensor_tensor_type_t type;
    tp_datatype_t datatype;
    for (tp_datatype_t d = TENSORPLUG_PLUGIN_TYPES_DATATYPE_BOOL; d <= TENSORPLUG_PLUGIN_TYPES_DATATYPE_BYTES; d++) {
        bool carried = d == TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP16 || d == TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32 ||
                       d == TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP64 || d == TENSORPLUG_PLUGIN_TYPES_DATATYPE_UINT8 ||
                       d == TENSORPLUG_PLUGIN_TYPES_DATATYPE_INT32 || d == TENSORPLUG_PLUGIN_TYPES_DATATYPE_INT64;
        CHECK(tp_nn_tensor_type(d, &type) == carried);
    }
    CHECK(!tp_nn_datatype(WASI_NN_TENSOR_TENSOR_TYPE_BF16, &datatype));
    CHECK(tp_nn_status(WASI_NN_ERRORS_ERROR_CODE_INVALID_ARGUMENT) == 400);
    CHECK(tp_nn_status(WASI_NN_ERRORS_ERROR_CODE_TIMEOUT) == 504);
    CHECK(tp_nn_status(WASI_NN_ERRORS_ERROR_CODE_NOT_FOUND) == 500);
    CHECK(tp_nn_status(WASI_NN_ERRORS_ERROR_CODE_RUNTIME_ERROR) == 500);
}

static void test_graphs(void) {
    tp_item_error_t err = {0};
    tp_graph_t graph;
    CHECK(!tp_graph_by_name("nope", &graph, &err));
    CHECK(err.status == 500 && tp_string_is(&err.message, "wasi:nn not-found: no graph by that name"));
    free(err.message.ptr);
    CHECK(live_handles() == 0);

    CHECK(tp_graph_by_name("digits", &graph, &err));
    CHECK(live_handles() == 2); /* the graph and its context */

    tp_tensor_t x = input("x", TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32, (uint64_t[]){1, 4}, 2, 16);
    for (int i = 0; i < 4; i++) ((float *)x.data.ptr)[i] = (float)i + 0.5f;
    tp_tensor_t *outputs = NULL;
    size_t n = 0;
    for (int run = 0; run < 3; run++) { /* one context, reused */
        CHECK(tp_graph_compute(&graph, &x, 1, &outputs, &n, &err));
        CHECK(n == 2 && live_handles() == 2);
        if (n != 2) break;
        size_t count = 0;
        const float *y = (const float *)tp_values(&outputs[0], &count, &err);
        CHECK(tp_string_is(&outputs[0].name, "double") && y != NULL && count == 4 && y[3] == 7.0f);
        CHECK(outputs[0].shape.len == 2 && outputs[0].shape.ptr[0] == 1 && outputs[0].shape.ptr[1] == 4);
        /* An empty output: NULL data, never the bindings' dangling pointer. */
        CHECK(outputs[1].datatype == TENSORPLUG_PLUGIN_TYPES_DATATYPE_INT64 && outputs[1].data.ptr == NULL &&
              outputs[1].data.len == 0 && outputs[1].shape.len == 1 && outputs[1].shape.ptr[0] == 0);
        tp_tensors_free(outputs, n);
    }

    /* The host refuses the inputs: a 400 with its code and message; their handles are gone. */
    tp_tensor_t wide = input("x", TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32, (uint64_t[]){1, 5}, 2, 20);
    CHECK(!tp_graph_compute(&graph, &wide, 1, &outputs, &n, &err) && outputs == NULL && n == 0);
    CHECK(err.status == 400 && tp_string_is(&err.message, "wasi:nn invalid-argument: expected one FP32 [1, 4] input"));
    free(err.message.ptr);
    CHECK(live_handles() == 2);

    /* The SDK refuses what wasi:nn cannot carry, before any handle exists. */
    tp_tensor_t pair[2] = {input("x", TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32, (uint64_t[]){1, 4}, 2, 16),
                           input("flags", TENSORPLUG_PLUGIN_TYPES_DATATYPE_BOOL, (uint64_t[]){4}, 1, 4)};
    CHECK(!tp_graph_compute(&graph, pair, 2, &outputs, &n, &err) && err.status == 400);
    CHECK(message_has(&err.message, "'flags'") && message_has(&err.message, "cannot carry"));
    free(err.message.ptr);
    tp_tensor_t huge = input("x", TENSORPLUG_PLUGIN_TYPES_DATATYPE_UINT8, (uint64_t[]){1ull << 32, 0}, 2, 0);
    CHECK(!tp_graph_compute(&graph, &huge, 1, &outputs, &n, &err) && err.status == 400 &&
          message_has(&err.message, "exceeds u32"));
    free(err.message.ptr);
    CHECK(live_handles() == 2);

    /* An output V2 cannot name (BF16): a 500, and every output handle and buffer released. */
    compute_mode = 1;
    CHECK(!tp_graph_compute(&graph, &x, 1, &outputs, &n, &err) && outputs == NULL);
    CHECK(err.status == 500 && message_has(&err.message, "BF16"));
    free(err.message.ptr);
    compute_mode = 0;
    CHECK(live_handles() == 2);

    tp_graph_drop(&graph);
    CHECK(live_handles() == 0);
    CHECK(bad_drops == 0);

    tp_tensor_t *inputs = tp_tensors_new(6);
    inputs[0] = x, inputs[1] = wide, inputs[2] = pair[0], inputs[3] = pair[1], inputs[4] = huge;
    tp_tensors_free(inputs, 5);
}

int main(void) {
    test_find_expect_values();
    test_builders();
    test_failures();
    test_parameters();
    test_log_and_metadata();
    test_metrics();
    test_nn_types();
    test_graphs();
    if (failed_checks > 0) {
        printf("C SDK: %d of %d checks FAILED\n", failed_checks, checks);
        return 1;
    }
    printf("C SDK: %d checks passed\n", checks);
    return 0;
}
