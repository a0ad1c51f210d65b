"""Offline validators for rendered Kubernetes manifests, strict about unknown fields.

- DynamoGraphDeployment: the v1beta1 openAPIV3Schema of Dynamo's CRD, kept as data in
  deploy/schemas/ (see its README for source and version), with its podTemplate resolved to
  Kubernetes' own PodTemplateSpec schema.
- Built-in kinds: Kubernetes' own JSON schemas, as the kubernetes-validate package ships them.

Kubernetes prunes fields a CRD does not declare, silently; here they are errors, so a misspelt
field fails a test instead of vanishing on the cluster.
"""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

import jsonschema
import kubernetes_validate
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from tests.support.commands import REPO

SCHEMAS = REPO / "deploy" / "schemas"
KUBERNETES_VERSION = "1.37.0"  # the newest schemas kubernetes-validate ships
_KUBERNETES = files("kubernetes_validate") / "kubernetes-json-schema" / f"v{KUBERNETES_VERSION}-local-strict"


def strict(schema: Any) -> Any:
    """`schema` with unknown fields refused wherever it lists fields and does not keep unknown ones."""
    if isinstance(schema, dict):
        if "properties" in schema and "additionalProperties" not in schema:
            if not schema.get("x-kubernetes-preserve-unknown-fields"):
                schema["additionalProperties"] = False
        for value in schema.values():
            strict(value)
    elif isinstance(schema, list):
        for value in schema:
            strict(value)
    return schema


def _graph_deployment_validator() -> jsonschema.Draft202012Validator:
    schema = strict(json.loads((SCHEMAS / "dynamographdeployment-v1beta1.json").read_text()))
    pod_template, definitions = (
        Resource.from_contents(json.loads((_KUBERNETES / name).read_text()))
        for name in ("podtemplatespec-v1.json", "_definitions.json")
    )
    # An alias, so the PodTemplateSpec's own relative references resolve against its $id.
    alias = DRAFT202012.create_resource({"$ref": pod_template.id()})
    registry = Registry().with_resources(
        [("k8s:podtemplatespec-v1", alias), (pod_template.id(), pod_template), (definitions.id(), definitions)]
    )
    return jsonschema.Draft202012Validator(schema, registry=registry)


GRAPH_DEPLOYMENT = _graph_deployment_validator()


def manifest_errors(manifest: dict[str, Any]) -> list[str]:
    """What is wrong with one manifest, as 'field.path: message' lines; [] when it validates."""
    if manifest.get("kind") == "DynamoGraphDeployment":
        return [
            f"{'.'.join(map(str, error.absolute_path)) or '<root>'}: {error.message}"
            for error in GRAPH_DEPLOYMENT.iter_errors(manifest)
        ]
    try:
        kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [f"{'.'.join(map(str, error.path)) or '<root>'}: {error.message}"]
    return []
