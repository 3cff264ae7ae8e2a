#!/usr/bin/env python3
"""A vkubelet provider written in Python: an example of the provider protocol.

It speaks vkubelet's provider protocol (providers/remote/api/v1alpha1/provider.proto)
with the gRPC stubs that grpc_tools generates from that file when it starts, so the
only dependencies are Debian's python3-grpcio and python3-grpc-tools. Pods "run" in
memory: Running as soon as they are created, their logs the container's args, one
line each, and exec answering `env` with the resolved environment and anything
else by echoing the command. A node agent serves them with

    python3 provider.py --proto .../provider.proto --listen unix:///run/py.sock &
    vkubelet --provider remote --provider-config remote.json   # {"endpoint": "unix:///run/py.sock"}

Objects travel as JSON (Capabilities says so); it does not notify, so the agent
polls ListPods.
"""
import argparse
import datetime
import json
import os
import signal
import sys
import tempfile
import threading
from concurrent import futures

import grpc


def load_stubs(proto):
    """Generates the protocol's Python modules into a temporary directory and imports them."""
    from grpc_tools import protoc

    out = tempfile.mkdtemp(prefix="vkubelet-proto-")
    include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    rc = protoc.main(["protoc", "-I" + os.path.dirname(os.path.abspath(proto)), "-I" + include,
                      "--python_out=" + out, "--grpc_python_out=" + out, os.path.basename(proto)])
    if rc != 0:
        sys.exit("generating the stubs from %s failed" % proto)
    sys.path.insert(0, out)
    import provider_pb2
    import provider_pb2_grpc
    return provider_pb2, provider_pb2_grpc


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--proto", required=True, help="path of provider.proto")
    ap.add_argument("--listen", required=True, help="unix:///path/to.sock or host:port (loopback)")
    args = ap.parse_args()
    pb, rpc = load_stubs(args.proto)

    class Provider(rpc.ProviderServicer):
        def __init__(self):
            self.lock = threading.Lock()
            self.pods = {}  # "ns/name" -> {"pod": dict, "env": {container: {name: value}}}

        def Capabilities(self, request, context):
            return pb.CapabilitiesResponse(encoding=pb.ENCODING_JSON, logs=True, exec=True,
                                           provider_name="python-example")

        def _running(self, pod):
            started = now()
            pod["status"] = {
                "phase": "Running",
                "startTime": started,
                "conditions": [{"type": t, "status": "True", "lastTransitionTime": started}
                               for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")],
                "containerStatuses": [{
                    "name": c["name"], "image": c.get("image", ""), "imageID": c.get("image", ""),
                    "containerID": "python://%s/%s" % (pod["metadata"].get("uid", ""), c["name"]),
                    "ready": True, "started": True, "restartCount": 0,
                    "state": {"running": {"startedAt": started}},
                } for c in pod["spec"].get("containers", [])],
            }
            return pod

        def CreatePod(self, request, context):
            pod = json.loads(request.pod)
            key = pod["metadata"]["namespace"] + "/" + pod["metadata"]["name"]
            env = {name: {v.name: v.value for v in lst.vars} for name, lst in request.env.items()}
            with self.lock:
                self.pods[key] = {"pod": self._running(pod), "env": env}
            return pb.Empty()

        def UpdatePod(self, request, context):
            pod = json.loads(request.pod)
            key = pod["metadata"]["namespace"] + "/" + pod["metadata"]["name"]
            with self.lock:
                rec = self.pods.get(key)
                if rec is None:
                    context.abort(grpc.StatusCode.NOT_FOUND, "pod %s not found" % key)
                rec["pod"]["spec"] = pod["spec"]
            return pb.Empty()

        def DeletePod(self, request, context):
            pod = json.loads(request.pod)
            key = pod["metadata"]["namespace"] + "/" + pod["metadata"]["name"]
            with self.lock:
                if self.pods.pop(key, None) is None:
                    context.abort(grpc.StatusCode.NOT_FOUND, "pod %s not found" % key)
            return pb.Empty()

        def _get(self, request, context):
            key = request.namespace + "/" + request.name
            with self.lock:
                rec = self.pods.get(key)
            if rec is None:
                context.abort(grpc.StatusCode.NOT_FOUND, "pod %s not found" % key)
            return rec

        def GetPod(self, request, context):
            return pb.PodResponse(pod=json.dumps(self._get(request, context)["pod"]).encode())

        def GetPodStatus(self, request, context):
            return pb.PodStatusResponse(status=json.dumps(self._get(request, context)["pod"]["status"]).encode())

        def ListPods(self, request, context):
            with self.lock:
                return pb.ListPodsResponse(pods=[json.dumps(r["pod"]).encode() for r in self.pods.values()])

        def Ping(self, request, context):
            return pb.Empty()

        def GetContainerLogs(self, request, context):
            rec = self._get(pb.PodRef(namespace=request.namespace, name=request.pod), context)
            for c in rec["pod"]["spec"].get("containers", []):
                if c["name"] == request.container:
                    for line in c.get("args", []):
                        yield pb.Chunk(data=(line + "\n").encode())
                    return
            context.abort(grpc.StatusCode.NOT_FOUND, "container %s not found" % request.container)

        def Exec(self, request_iterator, context):
            start = next(request_iterator).start
            rec = self._get(pb.PodRef(namespace=start.namespace, name=start.pod), context)
            if list(start.command) == ["env"]:
                env = rec["env"].get(start.container, {})
                out = "".join("%s=%s\n" % kv for kv in env.items())
            else:
                out = " ".join(start.command) + "\n"
            if start.stdout:
                yield pb.StreamOutput(stdout=out.encode())
            yield pb.StreamOutput(exit_code=0)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    rpc.add_ProviderServicer_to_server(Provider(), server)
    listen = args.listen
    if listen.startswith("unix://"):
        path = listen[len("unix://"):]
        if os.path.exists(path):
            os.remove(path)
        listen = "unix:" + path
    server.add_insecure_port(listen)
    server.start()
    print("python provider serving on %s" % args.listen, flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    server.stop(grace=2).wait()


if __name__ == "__main__":
    main()
