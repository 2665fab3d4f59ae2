"""Validates KServe resources (YAML files) offline against the kserve SDK's models.

The kubernetes-validate schemas do not know KServe's CRDs; the SDK's generated models
carry the same field names and types as the CRDs' OpenAPI schemas. Each document is
walked against its model: an unknown field, a wrong type or a missing required field is
an error (the SDK's own deserializer would drop unknown fields silently). Required
fields: the embedded Kubernetes types (containers, probes, ...) check their own when
built (the kubernetes client's pydantic models); KServe's, which its SDK does not check,
are listed in REQUIRED. Prints one line per resource; exits 1 if any is invalid.

Usage: python validate_kserve.py FILE.yaml...
"""

import re
import sys
from importlib.metadata import version

import kubernetes.client
import kserve
import yaml

KINDS = {
    ("serving.kserve.io/v1alpha1", "ClusterServingRuntime"): "V1alpha1ClusterServingRuntime",
    ("serving.kserve.io/v1alpha1", "ServingRuntime"): "V1alpha1ServingRuntime",
    ("serving.kserve.io/v1beta1", "InferenceService"): "V1beta1InferenceService",
}
KSERVE = version("kserve")
# Fields KServe's Go types require (`+required`, or a json tag without omitempty) that the
# SDK's models do not check themselves.
REQUIRED = {
    "V1beta1InferenceServiceSpec": ["predictor"],
    "V1beta1ModelSpec": ["modelFormat"],
    "V1beta1ModelFormat": ["name"],
    "V1alpha1ServingRuntimeSpec": ["containers"],
    "V1alpha1SupportedModelFormat": ["name"],
}
PRIMITIVES = {
    "str": str,
    "int": int,
    "bool": bool,
    "float": (int, float),
    "object": object,
    "datetime": str,
    # A Kubernetes quantity: "512Mi", "1", 2.
    "ResourceQuantity": (str, int, float),
}


def model_class(name):
    for module in (kserve.models, kubernetes.client.models):
        cls = getattr(module, name, None)
        if cls is not None:
            return cls
    raise LookupError(f"no model {name} in kserve or kubernetes")


def walk(value, type_name, where, errors):
    """Appends to `errors` every way `value` does not fit `type_name`."""
    if (inner := re.fullmatch(r"[lL]ist\[(.+)\]", type_name)) is not None:
        if not isinstance(value, list):
            errors.append(f"{where}: a list expected")
            return
        for i, item in enumerate(value):
            walk(item, inner[1], f"{where}[{i}]", errors)
    elif (inner := re.fullmatch(r"dict\(str, (.+)\)|Dict\[str, (.+)\]", type_name)) is not None:
        if not isinstance(value, dict):
            errors.append(f"{where}: a mapping expected")
            return
        for key, item in value.items():
            walk(item, inner[1] or inner[2], f"{where}.{key}", errors)
    elif type_name in PRIMITIVES:
        wanted = PRIMITIVES[type_name]
        if not isinstance(value, wanted) or (type_name == "int" and isinstance(value, bool)):
            errors.append(f"{where}: {type_name} expected, got {type(value).__name__}")
    else:
        cls = model_class(type_name)
        if not isinstance(value, dict):
            errors.append(f"{where}: a {type_name} mapping expected")
            return
        fields = {json: attr for attr, json in cls.attribute_map.items()}
        for key in REQUIRED.get(type_name, []):
            if key not in value:
                errors.append(f"{where}.{key}: required")
        for key, item in value.items():
            if key not in fields:
                errors.append(f"{where}.{key}: no such field in {type_name}")
            else:
                walk(item, cls.openapi_types[fields[key]], f"{where}.{key}", errors)


def construct(value, type_name):
    """The model object of `value` (already walked), built the way each model is built."""
    if (inner := re.fullmatch(r"[lL]ist\[(.+)\]", type_name)) is not None:
        return [construct(item, inner[1]) for item in value]
    if (inner := re.fullmatch(r"dict\(str, (.+)\)|Dict\[str, (.+)\]", type_name)) is not None:
        return {key: construct(item, inner[1] or inner[2]) for key, item in value.items()}
    if type_name in PRIMITIVES:
        return value
    cls = model_class(type_name)
    # The kubernetes client's newer models parse themselves; kserve's take keywords.
    if hasattr(cls, "from_dict"):
        return cls.from_dict(value)
    fields = {json: attr for attr, json in cls.attribute_map.items()}
    return cls(**{fields[k]: construct(v, cls.openapi_types[fields[k]]) for k, v in value.items()})


def validate(document):
    """The model name and errors of one resource."""
    key = (document.get("apiVersion"), document.get("kind"))
    if key not in KINDS:
        return f"{key[1]} ({key[0]})", [f"not a KServe kind this validator knows: {sorted(KINDS)}"]
    model = KINDS[key]
    errors = []
    walk(document, model, key[1], errors)
    if not errors:
        # Construction runs the models' required-field checks.
        try:
            construct(document, model)
        except (ValueError, TypeError) as error:
            errors.append(f"{key[1]}: {error}")
    return model, errors


def main(paths):
    failed = False
    for path in paths:
        with open(path, encoding="utf-8") as f:
            documents = [d for d in yaml.safe_load_all(f) if d is not None]
        for document in documents:
            model, errors = validate(document)
            name = document.get("metadata", {}).get("name", "?")
            if errors:
                failed = True
                print(f"FAIL {path}: {document.get('kind')}/{name} against kserve {KSERVE} {model}")
                for error in errors:
                    print(f"  {error}")
            else:
                print(f"ok   {path}: {document.get('kind')}/{name} against kserve {KSERVE} {model}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
