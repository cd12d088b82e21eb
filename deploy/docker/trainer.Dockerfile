# Trainer sidecar: collects latency samples, retrains and publishes the TTFT/TPOT models (port 8000).
# Build from the repository root (BuildKit reads trainer.Dockerfile.dockerignore beside this file):
#   docker build -f deploy/docker/trainer.Dockerfile -t llmd/trainer:dev .
# Build stage: Debian 12 with the project's own dependency script, so the image builds with
# exactly the packages scripts/build.sh uses. Runtime stage: debian:12-slim with only the
# shared libraries the binary links (tests/deploy/manifests_test.cc checks them against ldd).
FROM debian:12 AS build
ARG DEBIAN_FRONTEND=noninteractive
COPY scripts/install-deps.sh /tmp/install-deps.sh
RUN /tmp/install-deps.sh
COPY . /src
RUN cmake -S /src -B /build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
 && cmake --build /build -j"$(nproc)" --target trainer uvicorn \
 && strip /build/trainer/trainer /build/uvicorn/uvicorn

FROM debian:12-slim
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends libxgboost0 libspdlog1.10 libfmt9 libprometheus-cpp-core1.0 zlib1g \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 65532 llmd \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin llmd
# Models and samples go to the volume mounted here (deploy/base: /var/lib/llmd/trainer).
RUN mkdir -p /var/lib/llmd && chown 65532:65532 /var/lib/llmd
COPY --from=build /build/trainer/trainer /usr/local/bin/trainer
# The charts run the image's entrypoint (binding 0.0.0.0:8000, as the reference image does); a
# manifest that copies the reference image's `uvicorn training_server:app ...` runs too.
COPY --from=build /build/uvicorn/uvicorn /usr/local/bin/uvicorn
USER 65532:65532
EXPOSE 8000
ENTRYPOINT ["/usr/local/bin/trainer"]
