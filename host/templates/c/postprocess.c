/* The postprocess stage of {{name}}: passes each item's `y: FP32 [1]` from predict on; an
 * item whose y is over 100 fails alone with 422.
 * Ownership (see tensorplug.h): free the arguments, malloc the results; an item passed on
 * moves (its buffers came from malloc) into the result. */
#include "postprocessor.h"
#include "tensorplug.h"

bool exports_postprocessor_init(postprocessor_list_parameter_t *parameters, postprocessor_string_t *err) {
    (void)err;
    postprocessor_list_parameter_free(parameters);
    return true;
}

/* Whether `item` may pass; else fills `err`. */
static bool check(const postprocessor_item_t *item, tp_item_error_t *err) {
    static const int64_t shape[] = {1};
    size_t count;
    const float *y_values;
    const tp_tensor_t *y = tp_find(item->ptr, item->len, "y", err);
    if (y == NULL || !tp_expect(y, TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32, shape, 1, err) ||
        (y_values = tp_values(y, &count, err)) == NULL)
        return false;
    if (y_values[0] > 100.0f)
        return tp_fail(err, 422, "y: %g is over 100 (checked by postprocess)", (double)y_values[0]);
    return true;
}

void exports_postprocessor_postprocess(postprocessor_list_item_t *items,
                                      postprocessor_list_result_item_item_error_t *ret) {
    ret->len = items->len;
    ret->ptr = items->len == 0 ? NULL : calloc(items->len, sizeof *ret->ptr);
    for (size_t i = 0; i < items->len; i++) {
        postprocessor_result_item_item_error_t *result = &ret->ptr[i];
        result->is_err = !check(&items->ptr[i], &result->val.err);
        if (result->is_err)
            postprocessor_item_free(&items->ptr[i]);
        else
            result->val.ok = items->ptr[i];
    }
    free(items->ptr);
}
