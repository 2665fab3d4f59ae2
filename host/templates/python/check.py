"""The {{stage}} stage of {{name}}: passes each item's `{{tensor}}: FP32 [1]` on{{flow}}; an
item whose {{tensor}} {{refusal}} fails alone with 422."""

import tensorplug as tp


class WitWorld(tp.{{Stage}}or):
    def setup(self, parameters):
        tp.debug("{{name}}: {{stage}} ready")

    def process_item(self, item):
        value = item.get("{{tensor}}", tp.FP32, [1])
        if value.values[0] {{refused_if}}:
            raise tp.ItemError(422, f"{{tensor}}: {value.values[0]:g} {{refusal}} (checked by {{stage}})")
        return [value]
