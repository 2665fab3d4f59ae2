/* The preprocess stage of {{name}}: passes each item's `x: FP32 [1]` on to predict; an
 * item whose x is negative fails alone with 422.
 * Ownership (see tensorplug.h): free the arguments, malloc the results; an item passed on
 * moves (its buffers came from malloc) into the result. */
#include "preprocessor.h"
#include "tensorplug.h"

bool exports_preprocessor_init(preprocessor_list_parameter_t *parameters, preprocessor_string_t *err) {
    (void)err;
    preprocessor_list_parameter_free(parameters);
    return true;
}

/* Whether `item` may pass; else fills `err`. */
static bool check(const preprocessor_item_t *item, tp_item_error_t *err) {
    static const int64_t shape[] = {1};
    size_t count;
    const float *x_values;
    const tp_tensor_t *x = tp_find(item->ptr, item->len, "x", err);
    if (x == NULL || !tp_expect(x, TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32, shape, 1, err) ||
        (x_values = tp_values(x, &count, err)) == NULL)
        return false;
    if (x_values[0] < 0.0f)
        return tp_fail(err, 422, "x: %g is negative (checked by preprocess)", (double)x_values[0]);
    return true;
}

void exports_preprocessor_preprocess(preprocessor_list_item_t *items,
                                     preprocessor_list_result_item_item_error_t *ret) {
    ret->len = items->len;
    ret->ptr = items->len == 0 ? NULL : calloc(items->len, sizeof *ret->ptr);
    for (size_t i = 0; i < items->len; i++) {
        preprocessor_result_item_item_error_t *result = &ret->ptr[i];
        result->is_err = !check(&items->ptr[i], &result->val.err);
        if (result->is_err)
            preprocessor_item_free(&items->ptr[i]);
        else
            result->val.ok = items->ptr[i];
    }
    free(items->ptr);
}
