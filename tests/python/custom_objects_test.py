"""The official Python client's `create_from_yaml` and `CustomObjectsApi` against `watchcache serve`.

Run by tests/tests/python_client.rs as `python3 custom_objects_test.py http://127.0.0.1:PORT`:
it creates a multi-kind manifest (a CustomResourceDefinition among built-in kinds) with
`utils.create_from_yaml`, waits for the CRD to be established, then creates, lists, patches
(merge and JSON patch, and the status) and deletes custom objects through `CustomObjectsApi`
while a watch follows them. Exits non-zero, with the failed assertion, on any difference.
"""

import sys
import tempfile
import threading
import time

from kubernetes import client, utils, watch
from kubernetes.client.rest import ApiException

MANIFEST = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: tenants.py.example.com
spec:
  group: py.example.com
  scope: Namespaced
  names: {plural: tenants, singular: tenant, kind: Tenant}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1}
              tier: {type: string, default: standard}
          status:
            type: object
            properties:
              ready: {type: boolean}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: py-config}
data: {a: "1"}
---
apiVersion: v1
kind: Service
metadata: {name: py-service}
spec:
  selector: {app: py}
  ports: [{port: 80}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: py-deployment}
spec:
  replicas: 2
  selector: {matchLabels: {app: py}}
  template:
    metadata: {labels: {app: py}}
    spec: {containers: [{name: app, image: "nginx:1.27"}]}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: py-statefulset}
spec:
  serviceName: py-service
  selector: {matchLabels: {app: py-db}}
  template:
    metadata: {labels: {app: py-db}}
    spec: {containers: [{name: db, image: "postgres:16"}]}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: py-cronjob}
spec:
  schedule: "*/5 * * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers: [{name: job, image: busybox}]
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: py-account}
"""

GROUP, VERSION, PLURAL = "py.example.com", "v1", "tenants"


def main(url):
    config = client.Configuration(host=url)
    api_client = client.ApiClient(config)
    ns = "default"

    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(MANIFEST)
        f.flush()
        created = utils.create_from_yaml(api_client, f.name, namespace=ns)
    kinds = sorted(o[0].kind for o in created)
    assert kinds == [
        "ConfigMap", "CronJob", "CustomResourceDefinition", "Deployment",
        "Service", "ServiceAccount", "StatefulSet",
    ], kinds
    apps = client.AppsV1Api(api_client)
    assert apps.read_namespaced_deployment("py-deployment", ns).spec.replicas == 2
    core = client.CoreV1Api(api_client)
    assert core.read_namespaced_service("py-service", ns).spec.cluster_ip

    extensions = client.ApiextensionsV1Api(api_client)
    for _ in range(100):
        crd = extensions.read_custom_resource_definition("tenants.py.example.com")
        conditions = {c.type: c.status for c in (crd.status.conditions or [])}
        if conditions.get("Established") == "True":
            break
        time.sleep(0.02)
    else:
        raise AssertionError("the CRD was never established: %s" % crd.status)

    custom = client.CustomObjectsApi(api_client)
    start = custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["metadata"]["resourceVersion"]
    seen = []

    def follow():
        w = watch.Watch()
        for event in w.stream(custom.list_namespaced_custom_object, GROUP, VERSION, ns, PLURAL,
                              resource_version=start, timeout_seconds=20):
            obj = event["object"]
            seen.append((event["type"], obj["metadata"]["name"], obj.get("spec", {}).get("size")))
            if event["type"] == "DELETED":
                w.stop()

    watcher = threading.Thread(target=follow)
    watcher.start()

    body = {"apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "Tenant",
            "metadata": {"name": "t1"}, "spec": {"size": 1, "unknown": True}}
    made = custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
    assert made["spec"] == {"size": 1, "tier": "standard"}, made["spec"]

    try:
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, dict(
            body, metadata={"name": "t2"}, spec={"size": 0}))
        raise AssertionError("a tenant of size 0 was taken")
    except ApiException as e:
        assert e.status == 422, e
        assert "spec.size in body should be greater than or equal to 1" in e.body, e.body

    listed = custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)
    assert [i["metadata"]["name"] for i in listed["items"]] == ["t1"], listed

    # A merge patch (this client's choice for custom objects), then a JSON patch by name.
    patched = custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "t1", {"spec": {"size": 2}})
    assert patched["spec"]["size"] == 2, patched
    patched = custom.patch_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, "t1", [{"op": "replace", "path": "/spec/size", "value": 3}],
        _content_type="application/json-patch+json")
    assert patched["spec"]["size"] == 3, patched
    status = custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, ns, PLURAL, "t1", {"status": {"ready": True}})
    assert status["status"] == {"ready": True}, status
    assert status["metadata"]["generation"] == 3, status["metadata"]

    custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "t1")
    watcher.join(30)
    assert not watcher.is_alive(), "the watch never saw the delete"
    expected = [("ADDED", "t1", 1), ("MODIFIED", "t1", 2), ("MODIFIED", "t1", 3),
                ("MODIFIED", "t1", 3), ("DELETED", "t1", 3)]
    assert seen == expected, seen
    print("python custom objects: ok, %d events" % len(seen))


if __name__ == "__main__":
    main(sys.argv[1])
