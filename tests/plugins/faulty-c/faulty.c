/* A predictor in C that misbehaves on request, for the failure-isolation tests of C
 * plugins (tests/e2e/languages.rs), written with the C SDK (sdk/c/tensorplug.h).
 *
 * Input `x: FP32 [N, 1]`, output `y: FP32 [N, 1] = 2x`. An item whose value is one of
 * these codes does something else:
 *
 * | x | what happens |
 * | --- | --- |
 * | -1 | `abort()`: the plugin's uncaught failure (a trap) |
 * | -3 | mallocs 1 MiB blocks until memory runs out, then traps (in WebAssembly address 0 is writable, so a write through the NULL would not trap: the plugin traps itself, as an unchecked OOM ends) |
 * | -5 | item failure 422 "faulty-c: item rejected" |
 * | -2 | loops forever (the deadline: 504) |
 * | -4 | recurses without end (a stack overflow: a trap) |
 * | -9 | `sleep(3)` (a WASI poll: the deadline cuts it) |
 * | -11 | writes 1 MiB to stdout and to stderr, then answers as usual (the host keeps 64 KiB) |
 * | -51 | the batch also answers `blob: BYTES [N, 1]`, whose element is 80 MiB for this item and empty for the others (declare no outputs, so `blob` may appear; past `max_answer_mib` the item's 500) |
 * | -70 | tries the sandbox's walls, fails the item 422 with what each met: files outside the model folder, the environment (a wall that gives way says BREACH) |
 * | -40 - k (k = 0..9) | y = the probability of class k that the `wasi:nn` graph `digits` gives the image `FAULTY_IMAGE` (pixel i = (7i) mod 17) |
 * | -60 | runs `digits` on an FP32 [1, 63] input: the host's refusal (400) is the item's error |
 * | -61 | runs `digits` on a BOOL input: the SDK's refusal (400) is the item's error |
 *
 * The graph is loaded on first use (the model's `[graphs]` must name `digits`; without it
 * the nn codes get the host's not-found as a 500) and kept for the instance's life.
 *
 * Built by scripts/build-c-plugins.sh into tests/models/faulty-c/predict.wasm.
 */
#include "predictor.h"
#include "tensorplug.h"

#include <stdio.h>
#include <unistd.h>

extern char **environ;

enum { PIXELS = 64, CLASSES = 10 };

static tp_graph_t digits;
static bool digits_loaded;

bool exports_predictor_init(predictor_list_parameter_t *parameters, predictor_string_t *err) {
    (void)err;
    predictor_list_parameter_free(parameters);
    return true;
}

/* Fills the image every nn code runs on (the e2e test sends the same to digits-onnx). */
static void faulty_image(float *pixels) {
    for (int i = 0; i < PIXELS; i++) pixels[i] = (float)((7 * i) % 17);
}

/* Runs `digits` once on `input`; the outputs (or NULL and `err`). */
static tp_tensor_t *run_digits(const tp_tensor_t *input, size_t *n_outputs, tp_item_error_t *err) {
    if (!digits_loaded && !(digits_loaded = tp_graph_by_name("digits", &digits, err))) return NULL;
    tp_tensor_t *outputs;
    return tp_graph_compute(&digits, input, 1, &outputs, n_outputs, err) ? outputs : NULL;
}

/* The probability of class `k` for the faulty image, or a failure in `err`. */
static bool digits_probability(int k, float *out, tp_item_error_t *err) {
    tp_tensor_t input;
    float *pixels = tp_tensor_new(&input, "input", TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32, (uint64_t[]){1, PIXELS}, 2);
    faulty_image(pixels);
    size_t n_outputs = 0;
    tp_tensor_t *outputs = run_digits(&input, &n_outputs, err);
    free(input.name.ptr);
    free(input.shape.ptr);
    free(input.data.ptr);
    if (outputs == NULL) return false;
    size_t count;
    const tp_tensor_t *proba = tp_find(outputs, n_outputs, "probabilities", err);
    const float *p = proba == NULL ? NULL : tp_values(proba, &count, err);
    bool ok = p != NULL && (count == CLASSES || tp_fail(err, 500, "digits: %zu probabilities", count));
    if (ok) *out = p[k];
    tp_tensors_free(outputs, n_outputs);
    return ok;
}

/* Runs `digits` on an input it refuses: the refusal is the item's error. */
static void digits_refusal(tp_datatype_t datatype, uint64_t width, tp_item_error_t *err) {
    tp_tensor_t input;
    tp_tensor_new(&input, "input", datatype, (uint64_t[]){1, width}, 2);
    size_t n_outputs = 0;
    tp_tensor_t *outputs = run_digits(&input, &n_outputs, err);
    free(input.name.ptr);
    free(input.shape.ptr);
    free(input.data.ptr);
    if (outputs != NULL) {
        tp_tensors_free(outputs, n_outputs);
        tp_fail(err, 500, "faulty-c: the graph accepted an input it should refuse");
    }
}

/* Code -3: what a C program whose malloc is never checked ends in, made explicit. */
static void *volatile kept; /* the blocks stay reachable, so no allocation is elided */

static void exhaust_memory(void) {
    for (;;) {
        void **block = malloc(1 << 20);
        if (block == NULL) __builtin_trap();
        memset(block, 1, 1 << 20);
        *block = kept;
        kept = block;
    }
}

