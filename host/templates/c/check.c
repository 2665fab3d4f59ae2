/* The {{stage}} stage of {{name}}: passes each item's `{{tensor}}: FP32 [1]` on{{flow}}; an
 * item whose {{tensor}} {{refusal}} fails alone with 422.
 * Ownership (see tensorplug.h): free the arguments, malloc the results; an item passed on
 * moves (its buffers came from malloc) into the result. */
#include "{{world}}.h"
#include "tensorplug.h"

bool exports_{{world}}_init({{world}}_list_parameter_t *parameters, {{world}}_string_t *err) {
    (void)err;
    {{world}}_list_parameter_free(parameters);
    return true;
}

/* Whether `item` may pass; else fills `err`. */
static bool check(const {{world}}_item_t *item, tp_item_error_t *err) {
    static const int64_t shape[] = {1};
    size_t count;
    const float *values;
    const tp_tensor_t *t = tp_find(item->ptr, item->len, "{{tensor}}", err);
    if (t == NULL || !tp_expect(t, TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32, shape, 1, err) ||
        (values = tp_values(t, &count, err)) == NULL)
        return false;
    if (values[0] {{refused_if}}f)
        return tp_fail(err, 422, "{{tensor}}: %g {{refusal}} (checked by {{stage}})", (double)values[0]);
    return true;
}

void exports_{{world}}_{{stage}}({{world}}_list_item_t *items, {{world}}_list_result_item_item_error_t *ret) {
    ret->len = items->len;
    ret->ptr = items->len == 0 ? NULL : calloc(items->len, sizeof *ret->ptr);
    for (size_t i = 0; i < items->len; i++) {
        {{world}}_result_item_item_error_t *result = &ret->ptr[i];
        result->is_err = !check(&items->ptr[i], &result->val.err);
        if (result->is_err)
            tp_tensors_free(items->ptr[i].ptr, items->ptr[i].len);
        else
            result->val.ok = items->ptr[i];
    }
    if (items->len > 0) free(items->ptr); /* the items themselves moved into the results */
}
