/* The digits model's predict stage in C: the same weights files and forward pass as the
 * Rust `digits-predict` (examples/digits/model), so the same answers. Loads
 * W0/b0/W1/b1.f32 from the model folder at init and classifies a batch
 * `input-0: FP32 [N, 64]` into `probabilities: FP32 [N, 10]` and `label: INT64 [N]`.
 *
 * An image whose pixels are all 0 has nothing to classify: that item fails alone with a
 * 422, its neighbours get their rows.
 *
 * Plugin metrics (on the host's /metrics, labelled with the model and version): the
 * counter `blank_images` (`tensorplug_plugin_blank_images_total`) and the histogram
 * `batch_size` of the predict calls.
 *
 * Built by scripts/build-c-plugins.sh as a wasm32-wasip1 reactor module, which the host
 * makes a component at load.
 */
#include <math.h>

#include "predictor.h"
#include "tensorplug.h"

enum { INPUTS = 64, HIDDEN = 64, CLASSES = 10 };

/* Row-major, as in the model folder; loaded once per instance by init. */
static float w0[INPUTS][HIDDEN], b0[HIDDEN], w1[HIDDEN][CLASSES], b1[CLASSES];

bool exports_predictor_init(predictor_list_parameter_t *parameters, predictor_string_t *err) {
    predictor_list_parameter_free(parameters);
    if (!tp_read_model_file("W0.f32", w0, sizeof w0, err) || !tp_read_model_file("b0.f32", b0, sizeof b0, err) ||
        !tp_read_model_file("W1.f32", w1, sizeof w1, err) || !tp_read_model_file("b1.f32", b1, sizeof b1, err))
        return false;
    tp_log(TP_DEBUG, "digits-c: weights loaded from %s", TP_MODEL_DIR);
    return tp_declare("labels", "0,1,2,3,4,5,6,7,8,9", err) &&
           tp_declare("description", "The digits MLP, predicted by a plugin written in C", err);
}

/* One image: writes softmax probabilities into `p` and returns the most probable class
 * (the first on ties, like numpy's argmax). Sums run over the inputs in order, as in the
 * Rust forward pass. */
static int64_t classify(const float *x, float *p) {
    float h[HIDDEN];
    for (int j = 0; j < HIDDEN; j++) h[j] = b0[j];
    for (int k = 0; k < INPUTS; k++)
        for (int j = 0; j < HIDDEN; j++) h[j] += x[k] * w0[k][j];
    float z[CLASSES];
    for (int j = 0; j < CLASSES; j++) z[j] = b1[j];
    for (int k = 0; k < HIDDEN; k++) {
        float hk = h[k] > 0.0f ? h[k] : 0.0f; /* ReLU; a NaN unit gives 0 */
        for (int j = 0; j < CLASSES; j++) z[j] += hk * w1[k][j];
    }
    int best = 0;
    for (int j = 1; j < CLASSES; j++)
        if (z[j] > z[best]) best = j;
    float sum = 0.0f;
    for (int j = 0; j < CLASSES; j++) sum += p[j] = expf(z[j] - z[best]);
    for (int j = 0; j < CLASSES; j++) p[j] /= sum;
    return best;
}

static bool blank(const float *x) {
    for (int k = 0; k < INPUTS; k++)
        if (x[k] != 0.0f) return false;
    return true;
}

/* The host refuses only a misused metric (a bad name, a kind clash): a bug to log, not a
 * reason to fail the predictions. */
static void record_metrics(uint64_t batch_size, size_t blank_images) {
    tp_item_error_t refused;
    if ((blank_images > 0 && !tp_counter_add("blank_images", NULL, 0, (double)blank_images, &refused)) ||
        !tp_histogram_observe("batch_size", NULL, 0, (double)batch_size, &refused)) {
        tp_log(TP_WARN, "digits-c: metric refused: %.*s", (int)refused.message.len, (char *)refused.message.ptr);
        free(refused.message.ptr);
    }
}

bool exports_predictor_predict(predictor_list_tensor_t *batch, predictor_prediction_t *ret,
                               predictor_item_error_t *err) {
    static const int64_t shape[] = {-1, INPUTS};
    size_t count;
    const float *pixels;
    const tp_tensor_t *x = tp_find(batch->ptr, batch->len, "input-0", err);
    if (x == NULL || !tp_expect(x, TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32, shape, 2, err) ||
        (pixels = tp_values(x, &count, err)) == NULL) {
        tp_tensors_free(batch->ptr, batch->len);
        return false;
    }
    uint64_t n = x->shape.ptr[0];

    tp_tensor_t *outputs = tp_tensors_new(2);
    float *proba = tp_tensor_new(&outputs[0], "probabilities", TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32,
                                 (uint64_t[]){n, CLASSES}, 2);
    int64_t *labels = tp_tensor_new(&outputs[1], "label", TENSORPLUG_PLUGIN_TYPES_DATATYPE_INT64, &n, 1);
    ret->outputs.ptr = outputs;
    ret->outputs.len = 2;
    ret->failures.ptr = NULL;
    ret->failures.len = 0;
    for (uint64_t i = 0; i < n; i++) {
        const float *image = pixels + i * INPUTS;
        if (blank(image))
            tp_fail_item(&ret->failures, (uint32_t)i, 422, "input-0: every pixel is 0, there is no digit to classify");
        else
            labels[i] = classify(image, proba + i * CLASSES);
    }
    tp_tensors_free(batch->ptr, batch->len);
    record_metrics(n, ret->failures.len);
    return true;
}