/* Code -4: each frame keeps a little stack, so the recursion reaches the stack's end (the
 * condition is never false, but the compiler cannot know it). */
static volatile int bottomless = 1;
static int recurse(int depth) {
    volatile char frame[256];
    frame[0] = (char)depth;
    return bottomless ? recurse(depth + 1) + frame[0] : 0;
}

/* Code -51's element of `blob`: far past any test's max_answer_mib, and enough that the
 * instance grows more than the 64 MiB past its start after which the host replaces it. */
enum { HUGE = 80 << 20 };

/* Code -51: `blob`, BYTES [n, 1], each element its 4-byte little-endian length and then its
 * bytes: HUGE bytes for the items that are -51, none for the others. BYTES elements have
 * sizes of their own, so only those items' rows are huge (an FP32 row is as wide as the
 * widest) and their neighbours in the call stay answerable. */
static void huge_blob(tp_tensor_t *out, const float *x, size_t n) {
    tp_tensor_new(out, "blob", TENSORPLUG_PLUGIN_TYPES_DATATYPE_BYTES, (uint64_t[]){n, 1}, 2);
    size_t size = 0;
    for (size_t i = 0; i < n; i++) size += 4 + (x[i] == -51.0f ? HUGE : 0);
    uint8_t *data = malloc(size);
    if (data == NULL) abort();
    uint8_t *at = data;
    for (size_t i = 0; i < n; i++) {
        uint32_t len = x[i] == -51.0f ? HUGE : 0;
        memcpy(at, &len, 4); /* WebAssembly is little-endian */
        memset(at + 4, 0xff, len);
        at += 4 + len;
    }
    out->data.ptr = data;
    out->data.len = size;
}

/* Code -70: what each attempt to leave the sandbox met, into `report`. */
static void walls(char *report, size_t size) {
    static const char *const paths[] = {"/etc/passwd", "/model/../../etc/passwd", "/proc/self/environ"};
    size_t used = 0;
    for (size_t p = 0; p < sizeof paths / sizeof *paths; p++) {
        FILE *f = fopen(paths[p], "rb");
        used += (size_t)snprintf(report + used, size - used, "%s%s; ", f ? "BREACH opened " : "no ", paths[p]);
        if (f) fclose(f);
    }
    size_t variables = 0;
    for (char **v = environ; v != NULL && *v != NULL; v++) variables++;
    snprintf(report + used, size - used, "environment: %zu variables%s", variables, variables ? " BREACH" : "");
}

bool exports_predictor_predict(predictor_list_tensor_t *batch, predictor_prediction_t *ret,
                               predictor_item_error_t *err) {
    static const int64_t shape[] = {-1, 1};
    size_t n;
    const float *x;
    const tp_tensor_t *input = tp_find(batch->ptr, batch->len, "x", err);
    if (input == NULL || !tp_expect(input, TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32, shape, 2, err) ||
        (x = tp_values(input, &n, err)) == NULL) {
        tp_tensors_free(batch->ptr, batch->len);
        return false;
    }
    bool huge = false;
    for (size_t i = 0; i < n; i++) huge = huge || x[i] == -51.0f;
    ret->outputs.len = huge ? 2 : 1;
    ret->outputs.ptr = tp_tensors_new(ret->outputs.len);
    ret->failures = (tp_failures_t){NULL, 0};
    float *y = tp_tensor_new(&ret->outputs.ptr[0], "y", TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32, (uint64_t[]){n, 1}, 2);
    if (huge) huge_blob(&ret->outputs.ptr[1], x, n);
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        tp_item_error_t item = {0};
        if (v == -1.0f) abort();
        if (v == -3.0f) exhaust_memory();
        if (v == -5.0f) {
            tp_fail_item(&ret->failures, (uint32_t)i, 422, "faulty-c: item rejected");
            continue;
        }
        if (v == -2.0f)
            for (volatile int spin = 0;; spin++) {
            }
        if (v == -4.0f) y[i] = (float)recurse(0);
        if (v == -9.0f) sleep(3);
        if (v == -11.0f)
            for (int line = 0; line < 256; line++) {
                printf("%4095s\n", "o");
                fprintf(stderr, "%4095s\n", "e");
            }
        if (v == -70.0f) {
            char report[512];
            walls(report, sizeof report);
            tp_fail_item(&ret->failures, (uint32_t)i, 422, "faulty-c walls: %s", report);
            continue;
        }
        bool failed = false;
        if (v <= -40.0f && v >= -49.0f && v == (float)(int)v)
            failed = !digits_probability((int)(-40.0f - v), &y[i], &item);
        else if (v == -60.0f)
            failed = (digits_refusal(TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32, PIXELS - 1, &item), true);
        else if (v == -61.0f)
            failed = (digits_refusal(TENSORPLUG_PLUGIN_TYPES_DATATYPE_BOOL, PIXELS, &item), true);
        else
            y[i] = 2 * v;
        if (failed) {
            /* The prediction's failure gets a copy of the message. */
            tp_fail_item(&ret->failures, (uint32_t)i, item.status, "%.*s", (int)item.message.len,
                         (const char *)item.message.ptr);
            free(item.message.ptr);
        }
    }
    tp_tensors_free(batch->ptr, batch->len);
    return true;
}
