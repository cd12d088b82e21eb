# Predictor sidecar: batched TTFT/TPOT predictions from the trainer's models (port 8001, 8002, ...).
# Build from the repository root (BuildKit reads predictor.Dockerfile.dockerignore beside this file):
#   docker build -f deploy/docker/predictor.Dockerfile -t llmd/predictor:dev .
# Build stage: Debian 12 with the project's own dependency script, so the image builds with
# exactly the packages scripts/build.sh uses. Runtime stage: debian:12-slim with only the
# shared libraries the binary links (tests/deploy/manifests_test.cc checks them against ldd).
FROM debian:12 AS build
ARG DEBIAN_FRONTEND=noninteractive
COPY scripts/install-deps.sh /tmp/install-deps.sh
RUN /tmp/install-deps.sh
COPY . /src
RUN cmake -S /src -B /build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
 && cmake --build /build -j"$(nproc)" --target predictor uvicorn \
 && strip /build/predictor/predictor /build/uvicorn/uvicorn

FROM debian:12-slim
ARG DEBIAN_FRONTEND=noninteractive
# libssl3: common/http's client core (https origins) comes with the model sync's HTTP client.
RUN apt-get update \
 && apt-get install -y --no-install-recommends libxgboost0 libspdlog1.10 libfmt9 libsimdjson14 libprometheus-cpp-core1.0 libssl3 \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 65532 llmd \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin llmd
# Local model copies go to the volume mounted here (deploy/base: /var/lib/llmd/predictor).
RUN mkdir -p /var/lib/llmd && chown 65532:65532 /var/lib/llmd
COPY --from=build /build/predictor/predictor /usr/local/bin/predictor
# The GIE and llm-d charts start predictors with `command: ["uvicorn"]` and uvicorn's arguments:
# this entrypoint maps them onto the predictor (docs/coming-from-upstream.md).
COPY --from=build /build/uvicorn/uvicorn /usr/local/bin/uvicorn
USER 65532:65532
EXPOSE 8001
ENTRYPOINT ["/usr/local/bin/predictor"]
