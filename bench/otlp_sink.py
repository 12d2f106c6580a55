"""A minimal OTLP/HTTP trace receiver for the benchmarks: it accepts every export and
answers an empty `ExportTraceServiceResponse`, counting requests and bytes. It does not
decode the spans (tests/admin/traces.rs does that, with the official protobuf messages); here
it only has to be a cheap, always-available collector so that idem's exporter runs for
real during a measurement."""

import http.server
import threading


class OtlpSink:
    def __init__(self):
        sink = self
        self.requests = 0
        self.bytes = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                sink.requests += 1
                sink.bytes += len(body)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def env(self, ratio):
        """idem's environment for traces sampled at `ratio` (callers send no traceparent,
        so every request is a root and the ratio applies to all)."""
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint(),
            "OTEL_SERVICE_NAME": "idem-bench",
            "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": str(ratio),
        }

    def stop(self):
        self.server.shutdown()
