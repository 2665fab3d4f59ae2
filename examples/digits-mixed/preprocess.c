/* The digits-mixed model's preprocess stage, in C: accepts one 8x8 image per item as
 * `input-0: FP32 [64]` or `[8, 8]`, refuses pixels that are not finite or outside
 * 0..pixel_max (parameter, default 16) with a 400 naming the pixel, and hands predict
 * `input-0: FP32 [64]`, as the Rust digits preprocess does.
 *
 * Built by scripts/build-c-plugins.sh as a wasm32-wasip1 reactor module, which the host
 * makes a component at load.
 */
#include <math.h>

#include "preprocessor.h"
#include "tensorplug.h"

static float pixel_max = 16.0f;

bool exports_preprocessor_init(preprocessor_list_parameter_t *parameters, preprocessor_string_t *err) {
    char *text = tp_parameter(parameters->ptr, parameters->len, "pixel_max");
    preprocessor_list_parameter_free(parameters);
    if (text == NULL) return true;
    char *end;
    float value = strtof(text, &end);
    bool valid = end != text && *end == '\0' && isfinite(value) && value > 0.0f;
    if (valid) pixel_max = value;
    else tp_string_printf(err, "parameter 'pixel_max': %s is not a positive number", text);
    free(text);
    return valid;
}

/* One item: its image flattened to [64], or a 400 naming the first bad pixel. */
static bool flatten(const preprocessor_item_t *item, preprocessor_item_t *out, tp_item_error_t *err) {
    static const int64_t flat[] = {64}, square[] = {8, 8};
    const tp_tensor_t *image = tp_find(item->ptr, item->len, "input-0", err);
    if (image == NULL) return false;
    bool is_square = image->shape.len == 2;
    size_t count;
    const float *pixels;
    if (!tp_expect(image, TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32, is_square ? square : flat, is_square ? 2 : 1, err) ||
        (pixels = tp_values(image, &count, err)) == NULL)
        return false;
    for (size_t i = 0; i < count; i++) {
        float v = pixels[i];
        if (v >= 0.0f && v <= pixel_max) continue; /* NaN fails both */
        char at[32];
        if (is_square) snprintf(at, sizeof at, "input-0[%zu, %zu]", i / 8, i % 8);
        else snprintf(at, sizeof at, "input-0[%zu]", i);
        if (isfinite(v)) return tp_fail(err, 400, "%s: pixel value %g is outside 0..%g", at, v, pixel_max);
        return tp_fail(err, 400, "%s: pixel value %g is not finite", at, v);
    }
    out->ptr = tp_tensors_new(1);
    out->len = 1;
    uint64_t shape[] = {64};
    float *copy = tp_tensor_new(&out->ptr[0], "input-0", TENSORPLUG_PLUGIN_TYPES_DATATYPE_FP32, shape, 1);
    memcpy(copy, pixels, 64 * sizeof(float));
    return true;
}

void exports_preprocessor_preprocess(preprocessor_list_item_t *items, preprocessor_list_result_item_item_error_t *ret) {
    ret->len = items->len;
    ret->ptr = calloc(items->len ? items->len : 1, sizeof *ret->ptr);
    if (ret->ptr == NULL) abort();
    for (size_t i = 0; i < items->len; i++) {
        preprocessor_result_item_item_error_t *result = &ret->ptr[i];
        result->is_err = !flatten(&items->ptr[i], &result->val.ok, &result->val.err);
    }
    tp_items_free(items->ptr, items->len);
}
