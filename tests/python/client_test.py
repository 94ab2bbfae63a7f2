"""The official Python client (PyPI `kubernetes`) against `watchcache serve`.

Run by tests/tests/python_client.rs as `python3 client_test.py http://127.0.0.1:PORT`: it
creates, replaces, patches with each content type, and deletes a ConfigMap and a Pod, then
watches from before the first write and checks that the watch saw every change in order.
Exits non-zero, with the failed assertion, on any difference.
"""

import sys

from kubernetes import client, watch
from kubernetes.client.rest import ApiException


def main(url):
    config = client.Configuration(host=url)
    api = client.CoreV1Api(client.ApiClient(config))
    ns = "default"

    start = api.list_namespaced_config_map(ns).metadata.resource_version

    cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="py"), data={"a": "1"})
    created = api.create_namespaced_config_map(ns, cm)
    assert created.metadata.uid, created
    revisions = [created.metadata.resource_version]

    created.data["b"] = "2"
    replaced = api.replace_namespaced_config_map("py", ns, created)
    assert replaced.data == {"a": "1", "b": "2"}, replaced.data
    revisions.append(replaced.metadata.resource_version)

    # A dict is sent as a strategic merge patch, a list as a JSON patch; the others by name.
    patched = api.patch_namespaced_config_map("py", ns, {"data": {"c": "3"}})
    assert patched.data == {"a": "1", "b": "2", "c": "3"}, patched.data
    revisions.append(patched.metadata.resource_version)
    patched = api.patch_namespaced_config_map(
        "py", ns, [{"op": "remove", "path": "/data/a"}]
    )
    assert "a" not in patched.data, patched.data
    revisions.append(patched.metadata.resource_version)
    patched = api.patch_namespaced_config_map(
        "py", ns, {"data": {"b": None}}, _content_type="application/merge-patch+json"
    )
    assert patched.data == {"c": "3"}, patched.data
    revisions.append(patched.metadata.resource_version)
    applied = api.patch_namespaced_config_map(
        "py",
        ns,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "py"}, "data": {"d": "4"}},
        field_manager="python-test",
        _content_type="application/apply-patch+yaml",
    )
    assert applied.data == {"c": "3", "d": "4"}, applied.data
    managers = [m.manager for m in applied.metadata.managed_fields]
    assert "python-test" in managers, managers
    revisions.append(applied.metadata.resource_version)

    # A patch that cannot apply is an ApiException with the apiserver's code.
    try:
        api.patch_namespaced_config_map("py", ns, [{"op": "test", "path": "/data/c", "value": "9"}])
        raise AssertionError("a failed JSON-patch test was applied")
    except ApiException as e:
        assert e.status == 422, e

    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="py-pod"),
        spec=client.V1PodSpec(
            containers=[
                client.V1Container(name="app", image="app:1"),
                client.V1Container(name="side", image="side:1"),
            ]
        ),
    )
    api.create_namespaced_pod(ns, pod)
    merged = api.patch_namespaced_pod(
        "py-pod", ns, {"spec": {"containers": [{"name": "side", "image": "side:2"}]}}
    )
    assert [c.image for c in merged.spec.containers] == ["app:1", "side:2"], merged.spec.containers
    api.delete_namespaced_pod("py-pod", ns)

    api.delete_namespaced_config_map("py", ns)
    try:
        api.read_namespaced_config_map("py", ns)
        raise AssertionError("read after delete")
    except ApiException as e:
        assert e.status == 404, e

    # The watch from before the first write sees each change, in order.
    seen = []
    w = watch.Watch()
    for event in w.stream(
        api.list_namespaced_config_map, ns, resource_version=start, timeout_seconds=5
    ):
        obj = event["object"]
        if obj.metadata.name != "py":
            continue
        seen.append((event["type"], obj.metadata.resource_version))
        if event["type"] == "DELETED":
            w.stop()
    kinds = [k for k, _ in seen]
    assert kinds == ["ADDED"] + ["MODIFIED"] * 5 + ["DELETED"], seen
    assert [rv for _, rv in seen[:-1]] == revisions, (seen, revisions)
    print("python client: ok,", len(seen), "events")


if __name__ == "__main__":
    main(sys.argv[1])
