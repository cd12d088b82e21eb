# EPP: the predicted-latency router (proxy 8080, health 9003, metrics 9090; in gateway mode
# ext_proc on the port --ext-proc-port names, 9002 in deploy/overlays/gateway).
# Build from the repository root (BuildKit reads epp.Dockerfile.dockerignore beside this file):
#   docker build -f deploy/docker/epp.Dockerfile -t llmd/epp:dev .
# Build stage: Debian 12 with the project's own dependency script, so the image builds with
# exactly the packages scripts/build.sh uses. Runtime stage: debian:12-slim with only the
# shared libraries the binary links (tests/deploy/manifests_test.cc checks them against ldd).
FROM debian:12 AS build
ARG DEBIAN_FRONTEND=noninteractive
COPY scripts/install-deps.sh /tmp/install-deps.sh
RUN /tmp/install-deps.sh
COPY . /src
RUN cmake -S /src -B /build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
 && cmake --build /build -j"$(nproc)" --target epp \
 && strip /build/epp/epp

FROM debian:12-slim
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends libyaml-cpp0.7 libspdlog1.10 libfmt9 libprometheus-cpp-core1.0 \
      libnghttp2-14 libprotobuf32 libssl3 zlib1g \
      libxgboost0 \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 65532 llmd \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin llmd
# The shipped configs, as the local stack uses them: the default --config
# (epp/config/local-pool.yaml) resolves from this directory. Kubernetes passes --config.
COPY epp/config/ /usr/share/llmd/epp/config/
WORKDIR /usr/share/llmd
COPY --from=build /build/epp/epp /usr/local/bin/epp
USER 65532:65532
# The image's deployment defaults are upstream's (the Go EPP's), so that a GIE or llm-d chart
# runs it with its own args unchanged: every listener on all addresses, ext_proc (gRPC) on 9002
# over TLS (a self-signed certificate unless --cert-path), /metrics behind Kubernetes
# authentication (the GIE chart passes --metrics-endpoint-auth=false only when its
# monitoring.prometheus.auth.enabled is false; it is true by default).
# The binary's own defaults (loopback, ext_proc off, plaintext, open /metrics) are for a
# developer's machine; deploy/base sets what it uses explicitly.
ENV EPP_HOST=0.0.0.0 EPP_EXT_PROC_PORT=9002 EPP_SECURE_SERVING=true EPP_METRICS_ENDPOINT_AUTH=true
EXPOSE 8080 9002 9003 9090
ENTRYPOINT ["/usr/local/bin/epp"]
