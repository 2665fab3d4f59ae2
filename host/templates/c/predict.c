/* The predict stage of {{name}}: y = 2 * x for a batch of `x: FP32 [N, 1]`; an item
 * whose x is negative fails alone with 422, its neighbours get their y.
 * Ownership (see tensorplug.h): free the arguments, malloc the results. */
#include "predictor.h"
#include "tensorplug.h"

bool exports_predictor_init(predictor_list_parameter_t *parameters, predictor_string_t *err) {
    (void)err;
    predictor_list_parameter_free(parameters);
    return true;
}

bool exports_predictor_predict(predictor_list_tensor_t *batch, predictor_prediction_t *ret,
                               predictor_item_error_t *err) {
    static const int64_t shape[] = {-1, 1};
    size_t count;
    const float *x_values;
    const tp_tensor_t *x = tp_find(batch->ptr, batch->len, "x", err);
    if (x == NULL || !tp_expect(x, TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32, shape, 2, err) ||
        (x_values = tp_values(x, &count, err)) == NULL) {
        tp_tensors_free(batch->ptr, batch->len);
        return false;
    }
    uint64_t n = x->shape.ptr[0];
    tp_tensor_t *outputs = tp_tensors_new(1);
    float *y = tp_tensor_new(&outputs[0], "y", TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32, (uint64_t[]){n, 1}, 2);
    ret->outputs.ptr = outputs;
    ret->outputs.len = 1;
    ret->failures.ptr = NULL;
    ret->failures.len = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (x_values[i] < 0.0f)
            tp_fail_item(&ret->failures, (uint32_t)i, 422, "x: %g is negative", (double)x_values[i]);
        y[i] = 2.0f * x_values[i];
    }
    tp_tensors_free(batch->ptr, batch->len);
    return true;
}
