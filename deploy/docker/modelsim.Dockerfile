# modelsim: simulated vLLM pool for trying the EPP without GPUs (pod i on 9100 + i).
# Build from the repository root (BuildKit reads modelsim.Dockerfile.dockerignore beside this file):
#   docker build -f deploy/docker/modelsim.Dockerfile -t llmd/modelsim:dev .
# Build stage: Debian 12 with the project's own dependency script, so the image builds with
# exactly the packages scripts/build.sh uses. Runtime stage: debian:12-slim with only the
# shared libraries the binary links (tests/deploy/manifests_test.cc checks them against ldd).
FROM debian:12 AS build
ARG DEBIAN_FRONTEND=noninteractive
COPY scripts/install-deps.sh /tmp/install-deps.sh
RUN /tmp/install-deps.sh
COPY . /src
RUN cmake -S /src -B /build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
 && cmake --build /build -j"$(nproc)" --target modelsim \
 && strip /build/bench/modelsim/modelsim

FROM debian:12-slim
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends libspdlog1.10 libfmt9 libprometheus-cpp-core1.0 \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 65532 llmd \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin llmd
COPY --from=build /build/bench/modelsim/modelsim /usr/local/bin/modelsim
USER 65532:65532
EXPOSE 9100
ENTRYPOINT ["/usr/local/bin/modelsim"]
