"""The official Python client (PyPI `kubernetes`) over TLS with a bearer token.

Run by tests/tests/python_client.rs as
`python3 tls_token_test.py https://127.0.0.1:PORT CA_FILE TOKEN NAMESPACE`: it lists
namespaces, creates and reads a ConfigMap, and watches from before a second one is created.
Prints what it saw, line by line, for the Rust test to check; exits non-zero on any difference.
"""

import sys

from kubernetes import client, watch


def main(url, ca, token, ns):
    config = client.Configuration(host=url)
    config.ssl_ca_cert = ca
    config.verify_ssl = True
    config.api_key = {"authorization": "Bearer " + token}
    api = client.CoreV1Api(client.ApiClient(config))

    names = sorted(n.metadata.name for n in api.list_namespace().items)
    print("namespaces: " + ",".join(names))

    start = api.list_namespaced_config_map(ns).metadata.resource_version
    cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="py-tls"), data={"via": "tls"})
    created = api.create_namespaced_config_map(ns, cm)
    print("created: %s uid=%s" % (created.metadata.name, bool(created.metadata.uid)))
    read = api.read_namespaced_config_map("py-tls", ns)
    print("read: %s via=%s" % (read.metadata.name, read.data["via"]))

    second = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="py-tls-2"), data={"n": "2"})
    api.create_namespaced_config_map(ns, second)
    seen = []
    w = watch.Watch()
    for event in w.stream(
        api.list_namespaced_config_map, ns, resource_version=start, timeout_seconds=5
    ):
        seen.append("%s %s" % (event["type"], event["object"].metadata.name))
        if len(seen) == 2:
            w.stop()
    print("watched: " + ",".join(seen))
    print("python tls: ok")


if __name__ == "__main__":
    main(*sys.argv[1:5])
